"""What the launcher does once per turn of launches rather than once per run: the cgroup
moves around the spawns and the `started` records. The loop runs in this process, its
cgroup moves recorded instead of made, so that the test needs no cgroup v2."""

from __future__ import annotations

import json
import os
import select
import socket
import time

import pytest

from chronod.runner import contain, files, launcher, launchloop
from chronod.runner.supervisor import Plan


def _plan(state_dir: str, run_id: str) -> Plan:
    return Plan(
        run_id=run_id,
        attempt=1,
        argv=("true",),
        what="command",
        env={"PATH": "/usr/bin:/bin"},
        workdir="/",
        stdin=None,
        creds=None,
        timeout_s=None,
        kill_grace_s=1,
        limit_bytes=1024,
        nofile=(1024, 1024),
        state_dir=state_dir,
        cgroup=f"/cg/{run_id}.1",
    )


@pytest.fixture
def loop(monkeypatch):
    moves: list[str] = []
    monkeypatch.setattr(contain, "create", lambda path: None)
    monkeypatch.setattr(contain, "enter", moves.append)
    ours, theirs = socket.socketpair()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lp = launchloop.Loop(theirs, listener)
    lp.home = "/home-cgroup"
    lp.own_nofile = (1024, 1024)
    lp.moves = moves  # type: ignore[attr-defined]
    lp.send = lambda msg, fd=None: launcher._send(ours, msg, fd)  # type: ignore[attr-defined]
    yield lp
    lp.discards.put(None)
    lp.remover.join()
    for run in lp.runs.values():
        os.close(run.out_r)
        os.close(run.pidfd)
        os.waitpid(run.pid, 0)
    ours.close()
    theirs.close()
    listener.close()


def _launch_turn(loop, state_dir: str, run_ids: list[str]) -> None:
    for rid in run_ids:
        end_r, end_w = os.pipe()
        loop.send(("launch", _plan(state_dir, rid)), end_w)
        os.close(end_w)
        os.close(end_r)
    loop._from_daemon()


def test_a_turn_of_launches_moves_the_launcher_once_per_start_and_home_once(loop, tmp_path):
    """Three launches read in one turn: the launcher steps from each run's cgroup straight
    into the next one's, and home once they are started (it used to step home after each)."""
    _launch_turn(loop, str(tmp_path), ["a", "b", "c"])
    assert sorted(loop.runs) == [("a", 1), ("b", 1), ("c", 1)]
    assert loop.moves == ["/cg/a.1", "/cg/b.1", "/cg/c.1", "/home-cgroup"]
    assert not loop.away


def test_a_turn_of_launches_writes_one_file_of_started_records_removed_with_its_last_run(loop, tmp_path):
    """The `started` records of a turn are one file (not a file per run), each run's
    readable as before; the file goes once the daemon has recorded every run in it."""
    state = str(tmp_path)
    _launch_turn(loop, state, ["a", "b"])
    (name,) = os.listdir(tmp_path / "launched")
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".started.json")]
    for rid in ("a", "b"):
        record = files.read_started(state, rid, 1)
        assert record is not None and record["launcher"] and record["pid"] == loop.runs[(rid, 1)].pid
    loop.send(("discard", "a", 1, state))
    loop._from_daemon()
    time.sleep(0.2)
    assert os.listdir(tmp_path / "launched") == [name]  # b is not recorded yet
    loop.send(("discard", "b", 1, state))
    loop._from_daemon()
    deadline = time.monotonic() + 5
    while os.listdir(tmp_path / "launched"):
        assert time.monotonic() < deadline, "the records of recorded runs were left behind"
        time.sleep(0.02)


def test_a_started_record_cut_short_reads_as_none_and_a_gone_launchers_records_go(tmp_path):
    """A launcher killed while writing its records leaves a line cut short: that run reads
    as never recorded started (as if it had been killed a moment earlier), the others of
    the file as written. Once a daemon has adopted or settled every run, the records of
    launchers that are gone are removed; a live launcher's stay."""
    state = str(tmp_path)
    whole = {"run_id": "a", "attempt": 1, "pid": 123, "launcher": True}
    cut = json.dumps({"run_id": "b", "attempt": 1, "pid": 124, "launcher": True})[:25]
    os.mkdir(tmp_path / "launched")
    gone = tmp_path / "launched" / files.launched_name(2**22 + 1, 5, 1)  # above any pid_max: no such process
    gone.write_text(json.dumps(whole) + "\n" + cut)
    assert files.read_started(state, "a", 1) == whole
    assert files.read_started(state, "b", 1) is None
    live = tmp_path / "launched" / files.launched_name(os.getpid(), files.proc_start_ticks(os.getpid()), 1)
    live.write_text(json.dumps({**whole, "run_id": "c"}) + "\n")
    files.remove_launched_of_gone(state)
    assert os.listdir(tmp_path / "launched") == [live.name]
    assert files.read_started(state, "c", 1) is not None


def test_the_files_of_recorded_runs_are_removed_once_no_launch_came_for_a_while(tmp_path, monkeypatch):
    """Removing a burst's files while it still creates others made each new file cost the
    launcher more (a file system without a journal skips every inode freed in the last
    seconds): the remover waits until no launch came for REMOVE_WHEN_QUIET_S."""
    now = [100.0]
    slept: list[float] = []
    removed_at: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    monkeypatch.setattr(launchloop.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(launchloop.time, "sleep", sleep)
    real_unlink = os.unlink
    monkeypatch.setattr(launchloop.os, "unlink", lambda p: (removed_at.append(now[0]), real_unlink(p)))
    result = files.path_of(tmp_path, "a", 1, files.RESULT)
    open(result, "w").close()
    todo: launchloop.queue.SimpleQueue = launchloop.queue.SimpleQueue()
    todo.put((str(tmp_path), "a", 1))
    todo.put(None)
    launchloop._remove_files(todo, [99.5])  # the last launch half a second ago
    assert not os.path.exists(result)
    assert removed_at == [99.5 + launchloop.REMOVE_WHEN_QUIET_S]
    assert sum(slept) == launchloop.REMOVE_WHEN_QUIET_S - 0.5


def test_a_long_turn_of_launches_lets_go_of_the_start_gate_every_few_starts(loop, tmp_path):
    """A new daemon taking the state directory over waits for the start gate and kills a
    launcher that holds it past 5 s: a turn of many launches holds it for GATE_STARTS at
    a time, each hold with its records written and the launcher back home."""
    n = launchloop.GATE_STARTS + 3
    _launch_turn(loop, str(tmp_path), [f"r{i}" for i in range(n)])
    home = [i for i, move in enumerate(loop.moves) if move == "/home-cgroup"]
    assert home == [launchloop.GATE_STARTS, n + 1] and len(loop.moves) == n + 2
    assert len(os.listdir(tmp_path / "launched")) == 2


def test_results_wait_for_the_launches_the_daemon_queued_behind_them(loop, tmp_path):
    """A run's result produced while the daemon queues more launches (a burst) is flushed
    after those launches are started, not between two turns of them: a flush of the file
    system waits for every write on it. It is flushed once nothing is queued."""
    state = str(tmp_path)
    _launch_turn(loop, state, ["a"])
    a = loop.runs[("a", 1)]
    ready = select.poll()
    for fd in (a.pidfd, a.out_r):
        ready.register(fd, select.POLLIN)
    deadline = time.monotonic() + 10
    while len(ready.poll(100)) < 2:  # `a` has exited and its output is closed: one turn ends it
        assert time.monotonic() < deadline, "the job `a` did not end"
    events: list[str] = []
    launch_all, flush = loop._launch_all, loop._flush

    def launching(launches):
        events.extend(f"start {plan.run_id}" for plan, _ in launches)
        launch_all(launches)
        if len(events) == 1:  # the daemon queues `c` while `b` is being started
            end_r, end_w = os.pipe()
            loop.send(("launch", _plan(state, "c")), end_w)
            os.close(end_w)
            os.close(end_r)

    def flushing():
        events.extend(f"result {run.plan.run_id}" for run in loop.batch)
        flush()

    loop._launch_all, loop._flush = launching, flushing
    end_r, end_w = os.pipe()
    loop.send(("launch", _plan(state, "b")), end_w)
    os.close(end_w)
    os.close(end_r)
    while loop.runs or loop.batch:
        assert time.monotonic() < deadline, f"runs left: {sorted(loop.runs)}"
        loop._turn()
    assert events.index("result a") > events.index("start c"), events
    assert files.read_json(files.path_of(state, "a", 1, files.RESULT)) is not None
