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
