"""The runner with real processes: supervisors, process groups, output, timeouts,
cancellation, adoption after a daemon restart, and privilege drop (root only)."""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from chronod.core.model import JobSpec
from chronod.runner import contain, files
from chronod.runner.api import Handle, LaunchRequest, Outcome
from chronod.runner.runner import LOST_ERROR, Runner

TEST_USER = "chrono-test-user"


def spec(command, **kw) -> JobSpec:
    return JobSpec(id="job", owner="team", schedule="@every 1m", command=command, idempotency_class="idempotent", **kw)


def wait_for(handle: Handle, timeout: float = 10) -> None:
    poller = select.poll()
    poller.register(handle.fd, select.POLLIN)
    assert poller.poll(int(timeout * 1000)), f"attempt {handle.run_id} still running after {timeout}s"


def finish(runner: Runner, handle: Handle, timeout: float = 10) -> Outcome:
    wait_for(handle, timeout)
    outcome = runner.collect(handle)
    assert outcome is not None
    return outcome


def run(runner: Runner, command, run_id: str = "r1", env: dict | None = None, timeout: float = 10, **kw) -> Outcome:
    handle = runner.launch(LaunchRequest(run_id, 1, spec(command, **kw), env or {}))
    return finish(runner, handle, timeout)


def wait_started(runner: Runner, handle: Handle, timeout: float = 5) -> None:
    end = time.monotonic() + timeout
    while not runner.refresh(handle):
        assert time.monotonic() < end, "the supervisor never wrote its started file"
        time.sleep(0.01)


def alive(pid: int) -> bool:
    """Running and not a zombie; a process reaped while we look is not alive."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return files.proc_start_ticks(pid) is not None and "Z" not in stat.split(")")[1][:3]


def rss_kb(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    # an exited process not yet reaped (a zombie) has no memory lines
    raise ProcessLookupError(f"no VmRSS for {pid}: it has exited")


@pytest.fixture
def runner(tmp_path):
    r = Runner(tmp_path / "state")
    yield r
    r.close()


def test_a_string_command_runs_through_the_shell(runner):
    out = run(runner, "echo $((6 * 7)) | tr 4 X")
    assert (out.state, out.exit_code, out.output_tail) == ("succeeded", 0, "X2\n")
    assert out.pid and out.started_at <= out.finished_at


def test_a_list_command_is_executed_without_a_shell(runner):
    out = run(runner, ("printf", "%s|", "a b", "$HOME", "*"))
    assert out.output_tail == "a b|$HOME|*|"


def test_the_job_sees_the_minimal_environment_plus_chrono_and_spec_variables(runner, monkeypatch):
    monkeypatch.setenv("DAEMON_SECRET_SENTINEL", "leaked")
    handle = runner.launch(
        LaunchRequest(
            "r1",
            1,
            spec(
                ("/usr/bin/env",),
                env=(("GREETING", "hello world"), ("CHRONO_RUN_ID", "forged"), ("CHRONO_RUN_TAG", "forged")),
            ),
            {"CHRONO_RUN_ID": "r1", "CHRONO_ATTEMPT": "1"},
        )
    )
    out = finish(runner, handle)
    env = dict(line.split("=", 1) for line in out.output_tail.splitlines())
    me = pwd.getpwuid(os.geteuid())
    assert env == {
        "HOME": me.pw_dir,
        "SHELL": me.pw_shell,
        "LOGNAME": me.pw_name,
        "USER": me.pw_name,
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        if os.geteuid() == 0
        else "/usr/local/bin:/usr/bin:/bin",
        "GREETING": "hello world",
        "CHRONO_RUN_ID": "r1",
        "CHRONO_ATTEMPT": "1",
        "CHRONO_RUN_TAG": contain.tag_of(runner.state_dir, "r1", 1),  # what the subreaper fallback finds
    }


def test_the_job_runs_in_its_workdir_with_its_stdin(runner, tmp_path):
    out = run(runner, "pwd; tr a-z A-Z", workdir=str(tmp_path), stdin="line one\nline two\n")
    assert out.output_tail == f"{tmp_path}\nLINE ONE\nLINE TWO\n"


def test_without_stdin_the_job_reads_dev_null(runner):
    out = run(runner, "cat; echo eof")
    assert out.output_tail == "eof\n"


SIGNAL_MASKS = "grep -E '^Sig(Blk|Ign)' /proc/self/status"


def test_the_job_starts_with_no_blocked_or_ignored_signals(runner):
    # Python ignores SIGPIPE, the daemon blocks its stop signals around the fork: neither
    # may reach the job.
    out = run(runner, SIGNAL_MASKS)
    assert standard_signals(out.output_tail) == {"SigBlk": 0, "SigIgn": 0}


def standard_signals(masks: str) -> dict[str, int]:
    # Signals 1-31 only: glibc's posix_spawn leaves its two internal real-time signals
    # (32, 33) ignored, and every glibc program reinstalls its own handlers for them.
    return {name: int(bits, 16) & 0x7FFFFFFF for name, bits in (line.split(":\t") for line in masks.splitlines())}


def test_a_non_zero_exit_is_a_failure_with_its_code(runner):
    out = run(runner, "echo to stderr >&2; exit 3")
    assert (out.state, out.exit_code, out.signal) == ("failed", 3, None)
    assert out.output_tail == "to stderr\n"
    assert out.error == "exit code 3"


def test_a_job_killed_by_a_signal_is_a_failure_with_the_signal(runner):
    out = run(runner, "kill -KILL $$")
    assert (out.state, out.exit_code, out.signal) == ("failed", None, signal.SIGKILL)
    assert "SIGKILL" in out.error


def test_a_timeout_sends_term_to_the_group_then_kill_after_the_grace(runner):
    # The shell traps TERM and keeps going; only SIGKILL, one grace period later, stops it.
    out = run(runner, "trap 'echo got TERM' TERM; echo up; while :; do sleep 0.05; done", timeout_s=1, kill_grace_s=1)
    assert (out.state, out.signal) == ("timed_out", signal.SIGKILL)
    assert out.output_tail.startswith("up\n") and "got TERM\n" in out.output_tail
    assert out.error == "killed after timeout 1s"
    assert (out.finished_at - out.started_at).total_seconds() >= 2


def test_cancel_stops_the_group_and_records_cancelled(runner):
    handle = runner.launch(LaunchRequest("r1", 1, spec("sleep 30 & sleep 30"), {}))
    wait_started(runner, handle)
    runner.cancel(handle)
    out = finish(runner, handle, timeout=5)
    assert (out.state, out.signal) == ("cancelled", signal.SIGTERM)
    assert not alive(handle.pid)


def test_term_to_the_supervisor_does_not_reach_the_job(runner):
    handle = runner.launch(LaunchRequest("r1", 1, spec("sleep 0.5; echo done"), {}))
    wait_started(runner, handle)
    os.kill(handle.supervisor_pid, signal.SIGTERM)
    os.kill(handle.supervisor_pid, signal.SIGHUP)
    out = finish(runner, handle)
    assert (out.state, out.output_tail) == ("succeeded", "done\n")


def test_fifty_megabytes_of_output_are_counted_exactly_and_only_the_tail_is_kept(runner):
    before = rss_kb()
    handle = runner.launch(
        LaunchRequest(
            "r1",
            1,
            spec("for i in 1 2 3 4 5; do head -c 10485760 /dev/zero; sleep 0.2; done; echo END", output_limit_kb=16),
            {},
        )
    )
    wait_started(runner, handle)  # the supervisor is up (its interpreter's own start is not growth)
    samples = []
    poller = select.poll()
    poller.register(handle.fd, select.POLLIN)
    watched = time.monotonic()
    stopped = "the run's end"
    while not (ready := poller.poll(20)):
        try:
            samples.append(rss_kb(handle.supervisor_pid))
        except (FileNotFoundError, ProcessLookupError) as e:
            stopped = f"its supervisor {handle.supervisor_pid} gone ({e!r})"
            break
    stopped += f" after {time.monotonic() - watched:.2f} s; poll said {ready}"
    out = finish(runner, handle)
    assert out.output_bytes == 52428800 + 4
    assert len(out.output_tail) == 16 * 1024 and out.output_tail.endswith("\x00END\n")
    assert rss_kb() - before < 10_000, "the daemon's memory grew with the job's output"
    # (once, on a quiet host, the watch stopped after one sample: what stopped it is said)
    assert len(samples) >= 3, f"watched the supervisor {len(samples)} times, until {stopped}"
    assert max(samples) - samples[0] < 10_000, f"the supervisor's memory grew: {samples[0]} -> {max(samples)} KiB"


def test_a_background_child_holding_the_output_pipe_does_not_hang_the_run(runner):
    start = time.monotonic()
    out = run(runner, "sleep 30 & echo $!")
    elapsed = time.monotonic() - start
    lingering = int(out.output_tail.split()[0])
    try:
        assert out.state == "succeeded"
        assert elapsed < 2, f"the run took {elapsed:.1f}s"
        assert alive(lingering), "a job's background children are left alone after a normal exit"
    finally:
        os.killpg(out.pid, signal.SIGKILL)


def test_no_descriptor_of_the_daemon_leaks_into_the_job(runner, tmp_path):
    # Inheritable descriptors in the daemon: a socket, a file, the pidfd and pipe of another job;
    # and the start lock (chronod.runner.fence), which the job's child holds until its exec.
    runner.fence(1)
    sock = socket.socket()
    sock.set_inheritable(True)
    leaky = os.open(tmp_path / "db", os.O_RDWR | os.O_CREAT)
    os.set_inheritable(leaky, True)
    other = runner.launch(LaunchRequest("other", 1, spec("sleep 0.5"), {}))
    try:
        out = run(runner, ("ls", "/proc/self/fd"))
    finally:
        sock.close()
        os.close(leaky)
    assert sorted(int(fd) for fd in out.output_tail.split()) == [0, 1, 2, 3]  # 3 is ls's own listing
    assert finish(runner, other).state == "succeeded"


def test_the_job_leads_its_own_process_group_and_session(runner):
    out = run(runner, "cut -d' ' -f5,6 /proc/$$/stat")
    pgid, sid = map(int, out.output_tail.split())
    assert pgid == sid == out.pid
    assert pgid not in (os.getpgrp(), os.getsid(0))


def run_many(runner, n: int = 100, within_s: float = 20) -> tuple[list, dict, float]:
    """Launch `n` runs at once, collect and discard each as it ends: (handles, outcomes by
    run id, the monotonic deadline)."""
    handles = [
        runner.launch(LaunchRequest(f"r{i}", 1, spec("sleep 0.2; echo $CHRONO_RUN_ID"), {"CHRONO_RUN_ID": f"r{i}"}))
        for i in range(n)
    ]
    outcomes = {}
    end = time.monotonic() + within_s
    while runner.handles() and time.monotonic() < end:
        for h in runner.ready(1):
            outcomes[h.run_id] = runner.collect(h)
            runner.discard(h.run_id, h.attempt)
    return handles, outcomes, end


def test_many_concurrent_attempts_are_all_collected(runner, tmp_path):
    handles, outcomes, _ = run_many(runner)
    assert len(outcomes) == len(handles)
    assert all(o.state == "succeeded" and o.output_tail == f"{rid}\n" for rid, o in outcomes.items())
    assert os.listdir(tmp_path / "state") == []


def test_could_not_start_cases_fail_with_a_clear_reason(runner, tmp_path):
    assert run(runner, ("/usr/bin/nope",), run_id="a").error == "command not found: /usr/bin/nope"
    assert run(runner, "true", run_id="b", shell="/bin/nosh").error == "shell not found: /bin/nosh"
    assert run(runner, "true", run_id="c", workdir="/does/not/exist").error == "workdir does not exist: /does/not/exist"
    (tmp_path / "file").write_text("")
    assert run(runner, "true", run_id="d", workdir=str(tmp_path / "file")).error.startswith(
        "workdir is not a directory"
    )
    (tmp_path / "script").write_text("echo hi\n")
    assert run(runner, (str(tmp_path / "script"),), run_id="e").error.startswith("permission denied")
    out = run(runner, "true", run_id="f", user="ghost")
    assert (out.state, out.error, out.pid) == ("failed", "user 'ghost' does not exist", None)


def test_an_adopted_attempt_reports_its_real_exit_code(tmp_path):
    first = Runner(tmp_path / "state")
    handle = first.launch(LaunchRequest("r1", 1, spec("sleep 1; exit 3"), {}))
    wait_started(first, handle)
    first.close()  # the daemon dies; its supervisor does not
    second = Runner(tmp_path / "state")
    adopted = second.adopt("r1", 1)
    assert isinstance(adopted, Handle) and adopted.pid == handle.pid
    out = finish(second, adopted)
    assert (out.state, out.exit_code) == ("failed", 3)
    assert second.orphans() == [("r1", 1)]  # kept until the outcome is stored
    second.discard("r1", 1)
    assert second.orphans() == []


def test_an_attempt_that_ended_while_no_daemon_was_up_is_adopted_as_its_outcome(tmp_path):
    first = Runner(tmp_path / "state")
    handle = first.launch(LaunchRequest("r1", 1, spec("echo bye"), {}))
    wait_for(handle)
    first.close()
    second = Runner(tmp_path / "state")
    assert second.orphans() == [("r1", 1)]
    out = second.adopt("r1", 1)
    assert isinstance(out, Outcome) and (out.state, out.output_tail) == ("succeeded", "bye\n")
    # the result stays on disk until the outcome is stored: a crash in between loses nothing
    assert second.adopt("r1", 1) == out
    second.discard("r1", 1)
    assert second.orphans() == [] and second.adopt("r1", 1) is None


def test_a_supervisor_killed_hard_makes_the_attempt_lost_and_its_job_is_stopped(runner):
    handle = runner.launch(LaunchRequest("r1", 1, spec("sleep 30"), {}))
    wait_started(runner, handle)
    os.kill(handle.supervisor_pid, signal.SIGKILL)
    out = finish(runner, handle)
    assert out.state == "lost" and out.error.startswith(LOST_ERROR)
    assert "has been killed" in out.error
    time.sleep(0.1)
    assert not alive(handle.pid)


def test_adopting_an_attempt_whose_supervisor_died_knows_nothing(tmp_path):
    first = Runner(tmp_path / "state")
    handle = first.launch(LaunchRequest("r1", 1, spec("sleep 30"), {}))
    wait_started(first, handle)
    os.kill(handle.supervisor_pid, signal.SIGKILL)
    wait_for(handle)
    os.waitpid(handle.supervisor_pid, 0)
    first.close()
    second = Runner(tmp_path / "state")
    assert second.adopt("r1", 1) is None
    assert second.adopt("never-started", 1) is None
    assert second.orphans() == []


def test_a_recycled_supervisor_pid_is_not_adopted(tmp_path):
    first = Runner(tmp_path / "state")
    handle = first.launch(LaunchRequest("r1", 1, spec("sleep 30"), {}))
    wait_started(first, handle)
    path = files.path_of(tmp_path / "state", "r1", 1, files.STARTED)
    record = files.read_json(path)
    files.write_json(path, {**record, "supervisor_start_ticks": record["supervisor_start_ticks"] - 1}, durable=False)
    first.close()
    try:
        assert Runner(tmp_path / "state").adopt("r1", 1) is None
    finally:  # the job and its supervisor may have ended already on a slow host
        with contextlib.suppress(ProcessLookupError):
            os.killpg(handle.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(handle.supervisor_pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(handle.supervisor_pid, 0)


# -- privilege drop: root only ---------------------------------------------------------


@pytest.fixture(scope="module")
def test_user():
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: privilege-drop tests need root (they create a system user and switch to it)")
    created = subprocess.run(["getent", "passwd", TEST_USER], capture_output=True).returncode != 0
    if created:
        subprocess.run(["useradd", "--system", "--no-create-home", TEST_USER], check=True)
    yield pwd.getpwnam(TEST_USER)
    if created:
        subprocess.run(["userdel", TEST_USER], check=False)


@pytest.mark.root
@pytest.mark.xdist_group("users")  # creates a system user, as test_delegation does
def test_a_root_daemon_runs_the_job_as_its_user_with_that_users_groups(runner, test_user):
    out = run(runner, "id -u; id -g; id -G; echo $HOME $USER $LOGNAME", user=TEST_USER)
    uid, gid, groups, who = out.output_tail.splitlines()
    assert out.state == "succeeded"
    assert (int(uid), int(gid)) == (test_user.pw_uid, test_user.pw_gid)
    assert sorted(map(int, groups.split())) == sorted(set(os.getgrouplist(TEST_USER, test_user.pw_gid)))
    assert 0 not in map(int, groups.split())
    assert who == f"{test_user.pw_dir} {TEST_USER} {TEST_USER}"


@pytest.mark.root
@pytest.mark.xdist_group("users")  # creates a system user, as test_delegation does
def test_a_job_switched_to_a_user_starts_with_no_blocked_or_ignored_signals(runner, test_user):
    out = run(runner, SIGNAL_MASKS, user=TEST_USER)
    assert standard_signals(out.output_tail) == {"SigBlk": 0, "SigIgn": 0}


@pytest.mark.root
@pytest.mark.xdist_group("users")  # creates a system user, as test_delegation does
def test_a_named_group_replaces_the_users_primary_group(runner, test_user):
    out = run(runner, "id -g", user=TEST_USER, group="nogroup")
    assert int(out.output_tail) == grp.getgrnam("nogroup").gr_gid


@pytest.mark.root
@pytest.mark.xdist_group("users")  # creates a system user, as test_delegation does
def test_an_unknown_user_or_group_fails_instead_of_running_as_root(runner, test_user, tmp_path):
    witness = tmp_path / "ran"
    out = run(runner, f"touch {witness}", user="ghost")
    assert (out.state, out.error) == ("failed", "user 'ghost' does not exist")
    out = run(runner, f"touch {witness}", run_id="r2", user=TEST_USER, group="ghosts")
    assert (out.state, out.error) == ("failed", "group 'ghosts' does not exist")
    assert not witness.exists()


@pytest.mark.root
@pytest.mark.xdist_group("users")  # creates a system user, as test_delegation does
def test_a_workdir_the_user_cannot_enter_is_reported_as_such(runner, test_user, tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    out = run(runner, "true", user=TEST_USER, workdir=str(private))
    assert out.error == f"workdir not accessible as user '{TEST_USER}': {private}"


@pytest.mark.root
@pytest.mark.xdist_group("users")  # creates a system user, as test_delegation does
def test_a_non_root_daemon_refuses_to_switch_users(test_user):
    # The "daemon" is a fork of this test process that drops to the test user, then
    # launches a job that asks for root.
    state = Path(tempfile.mkdtemp(prefix="chrono-nonroot-"))
    os.chown(state, test_user.pw_uid, test_user.pw_gid)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(test_user.pw_gid)
            os.setuid(test_user.pw_uid)
            r = Runner(state / "state")
            o = finish(r, r.launch(LaunchRequest("r1", 1, spec("id -u", user="root"), {})))
            os.write(write_end, json.dumps([o.state, o.error, o.output_tail]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        got = f.read()
    os.waitpid(pid, 0)
    shutil.rmtree(state)
    assert json.loads(got) == [
        "failed",
        f"running as user 'root' needs a root daemon (chronod runs as uid {test_user.pw_uid})",
        "",
    ]
