"""The launcher for many runs (what chronod uses): one long-lived process that starts
and supervises every run. Every runner test that takes the `runner` fixture runs again
here against it; then what only a shared launcher has: adoption through its socket by a
later daemon, and a kill -9 of the launcher itself."""

from __future__ import annotations

import inspect
import os
import signal
import time

import pytest

from chronod.runner import files, launcher
from chronod.runner.api import Handle, LaunchRequest, Outcome
from chronod.runner.runner import LOST_ERROR, Runner
from tests.integration import test_runner as base
from tests.integration.test_runner import alive, finish, spec, test_user, wait_started  # noqa: F401

# discard is asynchronous here (the launcher removes the files): its own version below
ASYNC_DISCARD = {"test_many_concurrent_attempts_are_all_collected"}
for _name, _test in vars(base).items():
    if _name.startswith("test_") and callable(_test) and "runner" in inspect.signature(_test).parameters:
        if _name not in ASYNC_DISCARD:
            globals()[_name] = _test


@pytest.fixture
def runner(tmp_path):
    r = Runner(tmp_path / "state", zygote=True, many=True)
    yield r
    r.close()


def launch(r: Runner, run_id: str, command, **kw) -> Handle:
    return r.launch(LaunchRequest(run_id, 1, spec(command, **kw), {}))


def test_one_launcher_process_supervises_every_run(runner):
    handles = [launch(runner, f"r{i}", "sleep 0.3") for i in range(5)]
    assert len({h.supervisor_pid for h in handles}) == 1
    parents = {
        int(open(f"/proc/{h.pid}/stat").read().rsplit(")", 1)[1].split()[1]) for h in handles if _ready(runner, h)
    }
    assert parents == {handles[0].supervisor_pid}
    assert [finish(runner, h).state for h in handles] == ["succeeded"] * 5


def test_many_concurrent_runs_are_all_collected_and_their_files_removed_by_the_launcher(runner, tmp_path):
    handles, outcomes, end = base.run_many(runner)
    assert len(outcomes) == len(handles)
    assert all(o.state == "succeeded" and o.output_tail == f"{rid}\n" for rid, o in outcomes.items())
    state = tmp_path / "state"
    left = lambda: sorted(p.name for p in (*state.iterdir(), *state.glob("launched/*")) if p.name != "launched")  # noqa: E731
    while left():
        assert time.monotonic() < end, f"left behind: {left()[:5]}"
        time.sleep(0.02)


def _ready(r: Runner, h: Handle) -> bool:
    wait_started(r, h)
    return True


def test_a_later_daemon_adopts_running_and_ended_runs_through_the_launcher(tmp_path):
    first = Runner(tmp_path / "state", many=True)
    slow = launch(first, "slow", "sleep 1; echo late; exit 3")
    quick = launch(first, "quick", "echo bye")
    wait_started(first, slow)
    finish(first, quick)
    first.close()  # the daemon dies; its launcher goes on with the slow run
    second = Runner(tmp_path / "state", many=True)
    try:
        done = second.adopt("quick", 1)
        assert isinstance(done, Outcome) and (done.state, done.output_tail) == ("succeeded", "bye\n")
        adopted = second.adopt("slow", 1)
        assert isinstance(adopted, Handle) and adopted.pid == slow.pid
        out = finish(second, adopted)
        assert (out.state, out.exit_code, out.output_tail) == ("failed", 3, "late\n")
    finally:
        second.close()
    _gone(slow.supervisor_pid)


def test_a_later_daemon_cancels_an_adopted_run_through_the_launcher(tmp_path):
    first = Runner(tmp_path / "state", many=True)
    handle = launch(first, "r1", "sleep 30")
    wait_started(first, handle)
    first.close()
    second = Runner(tmp_path / "state", many=True)
    try:
        adopted = second.adopt("r1", 1)
        assert isinstance(adopted, Handle)
        second.cancel(adopted)
        assert finish(second, adopted).state == "cancelled"
    finally:
        second.close()


def test_a_stopped_launcher_is_waited_for_not_declared_dead(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "VISIT_TIMEOUT_S", 1.0)
    first = Runner(tmp_path / "state", many=True)
    handle = launch(first, "r1", "sleep 2.5; echo through")
    other = launch(first, "r2", "sleep 2.5; echo too")
    wait_started(first, handle)
    wait_started(first, other)
    first.close()
    os.kill(handle.supervisor_pid, signal.SIGSTOP)
    second = Runner(tmp_path / "state", many=True)
    try:
        start = time.monotonic()
        adopted = [second.adopt("r1", 1), second.adopt("r2", 1)]
        assert time.monotonic() - start < 2 * launcher.VISIT_TIMEOUT_S, "waited for the silent launcher twice"
        assert all(isinstance(a, Handle) for a in adopted) and alive(handle.pid)
        os.kill(handle.supervisor_pid, signal.SIGCONT)
        outs = [finish(second, a) for a in adopted]
        assert [(o.state, o.output_tail) for o in outs] == [("succeeded", "through\n"), ("succeeded", "too\n")]
    finally:
        os.kill(handle.supervisor_pid, signal.SIGCONT)
        second.close()


def test_the_launcher_exits_once_the_daemon_is_gone_and_its_runs_are_done(tmp_path):
    r = Runner(tmp_path / "state", many=True)
    handle = launch(r, "r1", "sleep 0.3")
    pid = handle.supervisor_pid
    r.close()
    assert alive(pid), "the launcher left while a run was going"
    _gone(pid)
    assert files.read_json(files.path_of(tmp_path / "state", "r1", 1, files.RESULT))["state"] == "succeeded"


def test_a_launcher_killed_hard_makes_each_of_its_runs_lost_and_stops_their_jobs(runner):
    """What a kill -9 of the launcher costs: every run it was supervising ends `lost`
    (re-dispatched or recorded by the daemon's unknown-outcome rule, never silent), their
    jobs are killed so that no re-dispatch runs beside them, and runs that had already
    ended keep their recorded outcome. The next launch starts a new launcher."""
    ended = launch(runner, "ended", "echo done")
    assert finish(runner, ended).state == "succeeded"
    running = [launch(runner, f"r{i}", "sleep 30") for i in range(3)]
    for h in running:
        wait_started(runner, h)
    os.kill(running[0].supervisor_pid, signal.SIGKILL)
    outcomes = [finish(runner, h) for h in running]
    assert [o.state for o in outcomes] == ["lost"] * 3
    assert all(o.error.startswith(LOST_ERROR) and "has been killed" in o.error for o in outcomes)
    _until(lambda: not any(alive(h.pid) for h in running), "the jobs of the killed launcher to be gone")
    after = launch(runner, "after", "echo again")
    assert after.supervisor_pid != running[0].supervisor_pid
    assert finish(runner, after).output_tail == "again\n"


def _until(cond, what: str, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.02)


def _gone(pid: int, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while files.proc_start_ticks(pid) is not None and "Z" not in open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1][:3]:
        assert time.monotonic() < end, f"launcher {pid} still running"
        time.sleep(0.02)


@pytest.fixture
def two(tmp_path):
    r = Runner(tmp_path / "state", many=True, launchers=2)
    yield r
    r.close()


def _parent(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])


def test_two_launchers_take_runs_in_turn_and_each_supervises_its_own(two):
    handles = [launch(two, f"r{i}", "sleep 2") for i in range(6)]  # still running when their parent is read
    assert len({h.supervisor_pid for h in handles}) == 2
    assert [h.supervisor_pid for h in handles[:2]] * 3 == [h.supervisor_pid for h in handles]
    assert all(_ready(two, h) and _parent(h.pid) == h.supervisor_pid for h in handles)
    assert [finish(two, h).state for h in handles] == ["succeeded"] * 6


def test_with_two_launchers_every_file_goes_with_its_run_records_included(two, tmp_path):
    """A discard goes to the launcher that ran the run: each removes its file of `started`
    records with the last of its own runs (sent to the other one, a file would be left
    until its launcher exits)."""
    handles, outcomes, end = base.run_many(two)
    assert len({h.supervisor_pid for h in handles}) == 2
    assert len(outcomes) == len(handles) and all(o.state == "succeeded" for o in outcomes.values())
    state = tmp_path / "state"
    left = lambda: sorted(p.name for p in (*state.iterdir(), *state.glob("launched/*")) if p.name != "launched")  # noqa: E731
    while left():
        assert time.monotonic() < end, f"left behind: {left()[:5]}"
        time.sleep(0.02)
    assert all(alive(h.supervisor_pid) for h in handles[:2]), "a launcher left while its daemon was up"


def test_a_cancel_reaches_the_launcher_that_runs_it(two):
    first, second = launch(two, "r1", "sleep 30"), launch(two, "r2", "sleep 30")
    assert first.supervisor_pid != second.supervisor_pid
    for h in (first, second):
        wait_started(two, h)
    two.cancel(second)
    assert finish(two, second).state == "cancelled"
    assert alive(first.pid)
    two.cancel(first)
    assert finish(two, first).state == "cancelled"


def test_a_kill_9_of_one_of_two_launchers_loses_only_its_runs(two):
    handles = [launch(two, f"r{i}", "sleep 5; echo kept") for i in range(4)]  # none ends before the kill
    for h in handles:
        wait_started(two, h)
    killed = handles[0].supervisor_pid
    os.kill(killed, signal.SIGKILL)
    outcomes = {h.run_id: finish(two, h) for h in handles}
    assert {rid: o.state for rid, o in outcomes.items()} == {
        "r0": "lost",
        "r1": "succeeded",
        "r2": "lost",
        "r3": "succeeded",
    }
    again = [launch(two, f"a{i}", "echo again") for i in range(2)]
    assert killed not in {h.supervisor_pid for h in again}
    assert [finish(two, h).output_tail for h in again] == ["again\n"] * 2
