"""Containment: a run's processes end with it, including those that left its process
group and session with `setsid` (docs/launcher.md, "Containment"). Real processes, a real
cgroup v2 where this machine has a writable one, and the subreaper fallback always."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from pathlib import Path

import pytest

from chronod.runner import contain
from chronod.runner.api import LaunchRequest
from chronod.runner.runner import LOST_ERROR, Runner
from tests.integration.daemon_helpers import wait_until
from tests.integration.test_runner import alive, finish, spec, wait_started

HERE = contain.detect("/nonexistent-probe-only")  # what this machine offers
if HERE.base is not None:
    contain.remove(HERE.base)
CGROUP_WHY = f"no writable cgroup v2 on this machine: {HERE.why}"


@pytest.fixture(params=["cgroup", "subreaper"])
def kind(request):
    if request.param == "cgroup" and HERE.kind != contain.CGROUP:
        pytest.skip(CGROUP_WHY)
    return request.param


@pytest.fixture(params=[True, False], ids=["launcher", "supervisor"])
def runner(request, tmp_path, kind):
    forced = contain.subreaper_only("forced by the test") if kind == "subreaper" else None
    r = Runner(tmp_path / "state", zygote=True, many=request.param, containment=forced)
    assert r.containment.kind == kind
    yield r
    r.close()


def _launch(r: Runner, command: str, **kw):
    run_id = f"c-{uuid.uuid4().hex[:12]}"  # the fallback finds a run's processes by its id
    return r.launch(LaunchRequest(run_id, 1, spec(command, **kw), {}))


def _escaped(tmp_path: Path) -> int:
    """The pid the job's `setsid` child wrote (it left the job's group and session)."""
    marker = tmp_path / "escaped"
    wait_until(lambda: marker.exists() and marker.read_text().strip(), what="the setsid child to start")
    pid = int(marker.read_text())
    assert os.getsid(pid) == pid, "the child is not in a session of its own"
    return pid


def _setsid(tmp_path: Path, seconds: int) -> str:
    return f"setsid sh -c 'echo $$ > {tmp_path}/escaped.tmp; mv {tmp_path}/escaped.tmp {tmp_path}/escaped; exec sleep {seconds}'"


def test_a_timeout_kills_what_left_the_process_group(runner, tmp_path):
    handle = _launch(runner, f"{_setsid(tmp_path, 6001)} & sleep 6005", timeout_s=2, kill_grace_s=1)
    escaped = _escaped(tmp_path)
    out = finish(runner, handle, timeout=15)
    assert out.state == "timed_out"
    wait_until(lambda: not alive(escaped), timeout=5, what="the setsid child of a timed-out run to die")


def test_a_cancel_as_overlap_replace_does_kills_what_left_the_process_group(runner, tmp_path):
    handle = _launch(runner, f"({_setsid(tmp_path, 6003)} &); sleep 6004")
    escaped = _escaped(tmp_path)
    runner.cancel(handle)
    out = finish(runner, handle, timeout=15)
    assert out.state == "cancelled"
    wait_until(lambda: not alive(escaped), timeout=5, what="the setsid child of a cancelled run to die")


def test_a_killed_launcher_leaves_no_worker_behind_before_the_next_attempt(runner, tmp_path):
    """The idempotent job's worker runs under `setsid ... & wait`; the launcher is killed
    -9: by the time the attempt is collected `lost` (and the next one may start), the
    worker is dead."""
    handle = _launch(runner, f"{_setsid(tmp_path, 6002)} & wait")
    wait_started(runner, handle)
    escaped = _escaped(tmp_path)
    os.kill(handle.supervisor_pid, signal.SIGKILL)
    out = finish(runner, handle)
    assert out.state == "lost" and out.error.startswith(LOST_ERROR)
    assert "has been killed" in out.error
    assert not alive(escaped), "attempt 1's worker outlived its launcher: attempt 2 would run beside it"


def test_a_job_that_ends_well_keeps_its_background_child_and_its_cgroup_goes_with_it(tmp_path):
    """As under cron, a run that ends by itself does not take its background processes
    down; its cgroup is removed once they are gone."""
    if HERE.kind != contain.CGROUP:
        pytest.skip(CGROUP_WHY)
    r = Runner(tmp_path / "state", many=True)
    escaped = 0
    try:
        # the child outlives its run until the test kills it (a 3 s sleep ended by itself
        # on a loaded host before the test looked, and the test failed)
        handle = _launch(r, f"{_setsid(tmp_path, 600)} &")
        escaped = _escaped(tmp_path)
        cgroup = r.containment.run_cgroup(handle.run_id, 1)
        assert cgroup is not None and escaped in contain.pids(cgroup)
        assert finish(r, handle).state == "succeeded"
        assert alive(escaped)
        os.kill(escaped, signal.SIGKILL)
        wait_until(lambda: not alive(escaped), what="the background child to end")
        launch_again = _launch(r, "true")  # the launcher tidies lingering cgroups as it launches
        finish(r, launch_again)
        wait_until(lambda: not os.path.isdir(cgroup), what="the run's cgroup to be removed")
    finally:
        if escaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(escaped, signal.SIGKILL)
        r.close()


def test_the_containment_in_force_is_described(tmp_path):
    if HERE.kind == contain.CGROUP:
        got = contain.detect(tmp_path)
        assert got.describe() == f"cgroup v2 ({got.base})" and got.base is not None
        assert os.path.isdir(got.base)
        contain.remove(got.base)
    no_v2 = tmp_path / "mountinfo"
    no_v2.write_text("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n")
    fallback = contain.detect(tmp_path, mountinfo=str(no_v2))
    assert fallback.kind == contain.SUBREAPER
    assert fallback.describe() == "subreaper (no cgroup v2 file system is mounted)"


def test_the_launcher_spawns_into_a_run_cgroup_and_stands_in_its_own_after(tmp_path):
    """The launcher starts a job in its cgroup by stepping into that cgroup for the instant
    of the spawn: the job is in it, the launcher is back in its own cgroup after every
    start, and a run whose cgroup is killed (a timeout) does not take the launcher with it."""
    if HERE.kind != contain.CGROUP:
        pytest.skip(CGROUP_WHY)
    r = Runner(tmp_path / "state", many=True)
    try:
        home = Path("/proc/self/cgroup").read_text()  # the launcher is spawned where its daemon stands
        handles = [
            _launch(
                r,
                f"cat /proc/self/cgroup > {tmp_path}/t{i}; mv {tmp_path}/t{i} {tmp_path}/cg{i}; sleep 600",
                timeout_s=2,
            )
            for i in range(3)
        ]
        launcher_pid = handles[0].supervisor_pid
        for i, handle in enumerate(handles):
            wait_until(lambda i=i: (tmp_path / f"cg{i}").exists(), what=f"job {i} to write its cgroup")
            cgroup = r.containment.run_cgroup(handle.run_id, 1)
            assert cgroup is not None
            # the launcher steps back once its spawn returns, which on a loaded host can be
            # after the job has written its file: back within a moment, never left there
            wait_until(
                lambda c=cgroup: launcher_pid not in contain.pids(c), timeout=5, what="the launcher to step back"
            )
            assert os.path.basename(cgroup) in (tmp_path / f"cg{i}").read_text()
        assert Path(f"/proc/{launcher_pid}/cgroup").read_text() == home
        assert [finish(r, h, timeout=15).state for h in handles] == ["timed_out"] * 3
        assert alive(launcher_pid), "a run's cgroup killed the launcher that started it"
        assert finish(r, _launch(r, "true")).state == "succeeded"
    finally:
        r.close()
