"""A job whose occurrences fell due while chronod was down, and that the next start no
longer carries (its file broke while the last chronod ran, which kept its last good
version; the next has none), is removed by that start. The removal cancels the stored
occurrence; those after it fell due while the job was registered too, were never stored
(the catch-up that would store them never runs for a removed job), and must be recorded
in the same write. Seed 101 of a quarter day of 1,000 jobs found one with no record at
all (there the occurrence fell due during a database outage, before chronod died)."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim import driver, scenario
from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
BASE = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "idempotent",
    "schedule": "* * * * *",
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
KEPT = {**BASE, "id": "kept"}
GONE = {**BASE, "id": "gone"}


def test_a_job_removed_by_a_start_has_a_record_of_each_occurrence_that_fell_due_while_down(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(scenario, "JOBS_PER_FILE", 1)
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1.0, 0))
    cfg = Config(days=0.07, jobs=2, seed=1, faults=frozenset(), job_docs=(KEPT, GONE), start=START)
    sim = Simulation(cfg)

    def break_gones_file() -> str:
        name = max(sim.registry.files)  # jobs-001.yaml: `gone`
        sim.registry.write(name, bad=True)
        return f"broke {name}"

    monkeypatch.setattr(sim.registry, "edit", break_gones_file)
    # the file breaks at 00:02; chronod dies at 00:07:30 and is back at 00:10:30
    sim.events = [
        Event(sim.t0 + 120.0, "registry"),
        Event(sim.t0 + 450.0, "crash", {"calls": 0, "downtime": 180.0}),
    ]
    out = sim.run()
    try:
        assert [life.how for life in out.world.lives][:1] == ["crash"]
        rows = {r.scheduled_at.strftime("%H:%M"): (r.state, r.error) for r in out.store.runs("gone")}
        down = {m: rows.get(m) for m in ("00:08", "00:09", "00:10")}
        assert all(row is not None and row[0] == "cancelled" for row in down.values()), down
        assert all(row[1].startswith("job removed from the registry") for row in down.values() if row), down
        assert not any(m > "00:10" for m in rows), sorted(rows)  # none stored after the removal
        names = ["one_terminal_state", "reason_truth", "audit_truth"]
        assert not {name: bad[0].what for name, bad in check(out, names).items() if bad}
    finally:
        out.close()
