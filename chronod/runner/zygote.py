"""A small helper process that forks supervisors on the daemon's behalf.

Forking the daemon copies the page tables of a process that holds every job definition,
its database layer and its metrics: 2 ms per fork with 10,000 jobs on an idle machine,
over 10 ms under load, all of it on the daemon's single thread while the rest of a
minute's jobs wait. The zygote is a fresh interpreter (spawned once, with posix_spawn)
that imports only the supervisor's code, so its forks are several times cheaper.

The daemon sends each `Plan` over a socketpair; the zygote forks the supervisor, opens a
pidfd for it before anyone can reap it, and passes that descriptor back (SCM_RIGHTS), so
the daemon watches exactly that process: no pid-reuse race. The new supervisor waits on
a pipe until the descriptor has been sent: if the zygote dies in between, the supervisor
exits without starting anything, so a daemon that gets no answer can fork the attempt
itself without ever running a job twice. The zygote reaps its children. It exits when the daemon's end of the socket closes (the daemon stopped or was
killed); supervisors it forked have already detached and keep running.

Plans travel pickled: both ends are this program, over a private socketpair.
"""

from __future__ import annotations

import gc
import os
import pickle
import selectors
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chronod.runner.supervisor import Plan

_LEN = struct.Struct("!I")
_PID = struct.Struct("!i")
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def spawn_server(module: str) -> tuple[int, socket.socket]:
    """Start `module.serve(3)` in this interpreter, in a session of its own, with its end of
    a socket pair as descriptor 3; returns its pid and our end (not inherited by jobs)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    root = str(Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {root!r}); from {module} import serve; serve(3)"
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-c", code],
            dict(os.environ),
            file_actions=[(os.POSIX_SPAWN_DUP2, theirs.fileno(), 3)],
            setsid=True,
            setsigmask=(),
        )
    finally:
        theirs.close()
    ours.set_inheritable(False)
    return pid, ours


class ZygoteError(OSError):
    """The zygote is gone or answered nonsense; the caller forks by itself instead."""


class Zygote:
    """The daemon's end: spawn the helper once, then `fork(plan)` -> (pid, pidfd)."""

    def __init__(self) -> None:
        self.pid, self.sock = spawn_server("chronod.runner.zygote")

    def fork(self, plan: object) -> tuple[int, int]:
        """Have the zygote fork the supervisor of `plan`: (its pid, a pidfd on it)."""
        data = pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.sock.sendall(_LEN.pack(len(data)) + data)
            msg, fds, _, _ = socket.recv_fds(self.sock, _PID.size, 1)
        except OSError as e:
            self.close()
            raise ZygoteError(e.errno or 0, f"zygote unavailable: {e}") from None
        if len(msg) != _PID.size or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            self.close()
            raise ZygoteError(0, "zygote ended or answered nothing")
        return _PID.unpack(msg)[0], fds[0]

    def close(self) -> None:
        """Let the zygote go (it exits on end-of-file) and reap it if it is ours."""
        if self.sock.fileno() >= 0:
            self.sock.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


# --------------------------------------------------------------------------- the helper


def serve(fd: int) -> None:
    """The zygote's main loop on socket `fd`; returns when the daemon's end closes."""
    from chronod.runner import runner  # noqa: F401  (imported before gc.freeze: shared by every fork)

    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # the daemon decides; we follow its socket
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "request")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    gc.freeze()  # what is imported now stays shared with every supervisor
    while True:
        for key, _ in sel.select():
            if key.data == "child":
                os.read(wake_r, 512)
                _reap_all()
                continue
            plan = _receive(sock)
            if plan is None:
                return
            pid, go = _fork_gated(plan)
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(sock, [_PID.pack(pid)], [pidfd])
                os.write(go, b"g")
            except OSError:
                return  # the daemon is gone: the supervisor reads end-of-file and exits
            finally:
                os.close(pidfd)
                os.close(go)


def _fork_gated(plan: Plan) -> tuple[int, int]:
    """Fork the supervisor of `plan`, held until a byte arrives on the returned pipe end."""
    from chronod.runner import runner, supervisor

    go_r, go_w = os.pipe()
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, runner._BLOCKED_AROUND_FORK)
    try:
        pid = os.fork()
        if pid == 0:
            try:
                os.close(go_w)
                released = os.read(go_r, 1) == b"g"
                os.close(go_r)
            except BaseException:
                released = False
            if not released:
                os._exit(0)
            supervisor.run(plan)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    os.close(go_r)
    return pid, go_w


def _receive(sock: socket.socket) -> Plan | None:
    """The next plan the daemon sent (None: the daemon closed its end)."""
    head = _exactly(sock, _LEN.size)
    if head is None:
        return None
    body = _exactly(sock, _LEN.unpack(head)[0])
    plan: Plan | None = None if body is None else pickle.loads(body)
    return plan


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
