"""A schedule explained (chronod.core.explain): the typed answer behind `chronoctl explain`,
asked in-process as a web console or the simulation would.

America/New_York transitions used below:
  2026-11-01 06:00Z  02:00 EDT -> 01:00 EST (fall back)
  2027-03-14 07:00Z  02:00 EST -> 03:00 EDT (spring forward; 02:00-03:00 local never happens)
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from chronod.core import explain, occurrence
from chronod.core.blackout import Window
from chronod.core.model import JobSpec, RunOn
from chronod.core.schedule import compile_schedule

NY = "America/New_York"
UTC = timezone.utc


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def job(job_id: str = "late", schedule: str = "30 2 * * *", **kw) -> JobSpec:
    return JobSpec(job_id, "ops", schedule, "true", "idempotent", **kw)


def of(spec: JobSpec, node: str = "n1", nodes: tuple[str, ...] = (), windows: tuple[Window, ...] = ()):
    sched = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
    return explain.job_target(spec, sched, node, nodes, windows)


def test_a_fixed_time_job_names_its_policy_and_the_one_dst_date_that_changes_it():
    ex = explain.explanation(of(job(timezone=NY, dst_gap="skip")), z("2026-06-01T00:00:00Z"))
    assert ex.schedule_class == "fixed-time"
    assert (ex.dst_policy.dst_gap, ex.dst_policy.dst_repeat, ex.dst_policy.as_cron) == ("skip", "first", False)
    assert "does not run that day" in ex.class_meaning
    # 02:30 is never repeated by the fall-back (01:00-02:00 is), only skipped by the spring-forward
    [event] = ex.dst_events
    assert (event.date, event.transition_at, event.change) == (
        "2027-03-14",
        z("2027-03-14T07:00:00Z"),
        "spring-forward",
    )


def test_the_run_id_example_is_the_first_fire_hashed_from_its_key_and_utc_time():
    spec = job(schedule="0 * * * *", tolerance_s=600)
    ex = explain.explanation(of(spec), z("2026-06-01T00:30:00Z"))  # past 00:00 and its jitter (< 10 min)
    first = ex.next[0].occurrence
    assert first.fire_at == first.scheduled_at + timedelta(seconds=occurrence.jitter_offset("late", 600))
    assert ex.run_id_example.input == f"late|{occurrence.utc_stamp(first.scheduled_at)}"
    assert ex.run_id_example.run_id == first.run_id == occurrence.run_id("late", first.scheduled_at)
    assert [f.occurrence.scheduled_at for f in ex.next] == [z(f"2026-06-01T0{h}:00:00Z") for h in range(1, 6)]


def test_a_fire_inside_a_window_is_held_by_it_and_the_window_lists_its_next_spans():
    sunday = Window("sunday-patching", "weekly patching", NY, cron="0 1 * * sun", duration_s=3 * 3600, tags=("db",))
    spec = job("backup", "30 1 * * *", timezone=NY, tags=("db",), blackout="defer")
    ex = explain.explanation(of(spec, windows=(sunday,)), z("2027-03-12T00:00:00Z"), count=3)
    held = {f.occurrence.fire_at: f.window for f in ex.next}
    assert held[z("2027-03-13T06:30:00Z")] is None  # Saturday 01:30 EST
    # Sunday 01:30 EST: the window opened at 01:00 EST lasts 3 h of real time, to 05:00 EDT
    hit = held[z("2027-03-14T06:30:00Z")]
    assert (hit.window.name, hit.end) == ("sunday-patching", z("2027-03-14T09:00:00Z"))
    [shown] = ex.windows
    assert shown.spans[0] == (z("2027-03-14T06:00:00Z"), z("2027-03-14T09:00:00Z"))
    assert len(shown.spans) == explain.WINDOW_SPANS


def test_a_job_on_each_node_is_shown_on_the_node_asked_and_placed_on_every_node_known():
    spec = job("sweep", "*/20 * * * *", run_on=RunOn("each"), tolerance_s=300)
    ex = explain.explanation(of(spec, "n2", ("n3", "n1", "n2")), z("2026-06-01T00:10:00Z"))  # past 00:00 + 5 min
    assert (ex.target.key, ex.target.place.node) == ("sweep@n2", "n2")
    assert [(n.place.node, n.place.offset_s) for n in ex.nodes] == [
        (n, occurrence.jitter_offset(f"sweep@{n}", 300)) for n in ("n1", "n2", "n3")
    ]
    assert all(n.next[0].run_id == occurrence.run_id(n.place.key, z("2026-06-01T00:20:00Z")) for n in ex.nodes)


def test_a_bare_expression_has_no_jitter_no_job_and_no_windows():
    sched = compile_schedule("@every 90s")
    ex = explain.explanation(explain.expression_target("@every 90s", "UTC", sched), z("2026-06-01T00:00:00Z"))
    assert (ex.job, ex.target.offset_s, ex.schedule_class, ex.dst_policy, ex.windows) == (None, 0, "interval", None, ())
    assert all(f.window is None for f in ex.next)
