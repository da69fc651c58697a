"""A job's catch-up line is drained at every wake-up and after every ending. It answers as
the rules say over the whole line (`newest_waiting`, then `catchup_turn`), but once no
scheduled occurrence in it replaces another it does not look at the line again until runs
join it or the job's definition changes: a line that only waits costs nothing per drain."""

from __future__ import annotations

import random
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any

from chronod.core.model import JobSpec, Trigger
from chronod.daemon.runs import Job
from chronod.daemon.waits import Lines
from chronod.store.api import Run

T0 = datetime(2025, 6, 2, tzinfo=UTC)


def _job(name: str, catchup: str, overlap: str = "forbid", window: int = 600) -> Job:
    spec = JobSpec(
        name, "ops", "* * * * *", "true", "idempotent", overlap=overlap, catchup=catchup, catchup_window_s=window
    )
    return Job.on(spec, "n1")


def _run(job: Job, k: int, trigger: Trigger = Trigger.SCHEDULE) -> Run:
    at = T0 + timedelta(seconds=60 * k)
    return Run(f"{job.spec.id}-{trigger}-{k}", job.spec.id, job.key, at, at, trigger=trigger)


def _ids(turn: tuple[list[Run], list[Run], list[tuple[Run, Run]]]) -> tuple[Any, ...]:
    start, expired, replaced = turn
    return [r.run_id for r in start], [r.run_id for r in expired], [(a.run_id, b.run_id) for a, b in replaced]


def test_a_drain_answers_as_a_line_that_remembers_nothing() -> None:
    """Two lines fed the same runs, drains and redefinitions: one forgets after every drain
    that no occurrence in it replaces another (the answer before it was kept); the other is
    not asked at all while it says it waits for a run that is going."""
    rng = random.Random(7)
    names = ["a", "b", "c"]
    specs = {n: _job(n, rng.choice(["latest", "all", "none"]), rng.choice(["forbid", "allow"])) for n in names}
    kept, fresh = Lines(), Lines()
    k = 0
    answers = skipped = 0
    now = T0
    for step in range(4000):
        name = rng.choice(names)
        job = specs[name]
        op = rng.random()
        if op < 0.3:
            k += 1
            trigger = Trigger.SCHEDULE if rng.random() < 0.8 else Trigger.MANUAL
            run = _run(job, k, trigger)
            kept.queue(job, [run])
            fresh.queue(job, [Run(**{f: getattr(run, f) for f in run.__dataclass_fields__})])
        elif op < 0.93:
            now = max(now, T0 + timedelta(seconds=60 * k - rng.randrange(0, 900)))
            going = rng.choice([0, 1, 1, 2])
            want = _ids(fresh.catchup_turn(job, name, going, now))
            fresh._unreplaced.clear()
            if going and kept.waits_while_going(job, name, now):
                got = ([], [], [])  # the admission drains no further
                skipped += 1
            else:
                got = _ids(kept.catchup_turn(job, name, going, now))
            assert got == want, step
            answers += bool(want[0] or want[1] or want[2])
        elif op < 0.97:  # a reload: the same job, another catch-up policy
            specs[name] = job = _job(name, rng.choice(["latest", "all", "none"]), rng.choice(["forbid", "allow"]))
        else:
            kept.forget(name)
            fresh.forget(name)
        assert [r.run_id for r in kept._queued.get(name, ())] == [r.run_id for r in fresh._queued.get(name, ())]
        # the ids `held` keeps as the lines change are those queued
        assert set(kept.held()) == {r.run_id for n in names for r in kept._queued.get(n, ())}, step
    assert answers > 300  # the lines moved often, not only waited
    assert skipped > 100  # and often only waited


class _Counted(deque[Run]):
    """A line that counts how often it is walked."""

    walks = 0

    def __iter__(self) -> Any:
        _Counted.walks += 1
        return super().__iter__()


def test_a_line_that_only_waits_is_not_walked_at_each_drain() -> None:
    job = _job("j", "latest")
    lines = Lines()
    lines.queue(job, [_run(job, 1)] + [_run(job, k, Trigger.MANUAL) for k in range(2, 300)])
    lines._queued["j"] = _Counted(lines._queued["j"])
    now = T0 + timedelta(seconds=120)
    assert _ids(lines.catchup_turn(job, "j", 1, now)) == ([], [], [])  # a run is going: the line waits
    _Counted.walks = 0
    for _ in range(100):
        assert _ids(lines.catchup_turn(job, "j", 1, now)) == ([], [], [])
    assert _Counted.walks == 0
    newer = _run(job, 400)
    lines.queue(job, [newer])  # a newer scheduled occurrence joins: it replaces the older one
    assert _ids(lines.catchup_turn(job, "j", 1, now)) == ([], [], [("j-schedule-1", "j-schedule-400")])


def test_under_forbid_the_rule_is_asked_only_about_the_runs_it_can_decide() -> None:
    """`_turn_matters` hands the rule the expired runs and the first live one, not the whole
    line: for random lines of mixed triggers (a backfilled run's fire time is when it
    started, so fire order is not scheduled order), at random moments around the window's
    edge, the rule answers the same about them as about the whole line. The walk stops
    early (the line is in scheduled order, and no run fires before its scheduled time), and
    so does the search for the line's first fire time."""
    from chronod.core import policy
    from chronod.daemon.waits import _first_fire, _turn_matters

    rng = random.Random(11)
    for overlap in ("forbid", "replace"):
        job = _job("j", "all", overlap, window=600)
        for _ in range(2000):
            line = []
            for k in range(rng.randint(1, 12)):
                r = _run(job, rng.randint(0, 30), rng.choice([Trigger.SCHEDULE, Trigger.BACKFILL]))
                r.run_id = f"{r.run_id}-{k}"
                r.fire_at = r.scheduled_at + timedelta(seconds=rng.choice([0, 0, 1, rng.randint(0, 1800)]))
                line.append(r)
            line.sort(key=lambda r: (r.scheduled_at, r.run_id))  # as `Lines.queue` keeps it
            now = T0 + timedelta(seconds=rng.randint(0, 3000))
            going = rng.choice([0, 0, 1])

            def turn(runs: list[Run], spec: JobSpec = job.spec, going: int = going, now: datetime = now) -> policy.Turn:
                return policy.catchup_turn(spec, [policy.waiting(r.run_id, r.fire_at, spec) for r in runs], going, now)

            whole, asked = turn(line), turn(_turn_matters(line, 600, now))
            assert [w.run_id for w in asked.start] == [w.run_id for w in whole.start]
            assert sorted(w.run_id for w in asked.expire) == sorted(w.run_id for w in whole.expire)
            assert _first_fire(line) == min(r.fire_at for r in line)
