"""Pure work in forked workers (`chronod.workers`): every result or an error naming the
item, never part of them; and a worker keeps nothing of its parent that acts on the world
(descriptors such as the store's connection, signal handlers, the wake-up descriptor, the
sd_notify socket)."""

from __future__ import annotations

import marshal
import os
import signal
import socket
import threading
from pathlib import Path

import pytest

from chronod.workers import WorkerFailed, run_forked, shares


def children() -> set[int]:
    """This process's child processes (of every thread)."""
    out: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        out |= {int(p) for p in (task / "children").read_text().split()}
    return out


def test_every_item_comes_back_once_with_its_result():
    items = list(range(9))
    got = dict(run_forked(lambda x: str(x * x).encode(), items, [1] * len(items), 2))
    assert got == {i: str(i * i).encode() for i in items}


def test_shares_balance_the_weights_and_keep_each_share_in_order():
    split = shares([5, 1, 1, 1, 1, 1, 4], 2)
    assert sorted(i for s in split for i in s) == list(range(7))
    assert sorted(sum([5, 1, 1, 1, 1, 1, 4][i] for i in s) for s in split) == [7, 7]
    assert all(s == sorted(s) for s in split)
    assert shares([3, 3], 8) == [[0], [1]]  # never more workers than items


def test_a_worker_keeps_no_descriptor_signal_handler_or_notify_socket_of_its_parent(tmp_path, monkeypatch):
    held = os.open(tmp_path / "store.sqlite", os.O_CREAT | os.O_RDWR, 0o600)  # a stand-in for the store's file
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    old_wakeup = signal.set_wakeup_fd(wake_w.fileno())
    old_hup = signal.signal(signal.SIGHUP, lambda *_: None)
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))

    def inspect(_: int) -> bytes:  # in the worker
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
        return marshal.dumps(
            (
                fds,
                signal.getsignal(signal.SIGHUP) == signal.SIG_DFL,
                signal.set_wakeup_fd(-1),
                "NOTIFY_SOCKET" in os.environ,
            )
        )

    try:
        [(_, blob)] = list(run_forked(inspect, [0], [1], 2))
    finally:
        signal.signal(signal.SIGHUP, old_hup)
        signal.set_wakeup_fd(old_wakeup)
        wake_r.close()
        wake_w.close()
        os.close(held)
    fds, hup_default, wakeup, notify = marshal.loads(blob)
    assert held not in fds and wake_w.fileno() not in fds and wake_r.fileno() not in fds
    assert len(fds) <= 5  # stdin, stdout, stderr, the result pipe, the listing's own
    assert hup_default and wakeup == -1 and not notify


def test_a_worker_that_raises_fails_the_run_naming_the_item_and_leaves_no_process():
    before = children()

    def work(name: str) -> bytes:
        if name == "b.yaml":
            raise ValueError("a bug in validation")
        return name.encode()

    with pytest.raises(WorkerFailed, match=r"(?s)failed on b\.yaml.*ValueError: a bug in validation"):
        list(run_forked(work, ["a.yaml", "b.yaml", "c.yaml", "d.yaml"], [1, 1, 1, 1], 2))
    assert children() == before


def test_a_killed_worker_fails_the_run_naming_what_it_owed():
    before = children()

    def work(name: str) -> bytes:
        if name == "c.yaml":
            os.kill(os.getpid(), signal.SIGKILL)
        return name.encode()

    with pytest.raises(WorkerFailed, match=r"killed by signal 9 \(SIGKILL\) before it sent the results of c\.yaml"):
        list(run_forked(work, ["a.yaml", "b.yaml", "c.yaml", "d.yaml"], [1, 1, 1, 1], 2))
    assert children() == before


def test_an_abandoned_run_ends_its_workers():
    before = children()
    run = run_forked(lambda x: b"x" * 10, list(range(50)), [1] * 50, 2)
    next(run)
    run.close()
    assert children() == before


def test_workers_run_from_a_thread_as_reloads_do():
    got: dict[int, bytes] = {}
    t = threading.Thread(target=lambda: got.update(run_forked(lambda x: bytes([x]), [1, 2, 3], [1, 1, 1], 2)))
    t.start()
    t.join(30)
    assert got == {0: b"\x01", 1: b"\x02", 2: b"\x03"}


def test_a_worker_forked_while_the_daemon_holds_collections_collects_its_own_garbage():
    import gc

    gc.disable()  # the daemon's start-up (chronod.daemon.kernel.collections_held)
    try:
        got = dict(run_forked(lambda _: marshal.dumps(gc.isenabled()), [0], [1], 1))
    finally:
        gc.enable()
    assert marshal.loads(got[0]) is True
