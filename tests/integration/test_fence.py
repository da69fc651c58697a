"""A launcher fenced by the daemon that owns it (chronod.runner.fence): launch requests
an old daemon queued in its launcher never start once a new daemon took the state
directory over and settled their runs. Real launchers, SIGSTOP/SIGCONT, a real flock."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
import subprocess
import sys

from chronod.runner import fence, launcher
from chronod.runner.api import Handle, LaunchRequest
from chronod.runner.runner import Runner
from tests.integration.daemon_helpers import wait_until
from tests.integration.test_runner import alive, finish, spec, wait_started


def _launch(r: Runner, run_id: str, command: str, cls: str = "idempotent", attempt: int = 1) -> Handle:
    job = dataclasses.replace(spec(command), idempotency_class=cls)
    return r.launch(LaunchRequest(run_id, attempt, job, {}))


def test_requests_queued_in_a_stopped_launcher_never_start_after_a_new_daemon_took_over(tmp_path, monkeypatch):
    """kill -STOP <launcher>; the daemon queues two more launches and dies; a new daemon
    fences, settles them (`lost` / attempt 2) and starts attempt 2; kill -CONT: neither
    queued launch runs, and the run the old launcher had started ends and is adopted."""
    monkeypatch.setattr(launcher, "VISIT_TIMEOUT_S", 1.0)
    state = tmp_path / "state"
    old = Runner(state, many=True)
    old.fence(5)
    running = _launch(old, "a", f"sleep 1.5; touch {tmp_path}/ran-a")
    wait_started(old, running)
    launcher_pid = running.supervisor_pid
    os.kill(launcher_pid, signal.SIGSTOP)
    try:
        _launch(old, "u", f"touch {tmp_path}/ran-u", cls="unsafe")
        _launch(old, "i", f"touch {tmp_path}/ran-i-1; sleep 1")
        old.close()  # the daemon is gone (as after kill -9: its socket closes)
        new = Runner(state, many=True)
        assert new.fence(6) == [], "a stopped launcher outside a start holds no lock: nothing to kill"
        assert fence.current(str(state)) == 6
        assert new.adopt("u", 1) is None  # settled `lost` by the daemon: never started
        assert new.adopt("i", 1) is None  # settled: a new attempt
        adopted = new.adopt("a", 1)
        assert isinstance(adopted, Handle), "the run the old launcher started is adopted, not settled"
        second = _launch(new, "i", f"touch {tmp_path}/ran-i-2", attempt=2)
        assert finish(new, second).state == "succeeded"
    finally:
        os.kill(launcher_pid, signal.SIGCONT)
    assert finish(new, adopted).state == "succeeded"
    wait_until(lambda: not alive(launcher_pid), what="the old launcher to finish and exit")
    assert (tmp_path / "ran-a").exists()
    assert not (tmp_path / "ran-u").exists(), "the unsafe run recorded lost ran afterwards"
    assert not (tmp_path / "ran-i-1").exists(), "the idempotent run's attempt 1 ran after attempt 2"
    assert not any(n.startswith(("u.", "i.1.")) for n in os.listdir(state))
    new.close()


def test_a_launcher_stuck_in_the_middle_of_a_start_is_killed_by_the_new_daemon(tmp_path):
    """A holder of the start lock that never lets go (stopped mid-start) is killed, so the
    new daemon never waits for it forever and it can start nothing afterwards."""
    state = tmp_path / "state"
    state.mkdir()
    fence.take_over(str(state), 1)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, signal; fd = os.open(os.path.join(%r, 'generation'), os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); os.kill(os.getpid(), signal.SIGSTOP)"
            % str(state),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        killed = fence.take_over(str(state), 2, wait_s=0.5)
        assert killed == [holder.pid]
        assert holder.wait(30) == -signal.SIGKILL
        assert fence.current(str(state)) == 2
        fd = os.open(state / "generation", os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it any more
        os.close(fd)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_the_last_daemon_to_take_over_owns_the_directory_whatever_its_number(tmp_path):
    """A database restored or recreated next to its state directory starts its tokens
    again from 1: that daemon owns the directory, and the launcher of the one before
    (a greater number) starts nothing more."""
    state = tmp_path / "state"
    state.mkdir()
    with fence.StartGate(str(state)) as gate:
        assert not gate.fenced(0) and not gate.fenced(7), "a directory nobody fenced refuses nothing"
    fence.take_over(str(state), 9)
    fence.take_over(str(state), 1)
    assert fence.current(str(state)) == 1
    with fence.StartGate(str(state)) as gate:
        assert gate.fenced(9) and gate.fenced(0) and not gate.fenced(1)


_MID_START = r"""
import os, resource, sys, time
from chronod.runner import fence, supervisor
from chronod.runner.supervisor import Plan

state, marks = sys.argv[1], sys.argv[2]
real_exec = os.execvpe


def late_exec(*args):  # in the job's child, descriptors closed: the moment before its exec
    open(os.path.join(marks, "forked"), "w").close()
    time.sleep(1.5)
    open(os.path.join(marks, "exec"), "w").close()
    real_exec(*args)


os.execvpe = late_exec
plan = Plan(
    "mid", 1, ("true",), "command", {"PATH": os.environ["PATH"]}, "/", None, None, None, 1, 1024,
    resource.getrlimit(resource.RLIMIT_NOFILE), state, generation=1,
)
out_r, out_w = os.pipe()
with fence.StartGate(state) as gate:
    supervisor._fork_exec(plan, supervisor._stdin_fd(None), out_w, gate.fd)
"""


def test_a_launcher_killed_in_the_middle_of_a_start_holds_the_new_daemon_until_its_job_execd(tmp_path):
    """A launcher stopped between the fork and the exec of a job, and killed by the new
    daemon's take_over, leaves a child that has not exec'd yet: the start lock is let go by
    that exec, not before, so the new daemon looks for what is left of the run only once
    the job is in its cgroup and carries its tag (found and killed before the run is
    settled, never started unseen afterwards)."""
    state, marks = tmp_path / "state", tmp_path / "marks"
    state.mkdir()
    marks.mkdir()
    fence.take_over(str(state), 1)
    mid = subprocess.Popen([sys.executable, "-c", _MID_START, str(state), str(marks)])
    try:
        wait_until(lambda: (marks / "forked").exists(), timeout=60, what="the job's child to be forked")
        mid.kill()  # as take_over kills a launcher stuck in a start
        mid.wait(30)
        fence.take_over(str(state), 2, wait_s=0.1)
        assert (marks / "exec").exists(), "the new daemon took over before the started job had exec'd"
    finally:
        if mid.poll() is None:
            mid.kill()
            mid.wait()
