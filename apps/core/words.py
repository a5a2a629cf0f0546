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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from string import Formatter

NESTED = re.compile(r"(reason|message|needs)$")  # placeholders that hold a message of their own
# What some placeholders can hold, so that "{field}: {message}" does not take "a: b; c: d"
# for one field: a parameter's name (JobSpecs[0].PodCount), a code (OOMKilled, 137), a node's
# name (no space: "{node} ×{count} (In Quota)" must not take "Scheduled on a ×1 (In Quota);
# b" for one node), a count, a checkpoint's step ("Resuming from checkpoint at step {step}"
# must not take "220: passed over ckpt-….pkl" for a step inside "{message} ({reason})").
VALUES = {
    "field": r"[\w.\[\]-]+",
    "code": r"-?[\w.]+",
    "type": r"\S+",
    "node": r"\S+",
    "count": r"[\d,]+",
    "step": r"-?\d+",
}
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
    """Several messages as one ("a; b; c"), each translated on its own: the template
    "{message}; {more_message}" holding the first and the rest joined, at every step. Its
    text is the messages and a separator, written in one pass: a list of thousands (one per
    role of a 2 MiB request) must not recurse once per message."""
    separator = say("{message}; {more_message}", message="", more_message="")
    return separator.join(messages)


def fields(template: str) -> list[str]:
    """The placeholder names of a template, in order (a repeated name once per use)."""
    return [name for _, name, _, _ in Formatter().parse(template) if name is not None]


MAX_READINGS = 64  # ways to split one text by one template: enough for any message here
# A text is read within this many steps (ways tried to split it, inner texts included), or
# shown as written: a job named "a (b (c (…" must not make every page that names it slow.
MAX_STEPS = 20_000
MAX_DEPTH = 12  # messages inside messages: a few levels in anything the platform writes


# translated, all of it known, messages read, and minus the characters left as plain values
_Reading = tuple[str, bool, int, int]


class _Exhausted(Exception):
    pass


class _Steps:
    def __init__(self, left: int) -> None:
        self.left = left

    def take(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _Exhausted


@dataclass(frozen=True)
class _Pattern:
    """A template as its fixed texts and the placeholders between them."""

    texts: tuple[str, ...]  # len(names) + 1 of them: before, between and after the values
    names: tuple[str, ...]
    translated: str
    literal: int  # how much fixed text it has: the most specific pattern is tried first

    @property
    def generic(self) -> bool:
        """Only punctuation between its values ("{message} ({reason})"): it says nothing
        of its own, so it reads a text only where it knows a message inside."""
        return not any(c.isalpha() for c in "".join(self.texts))

    def readings(self, text: str, steps: _Steps) -> Iterator[dict[str, str]]:
        """Every way `text` fills the template (values non-empty; a repeated name the same;
        a name of `VALUES` of its kind), shortest first value first."""
        first, last = self.texts[0], self.texts[-1]
        if not text.startswith(first) or not text.endswith(last) or len(text) <= self.literal:
            return
        found = 0
        for values in self._fill(text, len(first), 0, {}, steps):
            yield values
            found += 1
            if found >= MAX_READINGS:
                return

    def _fill(
        self, text: str, at: int, i: int, values: dict[str, str], steps: _Steps
    ) -> Iterator[dict[str, str]]:
        name, after = self.names[i], self.texts[i + 1]
        last = i == len(self.names) - 1
        ends = [len(text) - len(after)] if last else _finds(text, after, at + 1)
        for end in ends:
            steps.take()
            value = text[at:end]
            if not value or (name in values and values[name] != value):
                continue
            if name in VALUES and not re.fullmatch(VALUES[name], value):
                continue
            filled = {**values, name: value}
            if last:
                yield filled
            else:
                yield from self._fill(text, end + len(after), i + 1, filled, steps)


def _finds(text: str, part: str, start: int) -> Iterator[int]:
    at = text.find(part, start)
    while at != -1:
        yield at
        at = text.find(part, at + 1)


def _pattern(template: str, translated: str) -> _Pattern | None:
    texts: list[str] = [""]
    names: list[str] = []
    for text, name, spec, conversion in Formatter().parse(template):
        texts[-1] += text
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion or texts[-1] == "" and names:
            return None  # not a template `say` writes (two values side by side cannot split)
        names.append(name)
        texts.append("")
    if not names:
        return None
    return _Pattern(tuple(texts), tuple(names), translated, sum(map(len, texts)))


class Phrasebook:
    """One language's translations of the messages: plain ones by their exact text, templates
    by matching. Build it once per catalogue; `translate` is cheap.

    Where a text matches several templates (or one template in two ways), a reading that
    knows every inner message wins over one that does not; among those, the one that reads
    the most messages in all (so "a; b" reads as two known messages, not as one template
    whose plain value swallowed "a; " — a job's or a node's name); then the one that leaves
    the least of the text to plain values (so "x: a0; a0 ×1 (In Quota)" reads as "x: a0"
    and a node's placement, not as "x: {example}" holding "a0; a0 ×1" and a reason "In
    Quota"); among equals, the most specific. A pod's own words stay as written."""

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
        self._seen: dict[str, _Reading] = {}  # the same few reasons on every page

    def translate(self, text: str) -> str:
        """`text` in this language where the catalogue knows its message, else unchanged."""
        if not text:
            return text
        try:
            return self._read(text, _Steps(MAX_STEPS))[0]
        except _Exhausted:
            self._remember(text, (text, False, 0, -len(text)))
            return text

    def _read(self, text: str, steps: _Steps, depth: int = 0) -> _Reading:
        """`text` translated, whether all of it was known, and how many messages it read."""
        found = self._exact.get(text)
        if found is not None:
            return found, True, 1, 0
        read = self._seen.get(text)
        if read is None:
            if depth > MAX_DEPTH:
                return text, False, 0, -len(text)
            read = self._match(text, steps, depth)
            self._remember(text, read)
        return read

    def _remember(self, text: str, read: _Reading) -> None:
        if len(self._seen) >= 10_000:
            self._seen.clear()
        self._seen[text] = read

    def _match(self, text: str, steps: _Steps, depth: int) -> _Reading:
        best: _Reading | None = None
        for pattern in self._patterns:
            for found in pattern.readings(text, steps):
                known, unknown, messages, values = 0, 0, 0 if pattern.generic else 1, {}
                explained = 0
                for name, value in found.items():
                    if NESTED.search(name):
                        value, whole, inner, left = self._read(value, steps, depth + 1)
                        known, unknown = known + whole, unknown + (not whole)
                        messages += inner
                        explained += left
                    else:
                        explained -= len(value)
                    values[name] = value
                if pattern.generic and not known:
                    continue
                translated = pattern.translated.format(**values)
                reading = (translated, not unknown, messages, explained)
                if best is None or reading[1:] > best[1:]:
                    best = reading
        return best if best is not None else (text, False, 0, -len(text))
