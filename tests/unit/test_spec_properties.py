"""Validation and the engine agree: whatever `validate` accepts, the engine can plan for the
next 100 years (chronod.core.bounds.PLAN_S) without raising.

Hypothesis writes job files across (and beyond) the accepted space: cron expressions of 5
and 6 fields with lists, ranges, steps and names, @every with durations up to far past the
calendar, every zone, extreme numbers in every numeric field. For each job the validator
accepts, the test computes what the daemon computes: the jitter offset, the next occurrence
from instants spread over the next 100 years, the previous one, the fire times of a window,
the DST events of a year, the catch-up decision and every retry delay. CI runs a bounded
number of examples; CHRONO_HYPOTHESIS_EXAMPLES runs many more.
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronod.core import bounds, occurrence, policy
from chronod.core.schedule import compile_schedule
from chronod.core.validate import validate_document
from chronod.specfile import parse_text

UTC = timezone.utc
EXAMPLES = int(os.environ.get("CHRONO_HYPOTHESIS_EXAMPLES", "200"))
NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


@lru_cache(maxsize=1)
def _zones() -> list[str]:
    from zoneinfo import available_timezones

    return sorted(available_timezones())


def _field(lo: int, hi: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    value = st.integers(lo, hi).map(str)
    if names:
        value = st.one_of(value, st.sampled_from(names))
    rng = st.tuples(st.integers(lo, hi), st.integers(lo, hi)).map(lambda p: f"{min(p)}-{max(p)}")
    step = st.tuples(st.sampled_from(["*", f"{lo}", f"{lo}-{hi}"]), st.integers(1, hi + 1)).map(
        lambda p: f"{p[0]}/{p[1]}"
    )
    one = st.one_of(st.just("*"), value, rng, step)
    return st.lists(one, min_size=1, max_size=3).map(",".join)


MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
cron5 = st.tuples(_field(0, 59), _field(0, 23), _field(1, 31), _field(1, 12, MONTHS), _field(0, 7, DAYS)).map(" ".join)
cron6 = st.tuples(_field(0, 59), cron5).map(" ".join)
every_n = st.one_of(
    st.integers(0, 400),
    st.integers(0, 10**14),
    st.integers(0, 10**25),
    st.sampled_from([bounds.MAX_EVERY_S, bounds.MAX_EVERY_S + 1]),
)
every = st.builds(lambda n, u: f"@every {n}{u}", every_n, st.sampled_from(["s", "m", "h", "d", "w"]))
schedules = st.one_of(
    cron5,
    cron6,
    every,
    st.sampled_from(
        [
            "@hourly",
            "@daily",
            "@weekly",
            "@monthly",
            "@yearly",
            "@reboot",
            "0 0 29 2 *",
            "0 0 29 2 1",
            "30 2 * * *",
            "0 0 31 * *",
            "59 23 31 12 *",
        ]
    ),
)
big = st.one_of(
    st.integers(-10, 10**20),
    st.sampled_from([0, 1, 86400, bounds.MAX_RUN_S, bounds.MAX_RUN_S + 1, bounds.MAX_EVERY_S, bounds.MAX_EVERY_S + 1]),
)


@st.composite
def job_files(draw) -> tuple[str, dict]:
    job: dict = {
        "id": "j",
        "owner": "team",
        "schedule": draw(schedules),
        "command": "true",
        "idempotency_class": draw(st.sampled_from(["idempotent", "unsafe", "nope"])),
    }
    if draw(st.booleans()):
        job["timezone"] = draw(st.sampled_from(_zones()))
    for name in ("tolerance_s", "catchup_window_s", "timeout_s", "kill_grace_s", "max_silence_s", "output_limit_kb"):
        if draw(st.booleans()):
            job[name] = draw(big)
    if "tolerance_s" in job and draw(st.booleans()):
        job["tolerance_reason"] = "exact"
    if draw(st.booleans()):
        job["dst_gap"] = draw(st.sampled_from(["shift", "skip"]))
    if draw(st.booleans()):
        job["dst_repeat"] = draw(st.sampled_from(["first", "last", "both"]))
    if draw(st.booleans()):
        job["catchup"] = draw(st.sampled_from(["none", "latest", "all"]))
    if draw(st.booleans()):
        job["retry"] = {
            "attempts": draw(st.one_of(st.integers(0, 101), big)),
            "backoff_s": draw(big),
            "max_backoff_s": draw(big),
        }
    if draw(st.booleans()):
        job["run_on"] = "each"
    return json.dumps({"jobs": [job]}), job


def _plan(spec) -> None:
    """What the daemon and chronoctl compute with an accepted job, for the next 100 years."""
    sched = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
    key = occurrence.job_key(spec.id, spec.run_on.each, "node1")
    offset = occurrence.jitter_offset(key, spec.tolerance_s)
    sched.describe()
    sched.min_gap_s()
    gap = sched.max_gap_s()
    if sched.kind == "reboot":
        assert sched.next_after(NOW) is None
        return
    steps = 24
    for k in range(steps + 1):
        t = NOW + timedelta(seconds=bounds.PLAN_S * k // steps)
        nxt = sched.next_after(t - timedelta(seconds=offset))
        assert nxt is not None and nxt > t - timedelta(seconds=offset), (spec.schedule, spec.timezone, t)
        if gap is not None and sched.kind == "every":
            assert nxt - (t - timedelta(seconds=offset)) <= timedelta(seconds=gap)
        occurrence.run_id(key, nxt)
        fire = nxt + timedelta(seconds=offset)
        sched.prev_at_or_before(fire)
        sched.fires(t, t + timedelta(days=2), limit=50)
        due = [policy.Due(nxt, fire)]
        policy.catchup(spec, due, fire + timedelta(seconds=spec.catchup_window_s + 1))
        policy.catchup(spec, due, fire)
    sched.dst_events(NOW, NOW + timedelta(days=366))
    sched.dst_events(NOW + timedelta(seconds=bounds.PLAN_S - 366 * 86400), NOW + timedelta(seconds=bounds.PLAN_S))
    rng = random.Random(0)
    for attempt in range(1, spec.retry.attempts + 1):
        policy.retry_delay_s(spec, attempt, rng)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(job_files())
def test_whatever_validate_accepts_can_be_planned_for_a_century(case):
    text, _ = case
    result = validate_document(parse_text(text, "jobs.yaml"), now=NOW)
    for spec in result.jobs:
        _plan(spec)


def test_the_generator_reaches_accepted_and_refused_jobs():
    seen = {"ok": 0, "refused": 0}

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(job_files())
    def count(case):
        result = validate_document(parse_text(case[0], "jobs.yaml"), now=NOW)
        seen["ok" if result.jobs else "refused"] += 1

    count()
    assert seen["ok"] > 0 and seen["refused"] > 0, seen
