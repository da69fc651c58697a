"""`python -m chronod.sim` as an operator drives it: every bad argument is a usage error
(exit 2) that says which one and why, and an interrupted run leaves nothing behind."""

from __future__ import annotations

import pytest

from chronod.sim import __main__ as sim_cli
from chronod.sim.driver import Simulation


@pytest.mark.parametrize(
    "args, words",
    [
        (["--days", "nan"], "--days"),
        (["--days", "inf"], "--days"),
        (["--days", "1e9"], "--days"),
        (["--jobs", "10000000"], "--jobs"),
        (["--nodes", "100000"], "--nodes"),
    ],
)
def test_an_argument_no_simulation_can_run_is_a_usage_error_naming_it(args, words, capsys):
    assert sim_cli.main(args) == sim_cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("chronod.sim: error: ") and words in err and "Traceback" not in err


def test_an_interrupted_simulation_removes_its_working_directory(monkeypatch):
    made = []

    def interrupted(self):
        made.append(self.tmp)
        raise KeyboardInterrupt

    monkeypatch.setattr(Simulation, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sim_cli.main(["--days", "0.01", "--jobs", "2"])
    [tmp] = made
    assert not tmp.exists()


def test_the_result_fits_an_80_column_terminal():
    from chronod.sim.__main__ import render

    broken = {"held": False, "broken": 2, "first": {"time": "2025-03-29T20:06:29Z", "job": "job00103", "run_id": "-"}}
    result = {
        "seed": 3,
        "days": 0.05,
        "jobs": 20,
        "nodes": 1,
        "store": "memory",
        "faults": ["backfill", "clock", "crash", "dst", "outage", "registry", "stall", "window"],
        "processes": 39,
        "daemon_lives": 3,
        "wall_s": 0.06,
        "days_per_s": 0.8666,
        "invariants": {
            "one_terminal_state": {"held": True},
            "silence_truth": {**broken, "first": {**broken["first"], "what": "silence notice " * 12}},
        },
    }
    text = render(result, 80)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "0.8666 simulated days per second" in " ".join(text.split())
    assert "  held    one_terminal_state" in text.splitlines()
