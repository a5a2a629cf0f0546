"""A progress bar for long runs, redrawn in place at most a few times a second."""

from __future__ import annotations

import time
from collections.abc import Callable


class Bar:
    """Call it with (done, total); `write` takes text as is (no line ending added)."""

    def __init__(
        self, label: str, write: Callable[[str], object], *, width: int = 30, every: float = 0.2
    ) -> None:
        self.label = label
        self.write = write
        self.width = width
        self.every = every
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < self.every and done < total:
            return
        self.last = now
        share = done / total if total else 1.0
        filled = int(share * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        self.write(f"\r{self.label} [{bar}] {share:4.0%}")
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.write("\n")
