"""Linux facilities the loop waits on, through ctypes: a wall-clock timerfd that wakes at
an absolute time (and early when the clock is set), and inotify on the registry."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import gc
import os
import sys
import threading
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)

CLOCK_REALTIME = 0
TFD_CLOEXEC = 0o2000000
TFD_NONBLOCK = 0o4000
TFD_TIMER_ABSTIME = 1
TFD_TIMER_CANCEL_ON_SET = 2

IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class WallTimer:
    """A timerfd on CLOCK_REALTIME: readable at an absolute wall time, or at once when
    someone sets the clock (so a clock jump is noticed without polling)."""

    def __init__(self) -> None:
        fd = _libc.timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd = fd

    def arm(self, at: datetime | None) -> None:
        """Fire at `at` (aware); None disarms."""
        spec = _Itimerspec()
        if at is not None:
            ts = max(at.timestamp(), 1e-9)
            spec.it_value.tv_sec = int(ts)
            spec.it_value.tv_nsec = max(int((ts - int(ts)) * 1e9), 1 if int(ts) == 0 else 0)
        flags = TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET
        for _ in range(2):
            if _libc.timerfd_settime(self.fd, flags, ctypes.byref(spec), None) == 0:
                return
            err = ctypes.get_errno()
            if err != errno.ECANCELED:
                break
            # The clock was set since the timer was last read: reading clears that, and the
            # wake-up it would have caused has happened anyway (the loop is re-arming).
            self.drain()
        raise OSError(err, "timerfd_settime failed")

    def drain(self) -> None:
        try:
            os.read(self.fd, 8)
        except OSError:
            pass  # EAGAIN, or ECANCELED after a clock change: either way, re-arm

    def close(self) -> None:
        os.close(self.fd)


class DirWatch:
    """inotify on a registry directory (and its parent, so a replaced directory is seen)."""

    def __init__(self, paths: list[Path]):
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        mask = (
            IN_MODIFY
            | IN_ATTRIB
            | IN_CLOSE_WRITE
            | IN_MOVED_FROM
            | IN_MOVED_TO
            | IN_CREATE
            | IN_DELETE
            | IN_DELETE_SELF
            | IN_MOVE_SELF
        )
        for p in paths:
            target = p if p.is_dir() else p.parent
            _libc.inotify_add_watch(fd, os.fsencode(str(target)), mask)

    def drain(self) -> bool:
        """Consume pending events; True if there were any."""
        got = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return got
            if not data:
                return got
            got = True

    def close(self) -> None:
        os.close(self.fd)


def boot_time() -> float:
    """When this boot started, as a Unix time (btime in /proc/stat)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def rss_bytes() -> int:
    """This process's resident memory."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


M_ARENA_MAX = -8  # glibc mallopt parameter
SWITCH_INTERVAL_S = 0.0005


def favour_the_loop() -> None:
    """Hand the interpreter lock between threads every 0.5 ms instead of 5 ms.

    The loop releases the lock at each of its system calls (a launch makes dozens) and
    waits up to the switch interval to get it back while another thread computes: the
    reload's preparation, the notifier's round over 100,000 jobs, the pruner's read of
    every job. At 5 ms an `@every 1s` job started up to 925 ms late beside them. The
    interval matters only while two threads want the lock; the cost is a few more
    switches then."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def share_malloc_arena() -> bool:
    """Make every thread allocate from glibc's main arena (call before starting threads).

    By default each thread that mallocs gets its own 64 MB arena; the notifier's and the
    pruner's rounds over 100,000 jobs leave their arenas fragmented, and the daemon's RSS
    grew by a hundred MB per reload. False where the C library has no mallopt (not glibc)."""
    mallopt = getattr(_libc, "mallopt", None)
    return bool(mallopt is not None and mallopt(M_ARENA_MAX, 1) == 1)


def trim_heap() -> None:
    """Give the free memory at the top of the heaps back to the system (glibc only)."""
    trim = getattr(_libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


_held = [0]  # how many builders hold collections now (start-up, the notifier's full round)
_held_lock = threading.Lock()


@contextmanager
def collections_held() -> Iterator[None]:
    """No garbage collection inside (on any thread), and what the heap holds when the last
    holder leaves kept (`keep_heap`): start-up builds a heap of millions of long-lived
    objects (100,000 jobs), and so does the notifier's round over every job; each full
    collection on the way walked all of them again (about a second of a warm start's CPU,
    and the loop waited on each). Such a build leaves a few dozen objects in reference
    cycles, no more. The memory it freed is then given back to the system: the settled
    daemon's RSS was 16 % above what it came to after a reload, which trims."""
    with _held_lock:
        _held[0] += 1
        gc.disable()
    try:
        yield
    finally:
        with _held_lock:
            _held[0] -= 1
            if not _held[0]:
                keep_heap()
                gc.enable()
                # what the build freed goes back to the system, off this thread
                threading.Thread(target=trim_heap, name="chronod-trim", daemon=True).start()


def keep_heap() -> None:
    """Keep what the heap holds now out of every later collection (`gc.freeze`). A full
    collection walks every tracked object while holding the interpreter: over the
    millions of a daemon of 100,000 jobs that took 0.2-0.9 s, on whichever thread it fell
    (the notifier's, a reload's), and the loop started an `@every 1s` job that much late.
    Frozen objects are still freed when their last reference goes; only a reference cycle
    among them stays (a reload leaves a few dozen). Called once start-up has built its
    heap and after each reload is swapped in."""
    gc.freeze()
