"""Launches without processes, in real time: a runner for measuring what a fleet's
database and nodes can coordinate when starting a job costs nothing.

`SimulatedLaunches` is a `chronod.daemon.seams.Runner` that forks and executes nothing:
each attempt "runs" for `duration_s` and exits 0. Everything around the launch is the real
daemon's: the claim, the attempt row, the ending recorded, the notifier's round. As with
the launcher for many runs (chronod's default), the handle names the supervisor's pid but
not the job's, so no process ids are stored at the start. The handle's descriptor is a timerfd that becomes readable when the
attempt "ends", as a pidfd or a launcher's end pipe does for a real one, so the loop sleeps
and wakes exactly as it does with real children.

A daemon that used it in production would record runs that never ran as succeeded. So
nothing in chronod reaches it: no option, no environment variable, no configuration.
Only a program that builds the daemon itself passes it in (`bench/chronod_simulated.py`,
through `chronod.daemon.main.main(make_runner=...)`), and that program is not installed.
"""

from __future__ import annotations

import ctypes
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from chronod.core.clock import Clock
from chronod.core.model import RunState
from chronod.runner.api import Handle, LaunchRequest, Outcome

# Above the largest pid_max Linux allows (2**22): a "supervisor pid" of a simulated attempt
# can never name a real process, so nothing that reads it back can signal one.
FIRST_PID = 2**22 + 1

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(None, use_errno=True)


def _timer(after_s: float) -> int:
    """A timerfd readable `after_s` seconds from now (at least 1 ns: 0 would disarm it)."""
    fd = int(_libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"timerfd_create: {os.strerror(err)}")
    _arm(fd, after_s)
    return fd


def _arm(fd: int, after_s: float) -> None:
    ns = max(int(after_s * 1e9), 1)
    spec = _Itimerspec(_Timespec(0, 0), _Timespec(ns // 1_000_000_000, ns % 1_000_000_000))
    if _libc.timerfd_settime(fd, 0, ctypes.byref(spec), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"timerfd_settime: {os.strerror(err)}")


def _expired(fd: int) -> bool:
    try:
        os.read(fd, 8)
    except BlockingIOError:
        return False
    return True


@dataclass
class _Attempt:
    handle: Handle
    cancelled: bool = False


class SimulatedLaunches:
    """A runner whose attempts run for `duration_s` without a process and exit 0."""

    def __init__(self, state_dir: Path, duration_s: float = 0.1, clock: Clock | None = None):
        if duration_s < 0:
            raise ValueError(f"a simulated run lasts 0 s or more, not {duration_s}")
        self._state_dir = Path(state_dir).absolute()
        self._state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.duration_s = duration_s
        self._clock = clock or Clock()
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        self._next_pid = FIRST_PID

    @property
    def state_dir(self) -> Path:
        return self._state_dir

    def launch(self, req: LaunchRequest) -> Handle:
        key = (req.run_id, req.attempt)
        if key in self._attempts:
            raise ValueError(f"run {req.run_id} attempt {req.attempt} is already running under this runner")
        pid, self._next_pid = self._next_pid, self._next_pid + 1
        handle = Handle(req.run_id, req.attempt, pid, None, self._clock.now(), _timer(self.duration_s))
        self._attempts[key] = _Attempt(handle)
        return handle

    def cancel(self, handle: Handle) -> None:
        """The attempt ends now, `cancelled` (as SIGTERM to a real one would end it)."""
        attempt = self._attempts.get((handle.run_id, handle.attempt))
        if attempt is not None and handle.fd >= 0:
            attempt.cancelled = True
            _arm(handle.fd, 0)

    def collect(self, handle: Handle) -> Outcome | None:
        attempt = self._attempts.get((handle.run_id, handle.attempt))
        if attempt is None or handle.fd < 0 or not _expired(handle.fd):
            return None
        del self._attempts[(handle.run_id, handle.attempt)]
        os.close(handle.fd)
        handle.fd = -1
        if attempt.cancelled:
            state, code, sig = RunState.CANCELLED, None, int(signal.SIGTERM)
        else:
            state, code, sig = RunState.SUCCEEDED, 0, None
        return Outcome(
            handle.run_id,
            handle.attempt,
            state,
            code,
            sig,
            handle.started_at,
            self._clock.now(),
            "",
            0,
            None,
            handle.pid,
        )

    def adopt(self, run_id: str, attempt: int) -> Handle | Outcome | None:
        """Nothing outlives the daemon that simulated it: an earlier daemon's attempt is unknown."""
        return None

    def orphans(self, known: Iterable[tuple[str, int]] = ()) -> list[tuple[str, int]]:
        return []

    def discard(self, run_id: str, attempt: int) -> None:
        """No files to remove."""

    def close(self) -> None:
        for attempt in self._attempts.values():
            if attempt.handle.fd >= 0:
                os.close(attempt.handle.fd)
                attempt.handle.fd = -1
        self._attempts.clear()
