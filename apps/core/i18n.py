"""The stored English messages (apps/core/words.py) in the reader's language: the active one
(a page's reader, or an API call's Accept-Language), from the compiled catalogues under
LOCALE_PATHS."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import polib
from django.conf import settings
from django.utils import translation

from apps.core.words import Phrasebook


def localized(text: str) -> str:
    """`text`, a message the platform wrote in English, in the active language."""
    book = _book(translation.get_language() or settings.LANGUAGE_CODE)
    return book.translate(text) if book is not None and text else text


@lru_cache(maxsize=8)
def _book(language: str) -> Phrasebook | None:
    if language.split("-")[0] == "en":
        return None
    locale = translation.to_locale(language)
    entries: list[tuple[str, str]] = []
    for base in settings.LOCALE_PATHS:
        path = Path(base) / locale / "LC_MESSAGES" / "django.mo"
        if not path.exists():
            continue
        for entry in polib.mofile(str(path)):
            if entry.msgid_plural:  # one form in the languages kept here: both Englishes map to it
                forms = entry.msgstr_plural
                entries += [(entry.msgid, forms[0]), (entry.msgid_plural, forms[max(forms)])]
            else:
                entries.append((entry.msgid, entry.msgstr))
    return Phrasebook(entries) if entries else None
