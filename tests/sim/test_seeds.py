"""Seeds that once broke a promise, each pinned with the fewest faults and days that still
showed it (`python -m chronod.sim --days 0.1 --jobs 20 --seed S`, every fault, found it)."""

from __future__ import annotations

from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import FAULTS, Config


def broken(cfg: Config, names: list[str]) -> dict[str, str]:
    out = Simulation(cfg).run()
    try:
        return {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()


def test_seed_34_a_catch_up_backlog_that_outlasts_the_simulation_is_still_waiting():
    # job00003 runs every 30 s, catchup: all, overlap: forbid, and its runs take about a
    # minute: after a 27-minute crash its backlog drains one run after another past the
    # end, so an occurrence due an hour before the end rightly still runs or waits.
    cfg = Config(days=0.1, jobs=20, seed=34, faults=frozenset({"crash"}))
    assert not broken(cfg, ["one_terminal_state", "audit_agrees"])


def test_seed_34_a_scheduled_occurrence_that_waited_its_turn_behind_a_backfill_run_is_not_late():
    # every fault: job00018 (every 30 s, overlap: forbid) fell due at 11:06:30 while only a
    # backfill run of it was going; it waited its turn (docs/backfill.md, the schedule
    # comes first) and started the instant that run ended, 21 s after its time.
    cfg = Config(days=0.1, jobs=20, seed=34, faults=frozenset(FAULTS))
    assert not broken(cfg, ["fire_lag_bounded", "schedule_first"])
