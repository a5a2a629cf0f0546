"""The console's translations: the gettext catalogues under LOCALE_PATHS (locale/<lang>/
LC_MESSAGES/django.po), compiled to the .mo files Django reads.

Compiled with polib, so neither the install nor the tests need GNU gettext. Only a .mo
older than its .po is written again.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polib


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
    base = Path(__file__).resolve().parents[2]
    for path in compile_catalogues([base / "locale"]):
        print(f"compiled {path.relative_to(base)}")
