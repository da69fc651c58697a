"""How many launchers a daemon keeps (chronod.runner.runner.launchers): one per CPU it may
run on, at most MAX_LAUNCHERS (docs/launcher.md, "Two launchers")."""

from __future__ import annotations

import pytest

from chronod.runner import runner


@pytest.mark.parametrize(("cpus", "want"), [(1, 1), (2, 2), (8, runner.MAX_LAUNCHERS)])
def test_one_launcher_per_cpu_the_daemon_may_run_on_at_most_the_maximum(monkeypatch, cpus, want):
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert runner.launchers() == want
