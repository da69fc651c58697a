"""The record never lies about why: the reasons of skipped states against what the
simulation saw run, the schedule before backfills, held occurrences in scheduled order,
and a fleet's failover recorded as what it was (chronod.sim.invariants `reason_truth`,
`schedule_first`, `held_order`; chronod.sim.fleet_checks `reasons_true`). Each promise
holds on seeds with the real daemon and is caught on a daemon broken on purpose."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.daemon.dispatch import Dispatch
from chronod.daemon.starter import Starter
from chronod.sim.driver import Simulation
from chronod.sim.fleet import FleetSimulation
from chronod.sim.fleet_checks import check_fleet
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

# --- a backfill beside the live schedule (issue case 2) -----------------------------------

EVERY4 = {
    "id": "every4",
    "owner": "ops",
    "schedule": "*/4 * * * * *",
    "command": "true",
    "idempotency_class": "idempotent",
    "overlap": "forbid",
    "catchup": "latest",
    "catchup_window_s": 600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}


def backfilled(seed: int):
    """`chronoctl backfill --from -90s --to -4s --only all` of an every-4-s job that forbids
    overlap, whose runs take about 3 s: the backfill's runs meet the live schedule."""
    cfg = Config(days=0.004, jobs=1, seed=seed, faults=frozenset({"backfill"}), job_docs=(EVERY4,), mean_s=3.0)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 120, "backfill", {"job": "every4", "only": "all", "since_s": 90, "until_s": 4})]
    return sim.run()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_backfill_never_makes_a_scheduled_occurrence_skip_and_yields_to_it(seed):
    out = backfilled(seed)
    try:
        (bf_id,) = out.backfills
        bf = out.store.get_backfill(bf_id)
        assert bf is not None and bf.state == "done" and len(bf.items) >= 8
        rows = [r for r in out.store.runs("every4") if r.trigger == "schedule"]
        during = [r for r in rows if bf.created_at <= r.fire_at <= bf.updated_at]
        # catchup: latest: of the occurrences waiting behind a backfill run only the newest
        # waits, and the older ones say which one took their place; none is skipped for
        # the backfill alone
        skipped = [r for r in during if r.state == "skipped_overlap" and "backfill" in (r.error or "")]
        assert during and all("fell due meanwhile and waits in its place (catchup: latest)" in r.error for r in skipped)
        results = check(out, ["schedule_first", "reason_truth", "one_terminal_state", "backfill_completes"])
        assert {name: bad[:1] for name, bad in results.items() if bad} == {}
    finally:
        out.close()


def test_a_daemon_that_skips_the_schedule_behind_a_backfill_is_caught(monkeypatch):
    monkeypatch.setattr(Starter, "going_runs", lambda self, job_id: [])  # the old rule: forbid skips
    out = backfilled(1)
    try:
        bad = check(out, ["schedule_first"])["schedule_first"]
        assert bad and "behind backfill run" in bad[0].what
    finally:
        out.close()


# --- a window's end (issue case 3) ----------------------------------------------------------

HELD = {
    "id": "held",
    "owner": "ops",
    "schedule": "*/10 * * * *",
    "command": "true",
    "idempotency_class": "idempotent",
    "overlap": "forbid",
    "blackout": "defer",
    "catchup": "all",
    "catchup_window_s": 3600,
    "tolerance_s": 0,
    "tolerance_reason": "exact times for the window's edges",
}
HOUR = {"name": "one-hour", "reason": "CHG-2: storage work", "timezone": "UTC",
        "from": "2025-06-02 01:00", "to": "2025-06-02 02:00", "jobs": ["held"]}  # fmt: skip


def windowed(seed: int):
    """A `blackout: defer`, `catchup: all` job every 10 minutes, held by a window that ends
    exactly as an occurrence falls due (02:00)."""
    cfg = Config(
        days=0.1,
        jobs=1,
        seed=seed,
        faults=frozenset(),
        job_docs=(HELD,),
        mean_s=20.0,
        blackouts=(HOUR,),
        start=datetime.fromisoformat("2025-06-02T00:30:00+00:00"),
    )
    sim = Simulation(cfg)
    sim.events = []
    return sim.run()


@pytest.mark.parametrize("seed", [1, 2])
def test_occurrences_a_window_held_run_in_scheduled_order_before_the_one_due_as_it_ends(seed):
    out = windowed(seed)
    try:
        procs = sorted((p for p in out.world.procs.values() if p.attempt == 1), key=lambda p: (p.started_mono, p.pid))
        end = datetime.fromisoformat("2025-06-02T02:00:00+00:00")
        after = [p.scheduled_at.strftime("%H:%M") for p in procs if p.started_wall >= end]
        assert after[:7] == ["01:00", "01:10", "01:20", "01:30", "01:40", "01:50", "02:00"]
        results = check(out, ["held_order", "reason_truth", "one_terminal_state", "blackout_honoured"])
        assert {name: bad[:1] for name, bad in results.items() if bad} == {}
    finally:
        out.close()


def test_a_daemon_whose_line_releases_newest_first_is_caught(monkeypatch):
    from chronod.core import policy
    from chronod.daemon import waits

    real = policy.catchup_turn

    def newest_first(spec, queue, running, now):
        turn = real(spec, queue, running, now)
        live = sorted((w for w in queue if w not in turn.expire), key=lambda w: w.fire_at)
        return policy.Turn(tuple(live[-1:]) if turn.start else (), turn.expire)  # the broken rule

    monkeypatch.setattr(policy, "catchup_turn", newest_first)
    # the rule is asked about the whole line, as it is under `allow` (not only the runs a
    # sound rule can pick: the expired ones and the oldest)
    monkeypatch.setattr(waits, "_turn_matters", lambda line, window_s, now: list(line))
    out = windowed(1)
    try:
        bad = check(out, ["held_order"])["held_order"]
        assert bad and "started after" in bad[0].what
    finally:
        out.close()


# --- a fleet's failover (issue case 1) ------------------------------------------------------

EVERY2 = tuple(
    {
        "id": f"every2-{i}",
        "owner": "ops",
        "schedule": "*/2 * * * * *",
        "command": "true",
        "run_on": "any",
        "idempotency_class": "idempotent",
        "overlap": "forbid",
        "catchup": "latest",
        "tolerance_s": 0,
        "tolerance_reason": "exact times",
    }
    for i in range(10)
)
CRASH_AT = 60.0


def failover(seed: int):
    """Two nodes, ten `run_on: any` jobs every 2 s; node2 is killed -9 for 20 s."""
    cfg = Config(days=0.003, nodes=2, seed=seed, faults=frozenset(), job_docs=EVERY2, mean_s=0.1, drain_s=60)
    sim = FleetSimulation(cfg)
    sim.events = [Event(sim.t0 + CRASH_AT, "crash", {"node": 1, "calls": 0, "downtime": 20.0})]
    return sim.run()


def rescued_lag(out) -> list[float]:
    """How late the occurrences that fell due while node2 was down started on node1."""
    down, back = out.t0 + CRASH_AT, out.t0 + CRASH_AT + 20
    return [
        round((p.started_wall - p.scheduled_at).total_seconds(), 1)
        for p in out.launches
        if p.attempt == 1 and down + 1 <= out.t0 + (p.scheduled_at - out.start).total_seconds() <= back
    ]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_failover_is_recorded_as_what_it_was_and_rescues_within_2s(seed):
    out = failover(seed)
    try:
        results = check_fleet(out)
        assert {name: bad[:1] for name, bad in results.items() if bad} == {}
        down, back = out.wall(out.t0 + CRASH_AT), out.wall(out.t0 + CRASH_AT + 20)
        rows = [r for r in out.store.runs() if down <= r.scheduled_at <= back]
        assert rows and {r.state for r in rows} <= {"succeeded", "skipped_overlap"}
        # the one skip left per job is at the hand-over (the owner's lease expires): the
        # occurrence rescued 2 s late starts as the next one falls due, and that one is
        # skipped behind it, naming it (reasons_true: it was running then)
        skipped = [r for r in rows if r.state == "skipped_overlap"]
        assert len({r.job_id for r in skipped}) == len(skipped)
        # the rescued run, started in the same wake-up or the one before
        assert all(
            "started in the same instant" in (r.error or "") or " still running; overlap: forbid" in (r.error or "")
            for r in skipped
        ), [r.error for r in skipped]
        lags = rescued_lag(out)
        assert lags and max(lags) <= 2.1, sorted(lags)[-5:]
    finally:
        out.close()


def test_a_fleet_that_puts_off_its_rescues_while_it_claims_its_own_runs_is_caught(monkeypatch):
    real = Dispatch.look_for_late

    def look_later(self, now, behind=False):
        # the broken rule: a node with occurrences of its own due before its next look (these
        # jobs fire every 2 s: always) counts as behind and puts its look for late ones off
        return real(self, now, True)

    monkeypatch.setattr(Dispatch, "look_for_late", look_later)
    out = failover(1)
    try:
        results = check_fleet(out, ["reasons_true", "rescue_prompt"])
        bad = results["reasons_true"]
        assert bad and "recorded skipped_outage" in bad[0].what and "was up and carried it" in bad[0].what
        assert results["rescue_prompt"]
    finally:
        out.close()


def test_a_slot_free_while_a_run_of_its_own_forbid_job_went_is_no_slot_for_it(monkeypatch: pytest.MonkeyPatch):
    """`skipped_resource` is true of an occurrence that waited behind its own job's runs
    (a catch-up line under `forbid`: one after another, each with its retry) while a slot
    was free, and then for a slot until its catch-up window ran out: while a run of its job
    went, the line held it, not the resource (seed 100 of a quarter day of 1,000 jobs:
    reason_truth called it false, "net had a free slot at 00:19:10")."""
    from chronod.sim import driver
    from tests.sim.job_docs import EXACT

    line = {
        **EXACT,
        "id": "j",
        "schedule": "* * * * *",
        "resource": "net",  # two slots
        "overlap": "forbid",
        "catchup": "all",
        "catchup_window_s": 600,
        "retry": {"attempts": 2, "backoff_s": 60, "max_backoff_s": 60},
    }
    hogs = [{**EXACT, "id": f"h{i}", "schedule": "0 5 0 * * *", "resource": "net"} for i in (1, 2)]  # 00:05-00:35

    def duration(plan):
        return lambda rng: (1800.0, 0) if plan.id.startswith("h") else (90.0, 1 if rng.random() < 0.5 else 0)

    monkeypatch.setattr(driver, "duration", duration)
    start = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
    cfg = Config(days=0.06, jobs=3, seed=1, faults=frozenset(), job_docs=(line, *hogs), start=start)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 30.0, "crash", {"calls": 0, "downtime": 240.0})]  # 00:00:30-00:04:30: a backlog
    out = sim.run()
    try:
        skipped = [r for r in out.store.runs("j") if r.state == "skipped_resource"]
        assert skipped, sorted((r.scheduled_at, r.state) for r in out.store.runs("j"))
        assert not {name: bad[0].what for name, bad in check(out, ["reason_truth"]).items() if bad}
    finally:
        out.close()
