"""The truth invariants (chronod.sim.invariants.silence_truth, audit_truth): each holds over
a scenario made to ask it, and each catches a notifier or an audit broken on purpose."""

from __future__ import annotations

from datetime import datetime

import pytest

from chronod.sim.driver import Simulation
from chronod.sim.invariants import check
from chronod.sim.scenario import Config
from chronod.sim.world import Event

START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")


def _job(job_id: str, schedule: str, **fields) -> dict:
    return {
        "id": job_id,
        "owner": "ops",
        "schedule": schedule,
        "command": "true",
        "idempotency_class": "idempotent",
        "tolerance_s": 0,
        "tolerance_reason": "exact times",
        **fields,
    }


WINDOW = {"name": "swap", "reason": "CHG-2: disk swap", "cron": "0 1 * * *", "duration": "1h", "jobs": ["beat"]}


def _silence_run(names=("silence_truth",)):
    """A job every minute a 1 h window holds (max_silence_s 150), one every 2 minutes whose
    successes come max_silence_s apart give or take its runs' lengths (inside its
    tolerance_s of 30), and chronod down 10 minutes at 03:00."""
    jobs = (
        _job("beat", "* * * * *", max_silence_s=150),
        _job("even", "*/2 * * * *", max_silence_s=120, tolerance_s=30, tolerance_reason="a little late is fine"),
    )
    cfg = Config(
        days=0.25, jobs=2, seed=3, faults=frozenset(), job_docs=jobs, mean_s=1.0, blackouts=(WINDOW,), start=START
    )
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 3 * 3600, "crash", {"calls": 0, "downtime": 600.0})]
    out = sim.run()
    try:
        return check(out, names)["silence_truth"]
    finally:
        out.close()


def test_silence_truth_holds_through_a_window_a_tolerance_and_a_restart():
    assert _silence_run() == []


def test_a_window_that_came_and_went_while_chronod_was_down_restarts_the_silence_clock(
    monkeypatch: pytest.MonkeyPatch,
):
    """Seed 109 of two days of 300 jobs, in small: a job that never succeeds (max_silence_s
    90 minutes), a window 01:10-01:30 over it, and chronod down 01:05-01:35. The window
    held the job: its silence clock counts afresh from the restart, so no notice at 02:00
    (the notifier of the new process never saw the window and called it silent then)."""
    from chronod.sim import driver

    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (1.0, 1))
    jobs = (_job("quiet", "*/10 * * * *", max_silence_s=5400),)
    window = {**WINDOW, "cron": "10 1 * * *", "duration": "20m", "jobs": ["quiet"]}
    cfg = Config(days=0.15, jobs=1, seed=1, faults=frozenset(), job_docs=jobs, blackouts=(window,), start=START)
    sim = Simulation(cfg)
    sim.events = [Event(sim.t0 + 3900, "crash", {"calls": 0, "downtime": 1800.0})]
    out = sim.run()
    try:
        downs = [d for d in out.world.disturbances if d.kind == "down"]
        assert len(downs) == 1 and downs[0].start_wall.strftime("%H:%M") == "01:05", downs
        assert check(out, ["silence_truth"])["silence_truth"] == []
    finally:
        out.close()


def test_silence_truth_replays_the_successes_a_backfill_ran_again():
    """A backfill of `--only all` opens runs that ended again (docs/backfill.md): their rows
    then show the rerun's end, 40 minutes of successes later than the notifier saw them.
    The notifier never went silent; a replay over the final rows alone would say it did
    (once a real gap, chronod down, makes the check replay the job at all)."""
    jobs = (_job("tick", "*/5 * * * *", max_silence_s=900),)
    cfg = Config(days=0.1, jobs=1, seed=4, faults=frozenset(), job_docs=jobs, mean_s=1.0, start=START)
    sim = Simulation(cfg)
    rerun = {"job": "tick", "since_s": 3600, "until_s": 60, "only": "all"}
    # chronod down 20 minutes first: a real gap, so that the notifier's rounds are replayed
    down = Event(sim.t0 + 1800, "crash", {"calls": 0, "downtime": 1200.0})
    sim.events = [down, Event(sim.t0 + 2 * 3600, "backfill", rerun)]
    out = sim.run()
    try:
        reopened = [r for r in out.store.runs("tick") if r.attempts > 1 and r.trigger == "backfill"]
        assert len(reopened) == 8  # the oldest eight of the hour, 40 minutes of them
        assert check(out, ["silence_truth"])["silence_truth"] == []
    finally:
        out.close()


def _ignore_holds(monkeypatch):
    from chronod.notify import core

    real = core.check_silence
    monkeypatch.setattr(core, "check_silence", lambda spec, state, now, **kw: real(spec, state, now))


def _ignore_tolerance(monkeypatch):
    from chronod.core import history

    monkeypatch.setattr(history, "silence_limit_s", lambda spec: float(spec.max_silence_s or 0))


def _count_downtime(monkeypatch):
    from chronod.notify import core

    monkeypatch.setattr(core, "excuse_downtime", lambda spec, state, down_s, now: state)


@pytest.mark.parametrize(
    "breaking, caught",
    [
        (_ignore_holds, "while window swap held the job"),
        (_ignore_tolerance, "tolerance_s 30"),
        (_count_downtime, "chronod down"),
    ],
)
def test_a_notifier_that_pages_inside_a_hold_a_tolerance_or_a_restart_is_caught(monkeypatch, breaking, caught):
    breaking(monkeypatch)
    found = _silence_run()
    assert found and any(caught in c.what for c in found), found


def _resource_run():
    """Two jobs share resource db (1 slot); runs take minutes, so occurrences wait in its line."""
    jobs = (
        _job("load", "*/5 * * * *", resource="db", catchup_window_s=3600, overlap="allow"),
        _job("dump", "*/7 * * * *", resource="db", catchup_window_s=3600, overlap="allow"),
    )
    cfg = Config(days=0.2, jobs=2, seed=5, faults=frozenset(), job_docs=jobs, mean_s=240.0, start=START)
    out = Simulation(cfg).run()
    try:
        return check(out, ["audit_truth"])["audit_truth"], len(out.probes)
    finally:
        out.close()


def test_audit_truth_holds_while_occurrences_wait_for_a_resource():
    found, probes = _resource_run()
    assert probes, "the audit was never asked about a waiting occurrence"
    assert found == []


def test_an_audit_that_calls_a_resource_wait_late_is_caught(monkeypatch):
    from chronod.core import history

    real = history.hold_of

    def forgets_resources(run, spec, pauses, now):
        hold = real(run, spec, pauses, now)
        return None if hold is not None and hold.kind == "resource" else hold

    monkeypatch.setattr(history, "hold_of", forgets_resources)
    found, _ = _resource_run()
    assert found and all("every slot of resource db taken" in c.what for c in found), found


def test_a_file_broken_after_it_loaded_keeps_its_resources_limits_with_its_jobs():
    """A file with errors keeps its last good jobs; it kept its resources too only by luck:
    without them a kept job's resource fell back to one slot (audit_truth saw a run of
    `net`, two slots, waiting beside one run)."""
    from chronod.sim.world import Life

    cfg = Config(days=0.01, jobs=1, seed=1, faults=frozenset(), job_docs=(_job("load", "* * * * *", resource="net"),))
    sim = Simulation(cfg)
    life = Life("sim-a", sim.world.mono())
    sim.world.lives.append(life)
    d = sim.daemon(life)
    try:
        d.start()
        assert d.registry.limit("net") == 2
        (name,) = sim.registry.files
        sim.registry.write(name, bad=True)
        d.registry.reload()
        assert "load" in d.registry.jobs and d.registry.limit("net") == 2
    finally:
        sim.store.close()


def _edit_run():
    """An hourly job at :30 whose schedule is edited to :45 at 00:10, while its 00:30
    occurrence is stored and pending: the edit withdraws it before it falls due."""
    cfg = Config(days=0.2, jobs=1, seed=2, faults=frozenset(), job_docs=(_job("hourly", "30 * * * *"),), start=START)
    sim = Simulation(cfg)

    def edit() -> str:
        (name,) = sim.registry.files
        plan = sim.registry.files[name][0]
        plan.doc = {**plan.doc, "schedule": "45 * * * *"}
        sim.registry.write(name)
        return "changed hourly to '45 * * * *'"

    sim.registry.edit = edit  # type: ignore[method-assign]
    sim.events = [Event(sim.t0 + 600, "registry", {})]
    out = sim.run()
    try:
        withdrawn = [r for r in out.store.runs("hourly") if r.state == "cancelled" and r.started_at is None]
        return check(out, ["audit_truth"])["audit_truth"], withdrawn
    finally:
        out.close()


def test_audit_truth_holds_when_an_edit_withdraws_a_pending_occurrence():
    found, withdrawn = _edit_run()
    assert withdrawn, "the edit withdrew nothing: the scenario asks nothing"
    assert found == []


def test_a_missed_that_lists_an_occurrence_an_edit_withdrew_is_caught(monkeypatch):
    from chronod.core import history

    monkeypatch.setattr(history, "withdrawn", lambda run: False)
    found, _ = _edit_run()
    assert found and "withdrew it" in found[0].what, found


def _stepped_restart(monkeypatch=None):
    """The replay of seed 3 of a day of 100 jobs, in small: a job every 30 s (max_silence_s
    65, tolerance_s 5) succeeding every 30 s; chronod crashes 25 s after a round, stays down
    1,000 s, and the clock steps back 99 s while it is down; a run ends 48 s after the crash,
    stamped by the stepped clock (26 s before that round), and the first success after the
    restart comes 60 s after it."""
    import random

    from chronod.core.clock import FakeClock
    from chronod.core.model import JobSpec
    from chronod.notify import core
    from chronod.sim.invariants import _silences
    from chronod.sim.world import World
    from chronod.store.api import Run

    spec = JobSpec(
        id="fast",
        owner="ops",
        schedule="*/30 * * * * *",
        command="true",
        idempotency_class="idempotent",
        max_silence_s=65,
        tolerance_s=5,
    )
    w = World(FakeClock(START, mono=1000.0), random.Random(1))
    w.advance_to(1000.0 + 3650)
    w.step_wall(-99.0)
    w.advance_to(1000.0 + 4925)

    def ok(name: str, mono: float) -> tuple[float, Run]:
        at = w.wall_at(mono)
        return mono, Run(name, "fast", "fast", at, at, "succeeded", 1, started_at=at, finished_at=at, exit_code=0)

    rows = [ok(f"a{i}", 1000.0 + 30 * i) for i in range(121)]  # the last at the round 3,600 s in
    rows.append(ok("in-the-down", 1000.0 + 3673))  # stamped 26 s before that round
    rows += [ok(f"b{i}", 1000.0 + 4685 + 30 * i) for i in range(8)]
    lives = [(1000.0, 1000.0 + 3625), (1000.0 + 4625, 1000.0 + 4925)]
    return [(w.wall_at(m), what) for m, what in _silences(w, core, spec, START, w.wall_at(w.mono()), rows, [], lives)]


def test_a_clock_step_back_while_chronod_was_down_is_not_silence():
    """By the wall clock chronod was down 901 s, by the monotonic clock 1,000 s: the success
    stamped 26 s before the last round ended while chronod was down, and the silence clock
    counts from the restart (no notice: 60 s up before the next success)."""
    assert _stepped_restart() == []


def test_a_down_measured_by_the_wall_clock_alone_calls_the_silence(monkeypatch):
    from chronod.notify import core

    real = core.downtime_s
    monkeypatch.setattr(core, "downtime_s", lambda alive, now, mono, boot=None: real(alive, now, mono, None))
    said = _stepped_restart()
    assert said and "no success for 70s" in said[0][1], said


def test_did_it_run_asked_the_instant_the_run_ahead_ends_is_behind_its_line_not_the_resource(
    monkeypatch: pytest.MonkeyPatch,
):
    """`did-it-run` is asked (00:08:00.001) in the very instant the run of the job ahead of
    the occurrence ends, before chronod has seen it end: the occurrence waits behind its
    own job's run, as the resource's slot that run held counts as taken (seed 41 of a
    quarter day of 1,000 jobs: audit_truth counted the ended run as holding the resource
    but not as going for its job, and called the answer wrong)."""
    from chronod.sim import driver
    from tests.sim.job_docs import DEFER_LINE, EXACT

    line = {**DEFER_LINE, "resource": "net", "catchup_window_s": 3600}
    hog = {**EXACT, "id": "hog", "schedule": "30 0 0 * * *", "resource": "net"}  # one slot of two, past the end
    # the window holds line's 00:01-00:03, and the line it releases at 00:04 runs one a minute, 60 s each
    window = {"name": "swap", "reason": "CHG-7: disk swap", "cron": "1 0 * * *", "duration": "3m", "jobs": ["line"]}
    monkeypatch.setattr(driver, "duration", lambda plan: lambda rng: (3600.0 if plan.id == "hog" else 60.0, 0))
    monkeypatch.setattr(driver, "PROBE_EVERY_S", 480.0)
    cfg = Config(days=0.02, jobs=2, seed=1, faults=frozenset(), job_docs=(line, hog), blackouts=(window,), start=START)
    out = Simulation(cfg).run()
    try:
        first = out.probes[0]
        assert first.fire_at == START.replace(minute=5) and not first.earlier_pending, first
        assert first.going == first.limit and first.job_going, first
        assert not {name: bad[0].what for name, bad in check(out, ["audit_truth"]).items() if bad}
    finally:
        out.close()
