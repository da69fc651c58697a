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


def gone_at_the_next_start(monkeypatch: pytest.MonkeyPatch, cfg: Config, events: list[tuple[float, str, dict]]):
    """Run `cfg` (one job a file) with `gone`'s file broken by the `registry` event (the
    running chronod keeps its last good version; the next start has none) and `events`
    (seconds after the start, kind, data)."""
    monkeypatch.setattr(scenario, "JOBS_PER_FILE", 1)
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1.0, 0))
    sim = Simulation(cfg)

    def break_gones_file() -> str:
        name = max(sim.registry.files)  # jobs-001.yaml: `gone`
        sim.registry.write(name, bad=True)
        return f"broke {name}"

    monkeypatch.setattr(sim.registry, "edit", break_gones_file)
    sim.events = [Event(sim.t0 + at, kind, data) for at, kind, data in events]
    return sim.run()


def test_a_job_removed_by_a_start_has_a_record_of_each_occurrence_that_fell_due_while_down(
    monkeypatch: pytest.MonkeyPatch,
):
    cfg = Config(days=0.07, jobs=2, seed=1, faults=frozenset(), job_docs=(KEPT, GONE), start=START)
    # the file breaks at 00:02; chronod dies at 00:07:30 and is back at 00:10:30
    out = gone_at_the_next_start(
        monkeypatch, cfg, [(120.0, "registry", {}), (450.0, "crash", {"calls": 0, "downtime": 180.0})]
    )
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


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_runs_an_each_job_made_offline_keep_their_outcomes_when_the_next_start_removes_it(
    monkeypatch: pytest.MonkeyPatch, store: str
):
    """A `run_on: each` job runs through a database outage (its runs go to the spool);
    chronod dies offline, and the next start no longer carries the job. The runs after
    its stored occurrence are recorded as they ended, never `cancelled` by the removal:
    the first form of the removal's record wrote `cancelled` rows for them before the
    spool's replay. The stored occurrence itself, 00:04 here, ran offline too: the
    removal cancels it before the replay, and the replay's record of its start, earlier
    than that cancel, outranks it (`Store.claim_offline`)."""
    each = {**BASE, "run_on": "each"}
    docs = ({**each, "id": "kept"}, {**each, "id": "gone"})
    cfg = Config(days=0.02, jobs=2, seed=1, faults=frozenset(), job_docs=docs, start=START, store=store)
    # the file breaks at 00:02; the database is out 00:03:30-00:10:30; chronod dies at 00:06:40
    events = [
        (120.0, "registry", {}),
        (210.0, "outage", {"seconds": 420.0}),
        (400.0, "crash", {"calls": 0, "downtime": 300.0}),
    ]
    out = gone_at_the_next_start(monkeypatch, cfg, events)
    try:
        assert [life.how for life in out.world.lives][:1] == ["crash"]
        ran = {p.scheduled_at.strftime("%H:%M") for p in out.world.procs.values() if p.job_id == "gone"}
        rows = {r.scheduled_at.strftime("%H:%M"): r for r in out.store.runs("gone")}
        assert {"00:04", "00:05", "00:06"} <= ran, sorted(ran)
        offline = ["00:04", "00:05", "00:06"]
        got = {m: (rows[m].state, rows[m].error) if m in rows else None for m in offline}
        assert all(v is not None and v[0] == "succeeded" for v in got.values()), got
    finally:
        out.close()
