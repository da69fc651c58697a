"""The runner with a zygote (what chronod uses): supervisors forked by a small helper
process, watched through the pidfd it passes back, and a fallback when it is gone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from chronod.core.model import JobSpec
from chronod.runner import files, zygote
from chronod.runner.api import LaunchRequest, Outcome
from chronod.runner.runner import Runner


def spec(command, **kw) -> JobSpec:
    return JobSpec(id="z", owner="t", schedule="@every 1m", command=command, idempotency_class="idempotent", **kw)


def finish(runner: Runner, handle, timeout: float = 10) -> Outcome:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = runner.collect(handle)
        if out is not None:
            return out
        runner.ready(0.2)
    raise AssertionError(f"{handle.run_id} did not finish")


@pytest.fixture
def runner(tmp_path):
    r = Runner(tmp_path / "state", zygote=True)
    yield r
    r.close()


def test_a_job_launched_through_the_zygote_runs_and_reports_its_output(runner):
    out = finish(
        runner, runner.launch(LaunchRequest("r1", 1, spec("echo hello $CHRONO_RUN_ID"), {"CHRONO_RUN_ID": "r1"}))
    )
    assert (out.state, out.exit_code, out.output_tail) == ("succeeded", 0, "hello r1\n")


def test_the_supervisor_is_the_zygotes_child_not_the_daemons(runner):
    handle = runner.launch(LaunchRequest("r1", 1, spec("sleep 0.3"), {}))
    stat = Path(f"/proc/{handle.supervisor_pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(stat[1]) == runner._zygote.pid != os.getpid()
    assert finish(runner, handle).state == "succeeded"


def test_jobs_get_no_descriptor_of_the_daemon_or_the_zygote(runner):
    out = finish(runner, runner.launch(LaunchRequest("r1", 1, spec("ls /proc/self/fd"), {})))
    assert sorted(int(fd) for fd in out.output_tail.split()) == [0, 1, 2, 3]  # 3: ls's own directory


def test_a_timeout_and_a_cancel_work_as_with_a_direct_fork(runner):
    timed = runner.launch(LaunchRequest("t", 1, spec("sleep 30", timeout_s=1, kill_grace_s=1), {}))
    cancelled = runner.launch(LaunchRequest("c", 1, spec("sleep 30"), {}))
    time.sleep(0.3)
    runner.cancel(cancelled)
    assert finish(runner, cancelled).state == "cancelled"
    assert finish(runner, timed).state == "timed_out"


def test_a_killed_zygote_is_replaced_and_no_launch_is_lost(runner):
    assert finish(runner, runner.launch(LaunchRequest("a", 1, spec("true"), {}))).state == "succeeded"
    first = runner._zygote.pid
    os.kill(first, signal.SIGKILL)
    time.sleep(0.1)
    outcomes = [finish(runner, runner.launch(LaunchRequest(f"b{i}", 1, spec("true"), {}))) for i in range(3)]
    assert [o.state for o in outcomes] == ["succeeded"] * 3
    assert runner._zygote is not None and runner._zygote.pid != first


def test_the_zygote_exits_when_the_daemon_end_closes(tmp_path):
    r = Runner(tmp_path / "state", zygote=True)
    finish(r, r.launch(LaunchRequest("a", 1, spec("true"), {})))
    pid = r._zygote.pid
    r._zygote.sock.close()
    os.waitpid(pid, 0)  # returns: it ended by itself
    r._zygote = None
    r.close()


def test_a_supervisor_never_released_by_the_zygote_starts_nothing(tmp_path):
    # The zygote died between the fork and passing the pidfd: the daemon forks the attempt
    # itself, so the held supervisor must exit without running the job.
    state = tmp_path / "state"
    state.mkdir()
    witness = tmp_path / "ran"
    plan = Runner(state)._plan(LaunchRequest("r1", 1, spec(f"touch {witness}"), {}))
    pid, go = zygote._fork_gated(plan)
    os.close(go)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    time.sleep(0.2)
    assert not witness.exists()
    assert files.read_json(files.path_of(state, "r1", 1, files.STARTED)) is None
