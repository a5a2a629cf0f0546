"""Messages the platform writes once and readers see in their own language: waiting
reasons, events, restart causes, spec errors.

The cores (scheduler, market, lifecycle) make their messages in English with `say`, and the
services store that English text (a job's reason, an event's message) as they always have:
search, logs and the stored rows stay in one language. A reader's language is applied when a
message is shown: `Phrasebook.translate` matches the English text against the templates of
the catalogue (the gettext catalogue the console already has; `make messages` extracts each
`say` template into it) and fills the translated template with the same values.

A placeholder whose name ends in `reason`, `message` or `needs` holds a message of its own
(an exit reason inside a restart event, what a job needs inside "no node has room: …"): it is
translated in turn. Any other value (a job's name, a price, an amount) is shown as it was
written; {field} holds a parameter's name and {code} a code (`VALUES`).

Pure Python: no Django. apps/core/i18n.py gives it the active language's catalogue.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from string import Formatter

NESTED = re.compile(r"(reason|message|needs)$")  # placeholders that hold a message of their own
# What some placeholders can hold, so that "{field}: {message}" does not take "a: b; c: d"
# for one field: a parameter's name (JobSpecs[0].PodCount), a code (OOMKilled, 137).
VALUES = {"field": r"[\w.\[\]-]+", "code": r"-?[\w.]+"}
_FIELD = re.compile(r"\{(\w+)\}")


def say(template: str, /, **values: object) -> str:
    """The English text of a message: `template` ("blocked behind {job} (StrictFIFO)") with
    its {placeholders} filled. The template is the catalogue's msgid, so write it as a literal
    at the call: `make messages` finds it there."""
    return template.format(**values) if values else template


def say_n(count: int, singular: str, plural: str, /, **values: object) -> str:
    """`say` for a message about `count` things: the singular template for 1, else the
    plural. `count` fills {count}."""
    return (singular if count == 1 else plural).format(count=count, **values)


def joined(messages: list[str]) -> str:
    """Several messages as one ("a; b; c"), each translated on its own."""
    if len(messages) <= 1:
        return messages[0] if messages else ""
    return say("{message}; {more_message}", message=messages[0], more_message=joined(messages[1:]))


def fields(template: str) -> list[str]:
    """The placeholder names of a template, in order (a repeated name once per use)."""
    return [name for _, name, _, _ in Formatter().parse(template) if name is not None]


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    translated: str
    literal: int  # how much fixed text it has: the most specific pattern is tried first


def _pattern(template: str, translated: str) -> _Pattern | None:
    parts, seen, literal = [], set(), 0
    for text, name, spec, conversion in Formatter().parse(template):
        parts.append(re.escape(text))
        literal += len(text)
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            return None  # not a template `say` writes
        value = VALUES.get(name, ".+?")
        parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>{value})")
        seen.add(name)
    if not seen:
        return None
    return _Pattern(re.compile("".join(parts), re.DOTALL), translated, literal)


class Phrasebook:
    """One language's translations of the messages: plain ones by their exact text, templates
    by matching. Build it once per catalogue; `translate` is cheap."""

    def __init__(self, catalogue: Iterable[tuple[str, str]]) -> None:
        self._exact: dict[str, str] = {}
        patterns: list[_Pattern] = []
        for msgid, msgstr in catalogue:
            if not msgid or not msgstr:
                continue
            if "{" in msgid and _FIELD.search(msgid):
                if sorted(set(fields(msgid))) != sorted(set(fields(msgstr))):
                    continue  # a translation that lost or invented a value: keep the English
                pattern = _pattern(msgid, msgstr)
                if pattern is not None:
                    patterns.append(pattern)
            else:
                self._exact[msgid] = msgstr
        patterns.sort(key=lambda p: -p.literal)
        self._patterns = patterns
        self._seen: dict[str, str] = {}  # the same few reasons are shown on every page

    def translate(self, text: str) -> str:
        """`text` in this language where the catalogue knows its message, else unchanged."""
        if not text:
            return text
        found = self._exact.get(text)
        if found is None:
            found = self._seen.get(text)
        if found is None:
            found = self._match(text)
            if len(self._seen) >= 10_000:
                self._seen.clear()
            self._seen[text] = found
        return found

    def _match(self, text: str) -> str:
        for pattern in self._patterns:
            match = pattern.regex.fullmatch(text)
            if match is None:
                continue
            values = {
                name: self.translate(value) if NESTED.search(name) else value
                for name, value in match.groupdict().items()
            }
            return pattern.translated.format(**values)
        return text


def phrasebook(catalogue: Mapping[str, str]) -> Phrasebook:
    return Phrasebook(catalogue.items())
