"""The console's translations: the gettext catalogues under LOCALE_PATHS (locale/<lang>/
LC_MESSAGES/django.po), compiled to the .mo files Django reads.

Compiled with polib, so neither the install nor the tests need GNU gettext. Only a .mo
older than its .po is written again.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polib

LANGUAGES = ["zh_Hans"]  # the catalogues kept besides English, the source language
# What `extract_messages` leaves out: code that is not the console's, and installed trees.
EXTRACT_IGNORE = [
    "tests",
    "benchmarks",
    "examples",
    "var",
    "static",
    "staticfiles",
    "deploy",
    "node_modules",
    ".venv",
    ".venv-*",
]


def extract_messages(base: Path) -> None:
    """Bring every catalogue up to date with the console's text (Django's makemessages,
    which needs GNU gettext's xgettext and msgmerge): new messages come in untranslated,
    vanished ones go. Run from `make messages`; then translate what is new."""
    import os

    import django
    from django.core.management import call_command

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")
    django.setup()
    here = Path.cwd()
    os.chdir(base)
    try:
        call_command(
            "makemessages",
            locale=LANGUAGES,
            no_obsolete=True,
            ignore_patterns=EXTRACT_IGNORE,
            verbosity=0,
        )
    finally:
        os.chdir(here)


def catalogues(locale_dirs: Iterable[Path]) -> list[Path]:
    """Every .po file under the locale directories."""
    return sorted(po for base in locale_dirs for po in Path(base).glob("*/LC_MESSAGES/*.po"))


def compile_catalogues(locale_dirs: Iterable[Path], *, force: bool = False) -> list[Path]:
    """Compile each stale (or, with `force`, every) catalogue; the .mo files written."""
    written = []
    for po_path in catalogues(locale_dirs):
        mo_path = po_path.with_suffix(".mo")
        if not force and mo_path.exists() and mo_path.stat().st_mtime >= po_path.stat().st_mtime:
            continue
        catalogue = polib.pofile(str(po_path))
        tmp = mo_path.with_suffix(".mo.tmp")
        catalogue.save_as_mofile(str(tmp))
        tmp.replace(mo_path)
        written.append(mo_path)
    return written


if __name__ == "__main__":  # `python -m apps.core.translations`: the install's step, no Django
    import sys

    base = Path(__file__).resolve().parents[2]
    if sys.argv[1:] == ["--extract"]:  # `make messages`
        extract_messages(base)
    for path in compile_catalogues([base / "locale"]):
        print(f"compiled {path.relative_to(base)}")
