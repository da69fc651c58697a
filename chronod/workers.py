"""Pure work spread over forked worker processes, each result sent back as bytes.

A cold start of 100,000 jobs validates 100 job files, one after the other, on one core:
the work is pure (bytes in, a value out), so it can run on every CPU. `run_forked` forks
one worker per CPU (at most one per item), hands each a share of the items (balanced by
their weight: a job file's size), and yields each item's result as soon as its worker
sends it, so that the parent decodes while the workers still validate.

The inputs are not sent anywhere: a forked worker has them in its memory already. A worker
keeps nothing of the daemon it was forked from that could act on the world: at once it
closes every inherited descriptor but its result pipe (the store's connection, the
sd_notify and wake-up sockets, the metrics listener, the launchers' pipes), resets every
signal handler the daemon installed to the default and drops the wake-up descriptor, and
forgets NOTIFY_SOCKET; it ends with `os._exit`, so no atexit handler, finalizer or
buffered output of the daemon runs in it.

A worker that raises, is killed or ends before sending all its results makes `run_forked`
raise `WorkerFailed` naming the item and the cause, after every worker has been ended and
reaped: the caller gets every result or an error, never part of them.
"""

from __future__ import annotations

import gc
import marshal
import os
import selectors
import signal
import struct
import traceback
from typing import Callable, Iterator, Sequence, TypeVar

T = TypeVar("T")

_HEADER = struct.Struct("<iI")  # item index (-1: the worker failed), length of the payload
_FAILED = -1


class WorkerFailed(Exception):
    """A worker process raised, was killed or ended early: no result of the run is used."""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def shares(weights: Sequence[int], workers: int) -> list[list[int]]:
    """Item indexes split into `workers` shares of about equal weight (the heaviest item
    first, each to the lightest share so far); each share keeps its items in order."""
    out: list[list[int]] = [[] for _ in range(max(1, min(workers, len(weights))))]
    load = [0] * len(out)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        k = load.index(min(load))
        out[k].append(i)
        load[k] += weights[i]
    return [sorted(s) for s in out if s]


class _Worker:
    """One forked worker as the parent sees it: its pipe, its items not yet received."""

    def __init__(self, pid: int, pipe: int, share: list[int]) -> None:
        self.pid, self.pipe, self.left = pid, pipe, set(share)
        self.buf = bytearray()
        self.status: int | None = None  # the wait status, once reaped

    def reap(self) -> int:
        if self.status is None:
            self.status = os.waitpid(self.pid, 0)[1]
        return self.status

    def end(self) -> None:
        """Close the pipe; kill the worker if it still owes results (an error, an abandoned
        run); reap it."""
        os.close(self.pipe)
        if self.status is None and self.left:
            os.kill(self.pid, signal.SIGKILL)
        self.reap()


def run_forked(
    work: Callable[[T], bytes],
    items: Sequence[T],
    weights: Sequence[int],
    workers: int,
    describe: Callable[[T], str] = str,
) -> Iterator[tuple[int, bytes]]:
    """Yield (index, work(items[index])) for every item, computed in up to `workers`
    forked processes, in the order they finish. `describe` names an item in an error."""
    procs: list[_Worker] = []
    try:
        for share in shares(weights, workers):
            r, w = os.pipe()
            try:
                pid = os.fork()
            except BaseException:
                os.close(r)
                os.close(w)
                raise
            if pid == 0:  # the worker: never returns
                os.close(r)
                _serve(w, work, items, share)
            os.close(w)
            procs.append(_Worker(pid, r, share))
        yield from _collect(procs, items, describe)
    finally:
        for p in procs:
            p.end()


def _serve(out: int, work: Callable[[T], bytes], items: Sequence[T], share: list[int]) -> None:
    """A worker's life: shed what it inherited, work through its share, exit."""
    code = 0
    try:
        _shed(out)
        for i in share:
            try:
                blob = work(items[i])
            except BaseException:  # the parent reports it, naming the item
                _send(out, _FAILED, marshal.dumps((i, traceback.format_exc(limit=-8))))
                code = 1
                break
            _send(out, i, blob)
    except BaseException:  # shedding or the pipe failed: the parent sees an early end
        code = 2
    os._exit(code)


def _shed(keep: int) -> None:
    """Close every inherited descriptor but `keep` (and stdin/out/err), give every signal
    its default action, stop the wake-up descriptor, forget the sd_notify socket."""
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    signal.set_wakeup_fd(-1)
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        handler = signal.getsignal(sig)
        if callable(handler):  # a Python handler (SIGINT's default one too)
            signal.signal(sig, signal.SIG_DFL)
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        os.environ.pop(name, None)
    gc.freeze()  # the daemon's objects are never collected here: no walk over them, no copied pages
    gc.enable()  # ...but the worker's own are (the daemon holds collections while it starts)


def _send(out: int, index: int, payload: bytes) -> None:
    view = memoryview(_HEADER.pack(index, len(payload)) + payload)
    while view:
        view = view[os.write(out, view) :]


def _collect(procs: list[_Worker], items: Sequence[T], describe: Callable[[T], str]) -> Iterator[tuple[int, bytes]]:
    by_pipe = {p.pipe: p for p in procs}
    sel = selectors.DefaultSelector()
    for p in procs:
        sel.register(p.pipe, selectors.EVENT_READ)
    try:
        while by_pipe:
            for key, _ in sel.select():
                p = by_pipe[int(key.fd)]
                chunk = os.read(p.pipe, 1 << 20)
                if not chunk:  # the worker closed its pipe: it ended
                    sel.unregister(p.pipe)
                    del by_pipe[p.pipe]
                    if p.buf or p.left:
                        raise WorkerFailed(_early_end(p, [describe(items[i]) for i in sorted(p.left)]))
                    continue
                p.buf += chunk
                while len(p.buf) >= _HEADER.size:
                    index, size = _HEADER.unpack_from(p.buf)
                    if len(p.buf) < _HEADER.size + size:
                        break
                    payload = bytes(p.buf[_HEADER.size : _HEADER.size + size])
                    del p.buf[: _HEADER.size + size]
                    if index == _FAILED:
                        i, trace = marshal.loads(payload)
                        raise WorkerFailed(f"a worker process failed on {describe(items[i])}:\n{trace.rstrip()}")
                    p.left.discard(index)
                    yield index, payload
    finally:
        sel.close()


def _early_end(p: _Worker, left: list[str]) -> str:
    status = p.reap()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        how = f"was killed by signal {sig} ({signal.Signals(sig).name})"
    else:
        how = f"exited with status {os.waitstatus_to_exitcode(status)}"
    shown = ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
    return f"a worker process {how} before it sent the results of {shown or 'its last item'}"
