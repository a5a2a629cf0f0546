"""CSV exports that a spreadsheet opens as data, never as formulas (CSV injection)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence

# A text cell that starts with one of these is a formula, or becomes one, in Excel,
# LibreOffice and Google Sheets (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: object) -> object:
    """The cell, with a leading `'` if it is text a spreadsheet would run; numbers (an int,
    a Decimal) are left as they are, so a negative amount stays a number."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


class _Echo:
    """csv.writer writes into this and gets the line back, for streaming."""

    def write(self, value: str) -> str:
        return value


def csv_lines(rows: Iterable[Sequence[object]]) -> Iterator[str]:
    """`rows` as CSV lines, every cell through `csv_safe`: what every CSV export streams."""
    writer = csv.writer(_Echo())
    for row in rows:
        yield writer.writerow([csv_safe(cell) for cell in row])
