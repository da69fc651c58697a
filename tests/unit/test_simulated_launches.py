"""The runner without processes that the fleet benchmark uses (chronod.sim.launches)."""

from __future__ import annotations

import os
import select

from chronod.core.model import JobSpec
from chronod.runner.api import LaunchRequest
from chronod.sim.launches import FIRST_PID, SimulatedLaunches

SPEC = JobSpec(id="j", owner="ops", schedule="@every 10s", command=["true"], idempotency_class="idempotent")


def readable(fd: int, timeout_s: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(int(timeout_s * 1000)))


def test_an_attempt_ends_succeeded_once_its_descriptor_is_readable_and_names_no_real_process(tmp_path):
    runner = SimulatedLaunches(tmp_path / "state", duration_s=0.05)
    handle = runner.launch(LaunchRequest("j-1", 1, SPEC, {}))
    assert handle.supervisor_pid >= FIRST_PID > 2**22  # above any pid_max
    assert handle.pid is None  # as with the launcher: the job's pid is not known at the start
    assert runner.collect(handle) is None  # still "running"
    assert readable(handle.fd, 5)
    outcome = runner.collect(handle)
    assert outcome is not None and (outcome.state, outcome.exit_code, outcome.signal) == ("succeeded", 0, None)
    assert outcome.started_at == handle.started_at and outcome.finished_at >= outcome.started_at
    assert handle.fd == -1 and runner.collect(handle) is None  # collected once
    assert runner.adopt("j-1", 1) is None and runner.orphans() == []


def test_a_cancelled_attempt_ends_at_once_cancelled(tmp_path):
    runner = SimulatedLaunches(tmp_path / "state", duration_s=3600)
    handle = runner.launch(LaunchRequest("j-1", 1, SPEC, {}))
    other = runner.launch(LaunchRequest("j-2", 1, SPEC, {}))
    assert other.supervisor_pid != handle.supervisor_pid
    runner.cancel(handle)
    assert readable(handle.fd, 5)
    outcome = runner.collect(handle)
    assert outcome is not None and (outcome.state, outcome.signal) == ("cancelled", 15)
    assert not readable(other.fd, 0)
    fd = other.fd
    runner.close()
    assert other.fd == -1
    try:
        os.fstat(fd)
    except OSError:
        pass
    else:
        raise AssertionError("close() left a descriptor open")


def test_nothing_in_chronod_itself_builds_it(tmp_path):
    """Only a program that builds the daemon itself passes it in (bench/chronod_simulated.py):
    no module of chronod outside chronod.sim names it."""
    import chronod

    root = os.path.dirname(chronod.__file__)
    naming = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and os.sep + "sim" + os.sep not in path:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                if "SimulatedLaunches" in text or "sim.launches" in text:
                    naming.append(path)
    assert naming == []
