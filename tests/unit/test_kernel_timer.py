"""The wall-clock timer survives a clock change between two arms (settime says ECANCELED)."""

from __future__ import annotations

import ctypes
import errno
from datetime import UTC, datetime, timedelta

import pytest

from chronod.daemon import kernel


class _Libc:
    """timerfd_settime failing with `errors` first, then succeeding."""

    def __init__(self, real, errors):
        self.real, self.errors, self.calls = real, list(errors), 0

    def timerfd_settime(self, *args):
        self.calls += 1
        if self.errors:
            ctypes.set_errno(self.errors.pop(0))
            return -1
        return self.real.timerfd_settime(*args)


def test_arm_after_a_clock_change_clears_the_cancel_and_arms(monkeypatch):
    timer = kernel.WallTimer()
    fake = _Libc(kernel._libc, [errno.ECANCELED])
    monkeypatch.setattr(kernel, "_libc", fake)
    try:
        timer.arm(datetime.now(UTC) + timedelta(hours=1))
    finally:
        timer.close()
    assert fake.calls == 2


def test_arm_still_raises_other_errors(monkeypatch):
    timer = kernel.WallTimer()
    monkeypatch.setattr(kernel, "_libc", _Libc(kernel._libc, [errno.EINVAL]))
    try:
        with pytest.raises(OSError) as e:
            timer.arm(datetime.now(UTC) + timedelta(hours=1))
    finally:
        timer.close()
    assert e.value.errno == errno.EINVAL
