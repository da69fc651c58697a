"""Properties of the evaluator over random expressions, zones and start instants.

The oracle here is a brute-force scan: every UTC minute (and every second the expression
allows) is converted to local wall time and matched field by field, then the DST rules are
applied to that one instant. The evaluator must produce exactly those instants, plus only
the instants just after a spring-forward jump (where a fixed-time job's skipped matches fire).
"""

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chronod.core.schedule import compile_schedule, parse_fields, wall_matches

UTC = timezone.utc
ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
    "Asia/Kolkata",
    "Europe/Dublin",
]
BOUNDS = {"second": (0, 59), "minute": (0, 59), "hour": (0, 23), "dom": (1, 31), "month": (1, 12), "dow": (0, 7)}
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _transitions(zone_name, first_year, last_year):
    zone, out = ZoneInfo(zone_name), []
    t = datetime(first_year, 1, 1, tzinfo=UTC)
    off = t.astimezone(zone).utcoffset()
    while t.year <= last_year:
        t += timedelta(minutes=15)
        o = t.astimezone(zone).utcoffset()
        if o != off:
            out.append(t)
            off = o
    return out


TRANSITIONS = {z: _transitions(z, 2025, 2027) for z in ZONES if z not in ("UTC", "Asia/Kolkata")}


@st.composite
def items(draw, field, allow_n_slash=True):
    lo, hi = BOUNDS[field]
    if field == "dom":
        hi = 28  # keep random expressions away from "never fires" (tested elsewhere)
    a = draw(st.integers(lo, hi))
    b = draw(st.integers(a, hi))
    step = draw(st.integers(1, max(1, (hi - lo) // 2)))
    kinds = ["*", "n", "range", "star_step", "range_step"] + (["n_step"] if allow_n_slash else [])
    kind = draw(st.sampled_from(kinds))
    return {
        "*": "*",
        "n": f"{a}",
        "range": f"{a}-{b}",
        "star_step": f"*/{step}",
        "range_step": f"{a}-{b}/{step}",
        "n_step": f"{a}/{step}",
    }[kind]


@st.composite
def fields(draw, field, allow_n_slash=True):
    parts = draw(st.lists(items(field, allow_n_slash), min_size=1, max_size=3))
    return ",".join(parts)


@st.composite
def expressions(draw, six=None, allow_n_slash=True):
    six = draw(st.booleans()) if six is None else six
    names = (["second"] if six else []) + ["minute", "hour", "dom", "month", "dow"]
    # most real schedules leave month and the day fields open; bias towards that
    out = []
    for name in names:
        if name in ("month", "dom", "dow") and draw(st.integers(0, 2)) > 0:
            out.append("*")
        else:
            out.append(draw(fields(name, allow_n_slash)))
    return " ".join(out)


@st.composite
def starts(draw, zone, window):
    """Half the time just before a clock change of the zone, so the window spans it."""
    if zone in TRANSITIONS and draw(st.booleans()):
        t = draw(st.sampled_from(TRANSITIONS[zone]))
        return t - timedelta(seconds=draw(st.integers(0, int(window.total_seconds()))))
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(st.integers(0, 365 * 86400)))


def _window(expr):
    return timedelta(minutes=30) if parse_fields(expr).has_seconds else timedelta(hours=40)


def _expected_by_scan(expr, zone_name, start, end):
    """Every instant in (start, end] a Vixie cron in `zone_name` fires at, except the
    catch-up fires at transition instants."""
    f = parse_fields(expr)
    zone = ZoneInfo(zone_name)
    out = []
    minute = start.replace(second=0, microsecond=0)
    while minute <= end:
        for s in f.seconds:
            u = minute + timedelta(seconds=s)
            if not start < u <= end:
                continue
            local = u.astimezone(zone)
            wall = local.replace(tzinfo=None)
            if not wall_matches(f, wall):
                continue
            first_pass = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
            if first_pass != u:  # u is the second pass of a repeated wall time
                shift = u - first_pass
                if f.is_fixed_time or shift >= timedelta(hours=3):
                    continue
            out.append(u)
        minute += timedelta(minutes=1)
    return out


def _is_transition(zone_name, u):
    zone = ZoneInfo(zone_name)
    return (u - timedelta(seconds=1)).astimezone(zone).utcoffset() != u.astimezone(zone).utcoffset()


def _gap_matches(expr, zone_name, jump):
    """The wall times a spring-forward jump at `jump` (UTC) skipped that `expr` matches."""
    f = parse_fields(expr)
    zone = ZoneInfo(zone_name)
    before = (jump - timedelta(seconds=1)).astimezone(zone)
    skipped = jump.astimezone(zone).utcoffset() - before.utcoffset()
    if skipped <= timedelta(0) or skipped >= timedelta(hours=3):
        return []
    wall = before.replace(tzinfo=None) + timedelta(seconds=1)
    out = []
    for k in range(int(skipped.total_seconds())):
        w = wall + timedelta(seconds=k)
        if (f.has_seconds or w.second == 0) and wall_matches(f, w):
            out.append(w)
    return out


def _shifted_gap_fires_only(expr, zone_name, extra):
    """Fires that match no instant may only be a spring-forward gap's skipped matches, fired
    from the jump on, one a second (as Debian cron runs each skipped minute after the jump):
    each lies within as many seconds after a jump as that gap plus the jump's own matches
    hold, and a jump gets no more of them than the gap skipped."""
    by_jump = {}
    for u in extra:
        t = u.replace(microsecond=0)
        while not _is_transition(zone_name, t):
            t -= timedelta(seconds=1)
            if u - t > timedelta(hours=3):
                return False
        by_jump.setdefault(t, []).append(u)
    for jump, fires in by_jump.items():
        skipped = len(_gap_matches(expr, zone_name, jump))
        if len(fires) > skipped or max(fires) - jump > timedelta(seconds=2 * skipped + 60):
            return False
    return True


@st.composite
def cases(draw):
    zone = draw(st.sampled_from(ZONES))
    expr = draw(expressions())
    return expr, zone, draw(starts(zone, _window(expr)))


@SETTINGS
@given(cases())
# 60 skipped matches (02:00:00-02:00:59) after the hour's own 60 (03:00:xx): fired 03:01:00-03:01:59
@example(("* 0 0,* * * *", "America/New_York", datetime(2025, 3, 9, 7, 0, tzinfo=timezone.utc)))
def test_fires_are_exactly_the_matching_instants_plus_the_skipped_gap_matches(case):
    expr, zone, start = case
    end = start + _window(expr)
    got = compile_schedule(expr, zone).fires(start, end)
    assert all(a < b for a, b in zip(got, got[1:])), "fires must strictly increase"
    expected = _expected_by_scan(expr, zone, start, end)
    expected_set = set(expected)
    assert expected_set <= set(got), f"skipped matching instants: {sorted(expected_set - set(got))[:5]}"
    extra = [u for u in got if u not in expected_set]
    assert _shifted_gap_fires_only(expr, zone, extra), f"fires that match nothing: {extra[:5]}"
    assert not extra or compile_schedule(expr, zone).is_fixed_time


@SETTINGS
@given(cases())
def test_prev_at_or_before_walks_back_over_the_same_fires(case):
    expr, zone, start = case
    s = compile_schedule(expr, zone)
    got = s.fires(start, start + timedelta(days=3), limit=4)
    for earlier, later in zip(got, got[1:]):
        assert s.prev_at_or_before(later) == later
        assert s.prev_at_or_before(later - timedelta(microseconds=1)) == earlier


def _croniter_compatible(expr):
    """croniter treats a '*/N' day field as restricted (Vixie does not) and '1-31' as
    unrestricted, and reads a one-value range such as '6-6' as '*'; compare only where
    the two agree by construction."""
    if re.search(r"\b(\d+)-\1\b", expr):
        return False
    dom, dow = expr.split()[2], expr.split()[4]
    if dom == "*" or dow == "*":
        return True
    f = parse_fields(expr)
    return not (dom.startswith("*") or dow.startswith("*")) and len(f.doms) < 31 and len(f.dows) < 7


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(six=False, allow_n_slash=False), st.integers(0, 4 * 365 * 86400))
def test_in_utc_five_field_expressions_agree_with_croniter(expr, offset_s):
    if not _croniter_compatible(expr):
        return
    start = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=offset_s)
    ours = compile_schedule(expr).fires(start, start + timedelta(days=400), limit=5)
    it = croniter(expr, start)
    theirs = []
    for _ in ours:
        theirs.append(it.get_next(datetime))
    assert ours == theirs
