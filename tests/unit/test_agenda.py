"""The agenda (`chronoctl next` without a job) and what holds an occurrence (chronod.core)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from chronod.core import agenda, blackout
from chronod.core.blackout import Pause, Window
from chronod.core.model import JobSpec
from chronod.core.occurrence import jitter_offset
from chronod.core.schedule import compile_schedule

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)


def spec(job_id: str, schedule: str, tags: tuple[str, ...] = (), tolerance_s: int = 0, **kw) -> JobSpec:
    return JobSpec(
        id=job_id,
        owner=kw.pop("owner", "ops"),
        schedule=schedule,
        command="true",
        idempotency_class="idempotent",
        tags=tags,
        tolerance_s=tolerance_s,
        **kw,
    )


def plan(specs, start=T0, hours=1.0, **kw):
    schedules = {s.id: compile_schedule(s.schedule, s.timezone) for s in specs}
    return agenda.agenda(specs, schedules, start, start + timedelta(hours=hours), **kw)


def test_the_agenda_lists_each_fire_in_fire_order_with_its_jitter():
    jittered = spec("export", "0 * * * *", tolerance_s=300)
    offset = jitter_offset("export", 300)
    a = plan([spec("tick", "*/20 * * * *"), jittered], start=T0 - timedelta(minutes=1))
    assert [(e.job_id, e.fire_at) for e in a.entries] == sorted(
        [
            ("tick", T0),
            ("export", T0 + timedelta(seconds=offset)),
            ("tick", T0 + timedelta(minutes=20)),
            ("tick", T0 + timedelta(minutes=40)),
        ],
        key=lambda x: x[1],
    )
    assert all(e.hold is None for e in a.entries) and a.held == 0


def test_a_paused_tag_and_a_window_mark_their_occurrences_held_and_keep_them_listed():
    batch = spec("batch.load", "*/30 * * * *", tags=("batch",))
    nightly = spec("nightly", "45 12 * * *")
    pause = Pause("tag", "batch", "INC-7: replica lag", by="alice", since=T0, until=T0 + timedelta(minutes=40))
    window = Window(
        "mw90", "switch upgrade", start=T0 + timedelta(minutes=40), end=T0 + timedelta(hours=2), jobs=("nightly",)
    )
    a = plan([batch, nightly], pauses=[pause], windows=[window])
    held = {(e.job_id, e.fire_at.minute): e.hold for e in a.entries}
    assert held[("batch.load", 30)] == blackout.Hold("pause", "tag batch", "INC-7: replica lag", pause.until, "alice")
    assert held[("nightly", 45)] == blackout.Hold("window", "mw90", "switch upgrade", window.end)
    assert [e.fire_at.minute for e in a.entries] == [0, 30, 45] and a.held == 3  # [start, end)


def test_the_pause_judged_is_the_one_at_the_fire_time_not_now():
    batch = spec("batch.load", "*/30 * * * *", tags=("batch",))
    pause = Pause("tag", "batch", "short", since=T0 - timedelta(hours=1), until=T0 + timedelta(minutes=31))
    a = plan([batch], start=T0 + timedelta(seconds=1), pauses=[pause])
    assert [e.hold is not None for e in a.entries] == [True, False]  # 12:30 held, 13:00 runs


def test_tag_and_owner_select_and_disabled_and_reboot_jobs_are_left_out():
    jobs = [
        spec("a", "*/30 * * * *", tags=("web",)),
        spec("b", "*/30 * * * *", owner="dba"),
        spec("c", "*/30 * * * *", enabled=False),
        spec("d", "@reboot"),
    ]
    assert [s.id for s in jobs if agenda.selected(s, tag="web")] == ["a"]
    assert [s.id for s in jobs if agenda.selected(s, owner="dba")] == ["b"]
    assert {e.job_id for e in plan(jobs).entries} == {"a", "b"}


def test_a_long_agenda_is_cut_and_says_so():
    a = plan([spec("fast", "@every 1s")], hours=1, limit=100)
    assert len(a.entries) == 100 and a.cut
