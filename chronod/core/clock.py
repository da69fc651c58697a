"""The one place time comes from: a real clock and a fake one for tests."""

from __future__ import annotations

import time
from datetime import datetime, timezone


class Clock:
    """Wall time (UTC, aware) and monotonic seconds, read only through this object."""

    def now(self) -> datetime:
        """The current wall time as an aware UTC datetime."""
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never go backwards."""
        return time.monotonic()


class FakeClock(Clock):
    """A clock that moves only when told to; `advance()` moves both readings."""

    def __init__(self, start: datetime, mono: float = 1000.0):
        if start.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        self._now = start.astimezone(timezone.utc)
        self._mono = mono

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        """Move wall and monotonic time forward together."""
        from datetime import timedelta

        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def jump_wall(self, seconds: float) -> None:
        """Move only the wall clock (a clock step), as NTP or an operator would."""
        from datetime import timedelta

        self._now += timedelta(seconds=seconds)
