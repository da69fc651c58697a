"""Ctrl-C in a command that polls (`logs -f`, `backfill --wait`): the interrupt lands where
the command waits between polls, never in the middle of a database call, where it could
leave a connection pool's lock held and the process hung on its way out. A second Ctrl-C
while a call is slow interrupts it at once."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _Interrupt:
    pending = False  # Ctrl-C seen outside a pause: raised at the next one
    pausing = False


_state = _Interrupt()


def _on_sigint(_signum: int, _frame: Any) -> None:
    if _state.pausing or _state.pending:
        raise KeyboardInterrupt
    _state.pending = True


@contextmanager
def interrupted_at_pauses() -> Iterator[None]:
    """While inside, Ctrl-C raises KeyboardInterrupt only from `pause` (or at a second Ctrl-C)."""
    previous = signal.signal(signal.SIGINT, _on_sigint)
    _state.pending = False
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _state.pending = False


def pause(seconds: float) -> None:
    """Sleep between two polls; the place a Ctrl-C ends the command."""
    if _state.pending:
        raise KeyboardInterrupt
    _state.pausing = True
    try:
        time.sleep(seconds)
    finally:
        _state.pausing = False
