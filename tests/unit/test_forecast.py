"""The herd forecast (chronod.core.forecast): fires per bucket before and after jitter, the
peaks, the chart's rows, and the maintenance windows' spans, asked in-process."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from chronod.core import occurrence
from chronod.core.blackout import Window
from chronod.core.forecast import JobFires, Peak, build_forecast, chart_rows, floor, forecast
from chronod.core.model import JobSpec
from chronod.core.schedule import compile_schedule

UTC = timezone.utc


def test_forecast_counts_scheduled_and_jittered_instants_in_their_buckets():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = start + timedelta(minutes=10)
    at = lambda m, s=0: start + timedelta(minutes=m, seconds=s)  # noqa: E731
    fc = build_forecast(
        [JobFires("a", [at(0), at(5)], 90), JobFires("b", [at(0), at(9, 30)], 0), JobFires("c", [at(-1)], 70)],
        start,
        end,
        bucket_s=60,
    )
    assert fc.before == {0: 2, 5: 1, 9: 1}
    # a: 00:00+90s -> bucket 1, 05:00+90s -> bucket 6; c: scheduled before the window, fires in bucket 0
    assert fc.after == {1: 1, 6: 1, 0: 2, 9: 1}
    assert fc.peaks("after", 1) == [Peak(start=at(0), count=2, by_job={"b": 1, "c": 1})]
    assert fc.peaks("after", 1)[0].jobs == ["b", "c"]
    assert fc.peaks("before", 1)[0].jobs == ["a", "b"]


def test_chart_rows_cover_the_window_with_the_busiest_bucket_of_each_row():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    fc = build_forecast(
        [JobFires("a", [start + timedelta(minutes=m) for m in (0, 0, 3)], 0)], start, start + timedelta(minutes=4), 60
    )
    assert chart_rows(fc, rows=2) == [(start, 2, 2), (start + timedelta(minutes=2), 1, 1)]


def job(job_id: str, schedule: str, **kw) -> JobSpec:
    return JobSpec(job_id, "ops", schedule, "true", "idempotent", **kw)


def test_a_forecast_counts_enabled_jobs_with_clock_times_and_the_fires_a_window_holds():
    specs = [
        job("tick", "*/10 * * * *", tolerance_s=300, tags=("db",)),
        job("off", "* * * * *", enabled=False),
        job("boot", "@reboot"),
    ]
    schedules = {s.id: compile_schedule(s.schedule) for s in specs if s.enabled}
    night = Window("night", "upgrade", "UTC", cron="0 1 * * *", duration_s=1800, tags=("db",))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    fc = forecast(specs, schedules, [night], start, start + timedelta(hours=2), 600, "n1")
    assert occurrence.jitter_offset("tick", 300) < 300  # so each fire stays in its own 10-minute bucket
    assert fc.jobs == 1  # off is disabled, boot has no clock times
    assert fc.before == fc.after == {i: 1 for i in range(12)}  # 00:00 .. 01:50, every 10 minutes
    assert (fc.fires_before, fc.fires_after) == (12, 12)
    [span] = fc.held
    assert (span.name, span.start, span.end, span.jobs) == (
        "night",
        start + timedelta(hours=1),
        start + timedelta(hours=1, minutes=30),
        ["tick"],
    )
    assert span.fires_held == 3 and span.by_job == {"tick": 3}  # 01:00, 01:10 and 01:20, each under 5 min late


def test_a_forecast_starts_on_a_bucket_boundary_when_not_told_where():
    assert floor(datetime(2026, 1, 1, 10, 7, 31, 500, tzinfo=UTC), 300) == datetime(2026, 1, 1, 10, 5, tzinfo=UTC)
