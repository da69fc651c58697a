"""The DST policy (dst_gap, dst_repeat) over random expressions, zones and start instants.

The oracle is the brute-force scan of test_schedule_properties, with the policy applied
to each matching instant: a first pass fires under `first` and `both`, a second pass
under `last` and `both` (a fall-back of 3 hours or more is a correction: first pass
only); wildcard jobs fire in both passes whatever the policy. Under `dst_gap: skip` (and
for wildcard jobs) the fires are exactly the matching instants; under `shift`, a
fixed-time job adds only transition instants.
"""

from datetime import timedelta
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronod.core.schedule import compile_schedule, parse_fields, wall_matches
from tests.unit.test_schedule_properties import UTC, _shifted_gap_fires_only, _window, cases

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
policies = st.tuples(st.sampled_from(["shift", "skip"]), st.sampled_from(["first", "last", "both"]))


def _fires_in_this_pass(fixed: bool, repeat: str, u, first_pass, second_pass) -> bool:
    if first_pass == second_pass:
        return True  # not a repeated wall time
    if second_pass - first_pass >= timedelta(hours=3):
        return u == first_pass
    passes = {"first": (first_pass,), "last": (second_pass,), "both": (first_pass, second_pass)}
    return u in passes[repeat if fixed else "both"]


def _expected_by_scan(expr, zone_name, start, end, repeat):
    f = parse_fields(expr)
    zone = ZoneInfo(zone_name)
    out = []
    minute = start.replace(second=0, microsecond=0)
    while minute <= end:
        for s in f.seconds:
            u = minute + timedelta(seconds=s)
            if not start < u <= end:
                continue
            wall = u.astimezone(zone).replace(tzinfo=None)
            if not wall_matches(f, wall):
                continue
            first_pass = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
            second_pass = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            if _fires_in_this_pass(f.is_fixed_time, repeat, u, first_pass, second_pass):
                out.append(u)
        minute += timedelta(minutes=1)
    return out


@SETTINGS
@given(cases(), policies)
def test_fires_are_the_matching_instants_the_policy_keeps(case, policy):
    expr, zone, start = case
    gap, repeat = policy
    end = start + _window(expr)
    s = compile_schedule(expr, zone, gap, repeat)
    got = s.fires(start, end)
    assert all(a < b for a, b in zip(got, got[1:])), "fires must strictly increase"
    expected = set(_expected_by_scan(expr, zone, start, end, repeat))
    assert expected <= set(got), f"missing: {sorted(expected - set(got))[:5]}"
    extra = [u for u in got if u not in expected]
    if gap == "skip" or not s.is_fixed_time:
        assert extra == [], f"fires that match nothing: {extra[:5]}"
    else:  # shift: a gap's skipped matches fire from the jump on, one a second, as Debian cron
        assert _shifted_gap_fires_only(expr, zone, extra), f"fires that match nothing: {extra[:5]}"


@SETTINGS
@given(cases(), policies)
def test_prev_at_or_before_walks_back_over_the_same_fires_under_any_policy(case, policy):
    expr, zone, start = case
    s = compile_schedule(expr, zone, *policy)
    got = s.fires(start, start + timedelta(days=3), limit=4)
    for earlier, later in zip(got, got[1:]):
        assert s.prev_at_or_before(later) == later
        assert s.prev_at_or_before(later - timedelta(microseconds=1)) == earlier


@SETTINGS
@given(cases())
def test_both_is_first_and_last_together_and_the_defaults_are_crons(case):
    expr, zone, start = case
    end = start + _window(expr)
    first = compile_schedule(expr, zone, "shift", "first").fires(start, end)
    last = compile_schedule(expr, zone, "shift", "last").fires(start, end)
    both = compile_schedule(expr, zone, "shift", "both").fires(start, end)
    assert both == sorted(set(first) | set(last))
    assert compile_schedule(expr, zone).fires(start, end) == first
