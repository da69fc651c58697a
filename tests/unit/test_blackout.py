"""Maintenance windows and pauses (chronod.core.blackout): one table of instants per kind of
window, the daylight-saving cases spelled out, then the file rules with their lines.

America/New_York transitions used below:
  2026-11-01 06:00Z  02:00 EDT -> 01:00 EST (fall back; 01:00-02:00 local happens twice)
  2027-03-14 07:00Z  02:00 EST -> 03:00 EDT (spring forward; 02:00-03:00 local never happens)
"""

from __future__ import annotations

import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core import blackout
from chronod.core.blackout import Pause, Window
from chronod.core.model import JobSpec
from chronod.core.validate import ERROR, WARNING, validate_document
from chronod.specfile import parse_text

NY = "America/New_York"
NOW = datetime(2026, 10, 1, tzinfo=timezone.utc)


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def spec(job_id: str = "backup", tags: tuple[str, ...] = (), resource: str | None = None, **kw) -> JobSpec:
    return JobSpec(job_id, "ops", "0 * * * *", "true", "idempotent", tags=tags, resource=resource, **kw)


def window(**kw) -> Window:
    kw.setdefault("name", "w")
    kw.setdefault("reason", "maintenance")
    kw.setdefault("jobs", ("backup",))
    return Window(**kw)


def absolute(start: str, end: str, zone: str = NY, **kw) -> Window:
    return window(
        start=blackout.wall_to_utc(datetime.fromisoformat(start), zone),
        end=blackout.wall_to_utc(datetime.fromisoformat(end), zone),
        timezone=zone,
        **kw,
    )


def recurring(cron: str, hours: float, zone: str = NY, **kw) -> Window:
    return window(cron=cron, duration_s=int(hours * 3600), timezone=zone, **kw)


# (window, instant, covering span or None)
CASES = [
    # a one-off window across the spring-forward: 01:00 EST .. 04:00 EDT is two hours of real time
    (absolute("2027-03-14 01:00", "2027-03-14 04:00"), "2027-03-14T05:59:59Z", None),
    (absolute("2027-03-14 01:00", "2027-03-14 04:00"), "2027-03-14T06:00:00Z", ("06:00", "08:00")),
    (absolute("2027-03-14 01:00", "2027-03-14 04:00"), "2027-03-14T07:59:59Z", ("06:00", "08:00")),
    (absolute("2027-03-14 01:00", "2027-03-14 04:00"), "2027-03-14T08:00:00Z", None),
    # a one-off window across the fall-back: 00:30 EDT .. 02:30 EST is three hours of real time
    (absolute("2026-11-01 00:30", "2026-11-01 02:30"), "2026-11-01T07:29:59Z", ("04:30", "07:30")),
    (absolute("2026-11-01 00:30", "2026-11-01 02:30"), "2026-11-01T07:30:00Z", None),
    # recurring, 01:00 local for 3 h of elapsed time: ends 03:00 EST on the fall-back day...
    (recurring("0 1 * * *", 3), "2026-11-01T04:59:59Z", None),
    (recurring("0 1 * * *", 3), "2026-11-01T05:00:00Z", ("05:00", "08:00")),
    (recurring("0 1 * * *", 3), "2026-11-01T07:59:59Z", ("05:00", "08:00")),
    (recurring("0 1 * * *", 3), "2026-11-01T08:00:00Z", None),
    # ...the repeated 01:00 EST does not open it again (cron's first pass only)
    (recurring("30 1 * * *", 0.5), "2026-11-01T06:45:00Z", None),
    # ...and 05:00 EDT on the spring-forward day (not 04:00: the window is 3 h long, not 3 wall hours)
    (recurring("0 1 * * *", 3), "2027-03-14T06:00:00Z", ("06:00", "09:00")),
    (recurring("0 1 * * *", 3), "2027-03-14T08:30:00Z", ("06:00", "09:00")),
    (recurring("0 1 * * *", 3), "2027-03-14T09:00:00Z", None),
    # a window whose opening time the spring-forward skips opens when the clock jumps (cron's rule)
    (recurring("30 2 * * *", 1), "2027-03-14T06:59:59Z", None),
    (recurring("30 2 * * *", 1), "2027-03-14T07:00:00Z", ("07:00", "08:00")),
    (recurring("30 2 * * *", 1), "2027-03-15T06:30:00Z", ("06:30", "07:30")),
    # weekly in UTC, the instant just before the end and the end itself
    (recurring("0 22 * * sat", 4, "UTC"), "2026-12-06T01:59:59Z", ("22:00", "02:00")),
    (recurring("0 22 * * sat", 4, "UTC"), "2026-12-06T02:00:00Z", None),
]


@pytest.mark.parametrize("w, at, span", CASES)
def test_a_window_covers_exactly_its_span(w, at, span):
    got = w.covering(z(at))
    assert (None if got is None else (got[0].strftime("%H:%M"), got[1].strftime("%H:%M"))) == span


@pytest.mark.parametrize(
    "wall, zone, utc",
    [
        ("2026-11-01 01:30", NY, "2026-11-01T05:30:00Z"),  # the repeated hour: its first pass (EDT)
        ("2027-03-14 02:30", NY, "2027-03-14T07:30:00Z"),  # the skipped hour: the offset before (EST)
        ("2026-12-05 22:00", "UTC", "2026-12-05T22:00:00Z"),
        ("2026-11-01 01:30-05:00", NY, "2026-11-01T06:30:00Z"),  # an explicit offset picks the second pass
    ],
)
def test_wall_times_of_one_off_windows_are_read_in_their_zone(wall, zone, utc):
    assert blackout.wall_to_utc(datetime.fromisoformat(wall), zone) == z(utc)


def test_a_window_applies_by_id_tag_or_resource_and_to_nothing_else():
    w = window(jobs=("a",), tags=("db",), resources=("pg",))
    assert [w.applies_to(spec(i, t, r)) for i, t, r in [("a", (), None), ("b", ("db",), None), ("c", (), "pg")]] == [
        True,
        True,
        True,
    ]
    assert not w.applies_to(spec("d", ("web",), "redis"))


def test_a_window_from_a_delegated_file_holds_only_that_files_jobs():
    w = window(only_file="/etc/chrono/jobs.d/alice.yaml")
    assert not w.applies_to(spec(source_file="/etc/chrono/jobs.d/root.yaml"))
    assert w.applies_to(spec(source_file="/etc/chrono/jobs.d/alice.yaml"))


def test_the_hit_names_the_window_and_follows_touching_windows_to_the_last_end():
    first = absolute("2026-12-05 22:00", "2026-12-06 00:00", "UTC", name="patch", reason="kernel update")
    second = absolute("2026-12-06 00:00", "2026-12-06 01:30", "UTC", name="reboot", reason="reboots")
    other = absolute("2026-12-06 01:30", "2026-12-06 05:00", "UTC", name="other", jobs=("x",))
    hit = blackout.blackout_at(spec(), [first, second, other], z("2026-12-05T23:00:00Z"))
    assert (hit.window.name, hit.end) == ("patch", z("2026-12-06T01:30:00Z"))
    assert hit.describe() == "inside maintenance window patch (kernel update) until 2026-12-06T01:30:00Z"
    assert blackout.blackout_at(spec(), [first, second], z("2026-12-06T01:30:00Z")) is None


def test_spans_lists_each_opening_inside_the_range_in_order():
    w = recurring("0 1 * * *", 3)
    got = blackout.spans(spec(), [w], z("2026-10-31T00:00:00Z"), z("2026-11-02T00:00:00Z"))
    assert [(a.isoformat(), b.isoformat()) for _, a, b in got] == [
        ("2026-10-31T05:00:00+00:00", "2026-10-31T08:00:00+00:00"),
        ("2026-11-01T05:00:00+00:00", "2026-11-01T08:00:00+00:00"),  # 01:00 EDT .. 03:00 EST
    ]


def test_a_pause_holds_until_its_end_and_a_jobs_own_pause_comes_first():
    tag = Pause("tag", "db", "INC-7", "alice", z("2026-12-01T00:00:00Z"), z("2026-12-01T02:00:00Z"))
    own = Pause("job", "backup", "disk swap", "bob", z("2026-12-01T00:00:00Z"), None)
    s = spec(tags=("db",))
    assert blackout.paused(s, [tag, own], z("2026-12-01T01:00:00Z")) is own
    assert blackout.paused(s, [tag], z("2026-12-01T01:59:59Z")) is tag
    assert blackout.paused(s, [tag], z("2026-12-01T02:00:00Z")) is None
    assert tag.describe() == "paused (tag db) by alice: INC-7 until 2026-12-01T02:00:00Z"
    assert own.describe() == "job paused: disk swap (by bob)"


@pytest.mark.parametrize(
    "catchup, run, skip",
    [("latest", [3], [1, 2]), ("all", [1, 2, 3], []), ("none", [], [1, 2, 3])],
)
def test_held_occurrences_are_released_by_the_catchup_policy(catchup, run, skip):
    held = [z(f"2026-12-06T0{h}:00:00Z") for h in (2, 3, 1)]
    go, skipped = blackout.release(catchup, held)
    assert ([t.hour for t in go], [t.hour for t in skipped]) == (run, skip)


# --- the file ------------------------------------------------------------------------------

JOB = """\
jobs:
  - id: backup
    owner: ops
    schedule: "30 1 * * *"
    command: "true"
    idempotency_class: idempotent
    blackout: defer
"""


def check(blackouts: str):
    text = "blackouts:\n" + textwrap.indent(textwrap.dedent(blackouts), "  ") + JOB
    return validate_document(parse_text(text, "jobs.yaml"), now=NOW)


def problems(result, severity=ERROR) -> list[tuple[int, str, str]]:
    return [(p.line, p.path, p.message) for p in result.problems if p.severity == severity]


def test_a_good_file_yields_its_windows_and_the_jobs_policy():
    res = check(
        """\
        - name: db-upgrade
          reason: "CHG-42: database upgrade"
          timezone: America/New_York
          from: 2027-03-14 01:00
          to: "2027-03-14 04:00"
          tags: [db]
        - reason: weekly patching
          cron: "0 1 * * sun"
          duration: 3h
          jobs: [backup]
        """
    )
    assert problems(res) == [] and res.jobs[0].blackout == "defer"
    one, two = res.blackouts
    assert (one.name, one.start, one.end) == ("db-upgrade", z("2027-03-14T06:00:00Z"), z("2027-03-14T08:00:00Z"))
    assert (two.name, two.cron, two.duration_s, two.source_line) == ("jobs.yaml:8", "0 1 * * sun", 10800, 8)


@pytest.mark.parametrize(
    "text, line, path, words",
    [
        ("- {reason: r, cron: '0 1 * * *', duration: 1h}\n", 2, "blackouts[0]", "applies to nothing"),
        ("- {reason: r, jobs: [a]}\n", 2, "blackouts[0]", "either from/to or cron/duration"),
        ("- {reason: r, jobs: [a], from: 2027-01-02 00:00, to: 2027-01-01 00:00}\n", 2, "blackouts[0].to", "not after"),
        ("- {reason: r, jobs: [a], from: tomorrow, to: 2027-01-01 00:00}\n", 2, "blackouts[0].from", "not a date"),
        ("- {reason: r, jobs: [a], cron: '0 1 * * *'}\n", 2, "blackouts[0]", "duration is missing"),
        ("- {reason: r, jobs: [a], cron: '0 25 * * *', duration: 1h}\n", 2, "blackouts[0].cron", "hour"),
        ("- {reason: r, jobs: [a], cron: '@every 1h', duration: 1h}\n", 2, "blackouts[0].cron", "set times"),
        ("- {reason: r, jobs: [a], cron: '0 1 * * *', duration: soon}\n", 2, "blackouts[0].duration", ""),
        ("- {reason: r, jobs: [a], cron: '0 1 * * *', duration: 40d}\n", 2, "blackouts[0].duration", "31d"),
        ("- {jobs: [a], cron: '0 1 * * *', duration: 1h}\n", 2, "blackouts[0]", "reason is required"),
        ("- {reason: r, jobs: [a], cron: '0 1 * * *', durtion: 1h}\n", 2, "blackouts[0].durtion", "unknown key"),
        (
            "- {reason: r, jobs: [a], timezone: Mars/Base, cron: '0 1 * * *', duration: 1h}\n",
            2,
            "blackouts[0].timezone",
            "",
        ),
        (
            "- {name: w, reason: r, jobs: [a], cron: '0 1 * * *', duration: 1h}\n"
            "- {name: w, reason: r, jobs: [a], cron: '0 2 * * *', duration: 1h}\n",
            3,
            "blackouts[1].name",
            "already",
        ),
    ],
)
def test_a_bad_window_is_an_error_at_its_line(text, line, path, words):
    found = [p for p in problems(check(text)) if p[1] == path]
    assert found, problems(check(text))
    assert found[0][0] == line and words in found[0][2]


def test_a_window_open_longer_than_its_gap_is_a_warning():
    res = check("- {reason: r, jobs: [backup], cron: '0 * * * *', duration: 2h}\n")
    assert [p[1] for p in problems(res, WARNING)] == ["blackouts[0].duration"]


def test_a_bad_window_does_not_take_the_good_jobs_down():
    res = check("- {reason: r, jobs: [a], cron: '0 1 * * *'}\n")
    assert [j.id for j in res.jobs] == ["backup"] and res.blackouts == ()


def test_windows_spanning_a_dst_change_last_their_elapsed_duration():
    w = recurring("0 0 * * *", 6)
    for day in ("2026-11-01", "2027-03-14"):
        start, end = w.covering(z(f"{day}T06:00:00Z"))
        assert end - start == timedelta(hours=6)


def test_the_example_in_the_maintenance_docs_validates():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "maintenance.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    res = validate_document(parse_text(example, "storage.yaml"), now=NOW)
    assert [p.format() for p in res.problems if p.severity == ERROR] == []
    assert [w.name for w in res.blackouts] == ["storage-migration", "sunday-patching"]
    assert [w.source_line for w in res.blackouts] == [2, 8]  # the lines the page's examples quote


def test_explain_and_forecast_walk_only_the_spans_they_show_of_a_window_open_every_second(monkeypatch):
    from chronod.core import explain, forecast
    from tests.unit.test_history import CountingSchedule

    counting = CountingSchedule("* * * * * *")
    monkeypatch.setattr(blackout, "compile_schedule", lambda expr, tz: counting)
    every_second = window(cron="* * * * * *", duration_s=1)
    job = spec()
    start, end = NOW, NOW + timedelta(days=7)
    [shown] = explain.windows_shown(job, (every_second,), start, end)
    assert len(shown.spans) == explain.WINDOW_SPANS
    assert counting.produced <= explain.WINDOW_SPANS + 1  # the first may close before start
    counting.produced = 0
    fires = [start + timedelta(seconds=s) for s in range(7 * 86400)]  # a job every second
    held = forecast.held_spans([job], [every_second], [forecast.JobFires("backup", fires, 0)], start, end)
    assert len(held) == forecast.MAX_SPANS
    assert [h.fires_held for h in held] == [1] * forecast.MAX_SPANS
    assert held[-1].more is True and held[0].more is False
    assert counting.produced <= forecast.MAX_SPANS + 2


def test_a_delegated_files_window_that_names_a_job_it_cannot_hold_is_a_warning_at_its_line():
    from chronod.specfile import FileResult, RegistryResult, _merge_windows

    mine = spec("userjob", source_file="jobs.d/alice.yaml")
    w = window(jobs=("userjob", "rootjob"), source_file="jobs.d/alice.yaml", source_line=3)
    fres = FileResult("jobs.d/alice.yaml", specs=(mine,), blackouts=(w,), delegated="alice")
    _merge_windows(RegistryResult(), fres)
    [p] = fres.problems
    assert (p.severity, p.line) == (WARNING, 3)
    assert "rootjob" in p.message and "alice" in p.message and "userjob" not in p.message
    root = FileResult("jobs.d/root.yaml", specs=(spec("rootjob", source_file="jobs.d/root.yaml"),), blackouts=(w,))
    _merge_windows(RegistryResult(), root)
    assert root.problems == []
