"""The daemon's end of the launcher (chronod.runner.launchloop): one long-lived process
that starts and supervises many runs, instead of one supervisor process per attempt.

For each run the daemon makes a pipe, keeps its read end as the run's handle and sends
the write end with the plan. The launcher closes that end once the run's result file is
on disk, so the read end becomes readable exactly when `collect` has something to read;
if the launcher dies (killed -9), every end it held closes at once and each of its runs
is collected as `lost`, its job killed if it still runs. No answer is awaited per launch:
a burst of launches is a burst of writes on one socket.

A later daemon reaches a launcher left by its predecessor through the abstract socket
`launchloop.address(pid, start_ticks)` (both from the run's `started` file) to watch a
run it adopts, or cancel it. Only the launcher's own user (or root) may connect.
"""

from __future__ import annotations

import os
import pickle
import socket
from typing import Any

from chronod.runner import files
from chronod.runner.launchloop import address
from chronod.runner.supervisor import Plan
from chronod.runner.zygote import spawn_server

VISIT_TIMEOUT_S = 5.0  # a launcher silent this long is taken as stalled, not gone


class LauncherError(OSError):
    """The launcher is gone; the caller starts another, or forks by itself."""


class Launcher:
    """Spawn the launcher once; `launch(plan)` -> (its pid, the run's end pipe)."""

    def __init__(self) -> None:
        self.pid, self.sock = spawn_server("chronod.runner.launchloop")
        self.ticks = files.proc_start_ticks(self.pid) or 0

    def launch(self, plan: Plan) -> tuple[int, int]:
        """Hand `plan` to the launcher: (the launcher's pid, a descriptor that becomes
        readable when the run's result is on disk or the launcher is gone)."""
        end_r, end_w = os.pipe()
        try:
            _send(self.sock, ("launch", plan), end_w)
        except OSError as e:
            os.close(end_r)
            self.close()
            raise LauncherError(e.errno or 0, f"launcher unavailable: {e}") from None
        finally:
            os.close(end_w)
        return self.pid, end_r

    def cancel(self, run_id: str, attempt: int) -> None:
        """Ask the launcher to stop a run (SIGTERM to its group, SIGKILL after the grace)."""
        try:
            _send(self.sock, ("cancel", run_id, attempt), None)
        except OSError:
            self.close()  # gone: its runs are collected as lost

    def discard(self, state_dir: str, run_id: str, attempt: int) -> bool:
        """Have the launcher remove a run's files (its outcome is stored), off the daemon's
        thread; False if it is gone (the caller removes them itself)."""
        try:
            _send(self.sock, ("discard", run_id, attempt, state_dir), None)
        except OSError:
            self.close()
            return False
        return True

    def close(self) -> None:
        """Let the launcher go: it finishes its runs, then exits. Reap it if it has."""
        if self.sock.fileno() >= 0:
            self.sock.close()
        try:
            os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pass

    @property
    def alive(self) -> bool:
        """False once this end was closed (after an error or by `close`)."""
        return self.sock.fileno() >= 0


def watch(pid: int, ticks: int, run_id: str, attempt: int, stalled: set[tuple[int, int]] | None = None) -> int | None:
    """A descriptor that becomes readable when a run of another daemon's launcher has
    its result on disk (at once if it already has); None if that launcher is gone."""
    if stalled is not None and (pid, ticks) in stalled:
        return _stalled(pid, ticks)  # known silent: do not wait for it once per run
    end_r, end_w = os.pipe()
    try:
        _visit(pid, ticks, ("watch", run_id, attempt), end_w)
    except TimeoutError:
        os.close(end_r)
        if stalled is not None:
            stalled.add((pid, ticks))
        return _stalled(pid, ticks)
    except OSError:
        os.close(end_r)
        return None
    finally:
        os.close(end_w)
    return end_r


def _stalled(pid: int, ticks: int) -> int | None:
    """A launcher that accepts but does not answer (stopped, or swamped) is alive: watch
    the process itself, readable when it exits, rather than call its runs unknown."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    if files.proc_start_ticks(pid) != ticks:
        os.close(fd)
        return None
    return fd


def cancel(pid: int, ticks: int, run_id: str, attempt: int) -> bool:
    """Cancel a run of another daemon's launcher; False if that launcher is gone."""
    try:
        _visit(pid, ticks, ("cancel", run_id, attempt), None)
    except OSError:
        return False
    return True


def _visit(pid: int, ticks: int, msg: tuple[Any, ...], fd: int | None) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(VISIT_TIMEOUT_S)
        conn.connect(address(pid, ticks))
        _send(conn, msg, fd)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)  # the launcher closes the connection once it has taken the request


def _send(sock: socket.socket, msg: tuple[Any, ...], fd: int | None) -> None:
    """One framed request; the descriptor travels with its first bytes."""
    body = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    data = len(body).to_bytes(4, "big") + body
    sent = socket.send_fds(sock, [data], [fd]) if fd is not None else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])
