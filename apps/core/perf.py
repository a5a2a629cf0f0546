"""Helpers for the periodic ticks that handle tens of thousands of rows at once."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bulk step (a context manager or, as
    `@gc_paused()`, a decorator).

    A market or scheduler tick builds hundreds of thousands of short-lived objects (rows,
    requests, plan entries); each allocation burst triggers collections that walk them all
    again, which measured as the largest single cost of the market snapshot. The objects
    hold no reference cycles, so reference counting frees them; the collector resumes when
    the outermost pause ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
