"""A resource line gives its free slots as `policy.resource_admission` says over the whole
line, but asks the rule only about the runs it can decide: the first `limit - used` runs
in line (by fire time), and when a run waited past its deadline those past it too."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from chronod.core import policy
from chronod.core.model import JobSpec
from chronod.daemon import waits
from chronod.daemon.runs import Job
from chronod.daemon.waits import Lines, slot_since
from chronod.store.api import Run

T0 = datetime(2025, 6, 2, tzinfo=UTC)


def _job(i: int, resource: str) -> Job:
    window = (60, 600, 3600)[i % 3]
    spec = JobSpec(f"j{i}", "ops", "* * * * *", "true", "idempotent", resource=resource, catchup_window_s=window)
    return Job.on(spec, "n1")


def _whole_line(lines: Lines, resource: str, limit: int, used: int, now: datetime) -> tuple[list[str], list[str]]:
    """What the rule says over every run in the line (the answer before the shortcut)."""
    line = lines.waiting(resource)
    turn = policy.resource_admission(
        limit, used, [policy.waiting(r.run_id, r.fire_at, j.spec, slot_since(r)) for j, r in line], now
    )
    return [w.run_id for w in turn.start], [w.run_id for w in turn.expire]


def test_a_slot_turn_answers_what_the_rule_says_over_the_whole_line() -> None:
    rng = random.Random(5)
    jobs = [_job(i, ("db", "net")[i % 2]) for i in range(12)]
    lines = Lines()
    now = T0
    moved = 0
    for step in range(3000):
        job = rng.choice(jobs)
        op = rng.random()
        if op < 0.55:
            fire = now + timedelta(seconds=rng.randrange(-600, 60))
            lines.wait_for_slot(job, Run(f"r{step}", job.spec.id, job.key, fire, fire))
        elif op < 0.95:
            now += timedelta(seconds=rng.randrange(0, 90))
            resource = rng.choice(["db", "net"])
            limit, used = (1, 2)[resource == "net"], rng.randrange(0, 3)
            before = [r.run_id for _, r in lines.waiting(resource)]
            want = _whole_line(lines, resource, limit, used, now)
            got = lines.slot_turn(resource, limit, used, now)
            if got is None:
                assert not before, step
                continue
            start, expired = ([r.run_id for _, r in runs] for runs in got)
            assert (start, expired) == want, step
            left = [r.run_id for _, r in lines.waiting(resource)]
            assert left == [i for i in before if i not in set(start) | set(expired)], step  # order kept
            moved += len(start)
            lines.tidy(resource)
        else:
            lines.forget(job.spec.id)
        # the ids `held` keeps as lines change are those in every line
        assert set(lines.held()) == {r.run_id for res in lines.resources() for _, r in lines.waiting(res)}, step
    assert moved > 100  # the shortcut was taken many times


def test_a_free_slot_asks_the_rule_about_the_first_runs_in_line_only(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = Lines()
    job = _job(2, "db")  # catchup_window_s 3600: none of these waited past it
    for k in range(500):
        fire = T0 + timedelta(seconds=k)
        lines.wait_for_slot(job, Run(f"r{k:03d}", job.spec.id, job.key, fire, fire))
    asked: list[str] = []
    real = waits.policy.waiting
    monkeypatch.setattr(waits.policy, "waiting", lambda run_id, *a: asked.append(run_id) or real(run_id, *a))
    now = T0 + timedelta(seconds=600)
    for k in range(50):
        got = lines.slot_turn("db", 1, 0, now)
        assert got is not None and [r.run_id for _, r in got[0]] == [f"r{k:03d}"]
    assert len(asked) == 50  # one run each time, not the 500 to 450 waiting


def test_a_run_put_back_in_front_is_still_the_one_its_catch_up_line_waits_for() -> None:
    """A fleet's group was full in the store when the line's head got its slot: back in
    front of the resource's line (`back_in_front`), the catch-up line still waits for it
    (`ahead_of_line`), or the next occurrence would join it and both start."""
    lines = Lines()
    job = _job(2, "db")
    older, newer = (
        Run(f"r{k}", job.spec.id, job.key, T0 + timedelta(minutes=k), T0 + timedelta(minutes=k)) for k in (0, 1)
    )
    lines.queue(job, [newer])
    lines.wait_for_slot(job, older, from_line=True)
    assert lines.ahead_of_line(job) == [older]
    got = lines.slot_turn("db", 1, 0, T0 + timedelta(minutes=2))
    assert got is not None and got[0] == [(job, older)]
    lines.back_in_front(job, older, T0 + timedelta(minutes=2))
    lines.tidy("db")
    assert lines.ahead_of_line(job) == [older]
    got = lines.slot_turn("db", 1, 0, T0 + timedelta(minutes=3))  # the group had room this time
    assert got is not None and got[0] == [(job, older)]
    lines.tidy("db")
    assert lines.ahead_of_line(job) == [] and not lines._from_line
