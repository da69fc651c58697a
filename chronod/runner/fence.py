"""The fence between a daemon and the launchers of the daemons before it.

A launcher (or per-run supervisor) outlives the daemon that started it, and requests
that daemon queued may still be waiting in its socket when a new daemon takes over and
settles those runs (`lost`, or a new attempt). So every launch request carries the
generation of the daemon that sent it (its fencing token), and the state directory holds
the generation of the daemon that owns it now (the last one to take it over: two live
daemons never share a state directory, the node lease sees to that):

    <state_dir>/generation    the current owner's generation, as decimal text

A launcher starts a job only under a shared lock on that file, after checking that no
newer generation owns the directory, and writes the run's `started` record before it lets
go. A new daemon writes its generation under the exclusive lock (`take_over`) before it
settles any run: once it holds the lock, every start already under way has its `started`
record (the run is adopted, not settled), and every later request of another generation is
refused. A launcher that holds the lock and does not let go (stopped with SIGSTOP in
the middle of a start) is killed: its runs are then settled as the runs of a dead
launcher are, their processes killed first. A job's child (forked, or spawned into its
cgroup) shares the lock until its exec (the descriptor is close-on-exec), so a start cut
short by that kill has either not reached the exec, or exec'd in the run's cgroup with
the run's tag before the new daemon goes on; either way what is left of it is killed before the run is settled. So a
run settled by the new daemon may have started before (its outcome is unknown: `lost`, or
a new attempt), never after.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from types import TracebackType

GENERATION = "generation"
TAKE_OVER_WAIT_S = 5.0


def _open(state_dir: str, create: bool = False) -> int:
    """The generation file (created only by `take_over`: a state directory no daemon
    fenced yet has none, and any start is allowed)."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
    return os.open(os.path.join(state_dir, GENERATION), flags, 0o600)


def _read(fd: int) -> int:
    text = os.pread(fd, 32, 0).strip()
    try:
        return int(text or b"0")
    except ValueError:
        return 0


class StartGate:
    """`with StartGate(state_dir) as gate: if not gate.fenced(gen): start...`: the shared
    lock held around one start, or a launcher's turn of starts (the checks, the spawns,
    the `started` records)."""

    def __init__(self, state_dir: str, fd: int | None = None):
        self.state_dir = state_dir
        self._own = fd is None
        self.fd = fd
        self.current = 0

    def __enter__(self) -> StartGate:
        try:
            if self.fd is None:
                self.fd = _open(self.state_dir)
            fcntl.flock(self.fd, fcntl.LOCK_SH)
            self.current = _read(self.fd)
        except OSError:
            self.current = 0  # no state directory to fence: nothing newer can own it either
        return self

    def fenced(self, generation: int) -> bool:
        """Whether another daemon than the one of `generation` owns the state directory
        (not only a greater number: a database restored or recreated next to its state
        directory starts its tokens again from 1)."""
        return self.current != 0 and self.current != generation

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.fd is None:
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        except OSError:
            pass
        if self._own:
            os.close(self.fd)
            self.fd = None


def take_over(state_dir: str, generation: int, wait_s: float = TAKE_OVER_WAIT_S) -> list[int]:
    """Make `generation` the owner of `state_dir`: from now on no launcher of an older
    daemon starts anything. Returns the pids of launchers killed because they held the
    lock past `wait_s` (stopped in the middle of a start)."""
    fd = _open(state_dir, create=True)
    killed: list[int] = []
    try:
        end = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < end:
                    time.sleep(0.01)
                    continue
            for pid in holders(fd):
                if pid != os.getpid():
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    except (ProcessLookupError, PermissionError):
                        pass
            fcntl.flock(fd, fcntl.LOCK_EX)  # the holders are gone: their locks went with them
            break
        if _read(fd) != generation:
            data = str(generation).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
    finally:
        os.close(fd)  # closing the last descriptor lets the lock go
    return killed


def current(state_dir: str) -> int:
    """The generation that owns `state_dir` (0: none yet)."""
    try:
        fd = os.open(os.path.join(state_dir, GENERATION), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        return _read(fd)
    finally:
        os.close(fd)


def holders(fd: int) -> list[int]:
    """The pids holding a lock on the file open as `fd` (from /proc/locks)."""
    st = os.fstat(fd)
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    found = []
    try:
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == want and parts[4].isdigit():
                    found.append(int(parts[4]))
    except OSError:
        pass
    return found
