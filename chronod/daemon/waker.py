"""What the loop sleeps on: one selector over a wall-clock timer, the signals, the
supervisors' pidfds and the registry watch. `Waker.wait` blocks until the earliest of
them and says what happened; it never returns for nothing but a deadline."""

from __future__ import annotations

import selectors
import signal
import socket
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from chronod.runner.api import Handle

if TYPE_CHECKING:
    from chronod.daemon.seams import Log


@dataclass
class Wakeups:
    """What woke the loop."""

    reload: bool = False
    requests: bool = False
    stop: bool = False
    children: list[Handle] = field(default_factory=list)


def signal_wakeups(pending: set[int]) -> Wakeups:
    """Translate received signals into what the loop must do."""
    w = Wakeups()
    w.stop = bool(pending & {signal.SIGTERM, signal.SIGINT})
    w.reload = signal.SIGHUP in pending
    w.requests = signal.SIGUSR1 in pending
    return w


class Timer(Protocol):
    """A wall-clock timer the selector watches (chronod.daemon.kernel.WallTimer)."""

    fd: int

    def arm(self, at: datetime | None) -> None: ...

    def drain(self) -> None: ...


class Watch(Protocol):
    """A watch on the registry (chronod.daemon.kernel.DirWatch)."""

    fd: int

    def drain(self) -> bool: ...


class Waker:
    """Waits for the earliest of: a wall-clock deadline, a signal, a supervisor's exit,
    a registry change."""

    def __init__(self, timer: Timer, watch: Watch | None, log: Log):
        self.sel = selectors.DefaultSelector()
        self.timer, self.watch, self.log = timer, watch, log
        self.rsock, self.wsock = socket.socketpair()
        self.rsock.setblocking(False)
        self.wsock.setblocking(False)
        signal.set_wakeup_fd(self.wsock.fileno(), warn_on_full_buffer=False)
        self.stop_requested = False  # readable mid-tick: a long burst of launches checks it
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD):
            signal.signal(sig, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        self.sel.register(self.rsock, selectors.EVENT_READ, "signal")
        self.sel.register(timer.fd, selectors.EVENT_READ, "timer")
        if watch is not None:
            self.sel.register(watch.fd, selectors.EVENT_READ, "watch")
        self.watched: dict[int, Handle] = {}

    def poke(self) -> None:
        """Wake the loop from another thread (a reload prepared there is ready to swap in)."""
        try:
            self.wsock.send(b"\0")  # no signal has number 0: the wake-up carries no signal
        except BlockingIOError:
            pass  # the loop has wake-ups queued already

    def _stop_handler(self, *_: Any) -> None:
        self.stop_requested = True

    def wait(self, deadline: datetime | None, handles: list[Handle]) -> Wakeups:
        """Block until something happens; never returns for nothing but a deadline."""
        current = {h.fd: h for h in handles if h.fd >= 0}
        # A collected handle's pidfd is closed and its number may already belong to a new
        # handle: compare handles, not numbers, or the new supervisor would go unwatched.
        for fd, h in list(self.watched.items()):
            if current.get(fd) is not h:
                try:
                    self.sel.unregister(fd)
                except (KeyError, ValueError, OSError):
                    pass
                del self.watched[fd]
        for fd, h in current.items():
            if fd not in self.watched:
                self.sel.register(fd, selectors.EVENT_READ, "child")
                self.watched[fd] = h
        self.timer.arm(deadline)
        w = Wakeups()
        for key, _ in self.sel.select():
            kind = key.data
            if kind == "signal":
                sigs: set[int] = set()
                try:
                    while True:
                        data = self.rsock.recv(512)
                        if not data:
                            break
                        sigs.update(data)
                except BlockingIOError:
                    pass
                s = signal_wakeups(sigs)
                w.stop |= s.stop
                w.reload |= s.reload
                w.requests |= s.requests
            elif kind == "timer":
                self.timer.drain()
            elif kind == "watch" and self.watch is not None:
                if self.watch.drain():
                    w.reload = True
            elif kind == "child":
                w.children.append(current[key.fd])
        if w.reload and self.watch is not None:
            self.watch.drain()
        return w
