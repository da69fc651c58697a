"""A clock set on the host (an NTP step) must never stop the daemon's loop."""

from __future__ import annotations

import ctypes
import errno
from datetime import datetime, timedelta, timezone

import pytest

from chronod.daemon import kernel

REAL = kernel._libc


class _Libc:
    """timerfd_settime failing with `err` the first `fails` times, then the real call."""

    def __init__(self, fails: int, err: int):
        self.fails, self.err, self.calls = fails, err, 0

    def timerfd_settime(self, *args):
        self.calls += 1
        if self.calls <= self.fails:
            ctypes.set_errno(self.err)
            return -1
        return REAL.timerfd_settime(*args)


def test_a_timer_cancelled_by_a_clock_change_is_armed_again(monkeypatch):
    timer = kernel.WallTimer()
    fake = _Libc(fails=1, err=errno.ECANCELED)
    monkeypatch.setattr(kernel, "_libc", fake)
    try:
        timer.arm(datetime.now(timezone.utc) + timedelta(seconds=60))
        assert fake.calls == 2
    finally:
        timer.close()


def test_other_errors_still_raise(monkeypatch):
    timer = kernel.WallTimer()
    monkeypatch.setattr(kernel, "_libc", _Libc(fails=5, err=errno.EINVAL))
    try:
        with pytest.raises(OSError):
            timer.arm(datetime.now(timezone.utc))
    finally:
        timer.close()
