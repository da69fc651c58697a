"""`chronoctl missed` reports the jobs that are silent now (the dead man's switch), through
the installed binary, against a history written with the store API relative to the real
clock: a purge whose only successes are a month old, next to jobs that must not count
(a healthy one, a paused one, one registered a moment ago)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

from chronod.core.model import JobSpec
from chronod.core.occurrence import run_id
from chronod.store.api import Run
from chronod.store.sql import SqlStore
from tests.integration.daemon_helpers import chronoctl

DAY = 86400


def _spec(id: str, owner: str, schedule: str, max_silence_s: int) -> JobSpec:
    return JobSpec(
        id=id,
        owner=owner,
        schedule=schedule,
        command="true",
        idempotency_class="idempotent",
        max_silence_s=max_silence_s,
    )


PURGE = _spec("gdpr-purge", "privacy", "0 3 * * *", 2 * DAY)
HOURLY = _spec("billing-export", "finance", "0 * * * *", 3 * 3600)
PAUSED = _spec("cleanup", "platform", "30 2 * * *", 2 * DAY)
FRESH = _spec("new-report", "finance", "0 5 * * *", 2 * DAY)
NEVER = _spec("warehouse-load", "data", "0 4 * * *", 2 * DAY)


def _won(spec: JobSpec, at: datetime) -> Run:
    return Run(
        run_id=run_id(spec.id, at),
        job_id=spec.id,
        job_key=spec.id,
        scheduled_at=at,
        fire_at=at,
        state="succeeded",
        attempts=1,
        node="web1",
        trigger="schedule",
        started_at=at + timedelta(seconds=1),
        finished_at=at + timedelta(seconds=31),
        exit_code=0,
        output_bytes=0,
    )


def _store(url: str, clock=None) -> SqlStore:
    store = SqlStore(url, now=clock)
    store.upgrade()
    return store


def _fill(url: str, now: datetime) -> datetime:
    """The history; returns when the purge last succeeded (finished)."""
    day0 = now.replace(hour=3, minute=0, second=0, microsecond=0)
    hour0 = now.replace(minute=0, second=0, microsecond=0)
    store = _store(url)
    try:
        store.sync_jobs("web1", [PURGE, HOURLY, PAUSED, FRESH])
        store.set_paused(PAUSED.id, True, "INC-9: bucket migration")
        store.insert_runs(
            [
                _won(PURGE, day0 - timedelta(days=35)),
                _won(PURGE, day0 - timedelta(days=34)),
                *(_won(HOURLY, hour0 - timedelta(hours=h)) for h in range(3)),
                _won(PAUSED, day0 - timedelta(days=30)),
            ]
        )
    finally:
        store.close()
    return day0 - timedelta(days=34, seconds=-31)


def _missed(db: str, *args: str) -> tuple[int, dict]:
    res = chronoctl("missed", *args, "--json", db=db)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def test_missed_reports_a_job_whose_only_successes_are_old_as_silent_and_exits_1(tmp_path):
    db = str(tmp_path / "chrono.db")
    last = _fill(db, datetime.now(timezone.utc))
    before = datetime.now(timezone.utc)
    rc, data = _missed(db, "--since", "24h")
    after = datetime.now(timezone.utc)
    assert rc == 1
    assert data["count"] == 0 and data["silent_count"] == 1
    [group] = data["owners"]
    assert group["owner"] == "privacy" and group["missed"] == []
    [q] = group["silent"]
    assert q["job_id"] == "gdpr-purge" and q["owner"] == "privacy"
    assert datetime.fromisoformat(q["last_success_at"]) == last
    assert q["max_silence_s"] == 2 * DAY
    assert datetime.fromisoformat(q["silent_since"]) == last + timedelta(days=2)
    assert (before - last).total_seconds() - 1 <= q["silence_s"] <= (after - last).total_seconds() + 1


def test_status_and_missed_agree_on_which_jobs_are_silent(tmp_path):
    db = str(tmp_path / "chrono.db")
    _fill(db, datetime.now(timezone.utc))
    res = chronoctl("status", "--json", db=db)
    assert res.returncode == 3, res.stderr  # no chronod runs on this database: the health check says so
    status = json.loads(res.stdout)["silent"]
    _, data = _missed(db)
    missed = [q for g in data["owners"] for q in g["silent"]]
    same = ("job_id", "owner", "last_success_at", "max_silence_s", "silent_since")
    assert [{k: q[k] for k in same} for q in status] == [{k: q[k] for k in same} for q in missed]
    assert [q["job_id"] for q in status] == ["gdpr-purge"]


def test_missed_text_names_the_owner_the_silent_job_and_its_last_success(tmp_path):
    db = str(tmp_path / "chrono.db")
    _fill(db, datetime.now(timezone.utc))
    res = chronoctl("missed", db=db, env={"NO_COLOR": "1"})
    assert res.returncode == 1, res.stderr
    assert "privacy: 1 silent" in res.stdout
    line = next(x for x in res.stdout.splitlines() if x.startswith("gdpr-purge"))
    assert re.search(r"\b\d\d-\d\d \d\d:\d\d:\d\d\b", line) and "2d" in line  # its last success, and how long since
    for quiet in ("billing-export", "cleanup", "new-report"):
        assert quiet not in res.stdout


def test_a_job_that_never_succeeded_is_silent_from_its_registration_and_shows_never(tmp_path):
    db = str(tmp_path / "chrono.db")
    registered = datetime.now(timezone.utc) - timedelta(days=5)
    store = _store(db, clock=lambda: registered)
    try:
        store.sync_jobs("web1", [NEVER])
    finally:
        store.close()
    rc, data = _missed(db, "--since", "1h")
    assert rc == 1
    [q] = [q for g in data["owners"] for q in g["silent"]]
    assert q["job_id"] == "warehouse-load" and q["last_success_at"] is None
    assert datetime.fromisoformat(q["silent_since"]) == registered + timedelta(days=2)
    res = chronoctl("missed", "--since", "1h", db=db, env={"NO_COLOR": "1"})
    # in the hour after its 04:00 UTC fire the job is also listed as missed: find its silent row
    rows = [x for x in res.stdout.splitlines() if x.startswith("warehouse-load")]
    assert any("never" in x and "5d" in x for x in rows), res.stdout


def test_missed_exits_0_when_nothing_was_missed_and_no_job_is_silent(tmp_path):
    db = str(tmp_path / "chrono.db")
    store = _store(db)
    try:
        store.sync_jobs("web1", [HOURLY])
        hour0 = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
        store.insert_runs([_won(HOURLY, hour0 - timedelta(hours=h)) for h in range(2)])
    finally:
        store.close()
    rc, data = _missed(db)
    assert rc == 0 and data["silent_count"] == 0 and data["owners"] == []


def test_status_of_one_job_calls_it_silent_exactly_when_missed_lists_it(tmp_path):
    db = str(tmp_path / "chrono.db")
    _fill(db, datetime.now(timezone.utc))
    _, data = _missed(db)
    listed = {q["job_id"] for g in data["owners"] for q in g["silent"]}
    for spec in (PURGE, HOURLY, PAUSED, FRESH):
        res = chronoctl("status", spec.id, "--json", db=db)
        assert res.returncode == 3, res.stderr  # no chronod: the health check says so
        assert json.loads(res.stdout)["silent"] is (spec.id in listed), spec.id
    assert listed == {"gdpr-purge"}


def _waiting(spec: JobSpec, at: datetime, **kw) -> Run:
    return Run(
        run_id=run_id(spec.id, at),
        job_id=spec.id,
        job_key=spec.id,
        scheduled_at=at,
        fire_at=at,
        state="pending",
        attempts=0,
        node=None,
        trigger="schedule",
        output_bytes=0,
        **kw,
    )


def test_missed_names_the_window_or_the_pause_that_holds_a_due_occurrence(tmp_path):
    """An occurrence a window deferred, and one of a job paused by its tag, are each listed
    with their own state and what holds them, not as late."""
    db = str(tmp_path / "chrono.db")
    now = datetime.now(timezone.utc).replace(microsecond=0)
    hour = now - timedelta(minutes=20)  # rows are judged as they are: the time need not be the schedule's
    end = now + timedelta(hours=2)
    tagged = JobSpec(
        id="reindex", owner="search", schedule="0 * * * *", command="true", idempotency_class="idempotent", tags=("db",)
    )
    store = _store(db)
    try:
        store.sync_jobs("web1", [HOURLY, tagged])
        store.set_group_pause("tag", "db", "INC-4 replica lag", by="alice", until=end)
        why = f"deferred by maintenance window swap-disks (CHG-7 disk swap) until {end:%Y-%m-%dT%H:%M:%SZ}"
        store.insert_runs([_waiting(HOURLY, hour, error=why, next_attempt_at=end), _waiting(tagged, hour)])
    finally:
        store.close()
    rc, data = _missed(db, "--since", "90m")
    held = {m["job_id"]: m for g in data["owners"] for m in g["missed"]}
    assert rc == 1 and set(held) == {"billing-export", "reindex"}
    window, pause = held["billing-export"], held["reindex"]
    assert window["state"] == "deferred" and window["held"] == {
        "kind": "window",
        "name": "swap-disks",
        "reason": "CHG-7 disk swap",
        "by": None,
        "until": end.isoformat(),
    }
    assert pause["state"] == "paused" and pause["held"] == {
        "kind": "pause",
        "name": "tag db",
        "reason": "INC-4 replica lag",
        "by": "alice",
        "until": end.isoformat(),
    }
    text = chronoctl("missed", "--since", "90m", "--wide", db=db, env={"COLUMNS": "250"}).stdout
    assert "deferred by maintenance window swap-disks (CHG-7 disk swap)" in text
    assert "held by a pause (tag db) by alice: INC-4 replica lag" in text
    assert "not started yet" not in text


def test_a_job_inside_a_maintenance_window_is_not_silent_for_status_or_missed_as_for_the_notifier(tmp_path):
    """The notifier keeps quiet about a job a window holds; `status` and `missed` do not call
    it silent either (they read the windows from the registry, as the daemon does)."""
    from chronod.core.blackout import Window
    from chronod.store import status as views

    db = str(tmp_path / "chrono.db")
    now = datetime.now(timezone.utc)
    _fill(db, now)
    store = _store(db)
    try:
        rows = store.jobs()
        recent = store.runs(since=now - timedelta(days=1), until=now)
        swap = Window("swap", "CHG-4", start=now - timedelta(hours=1), end=now + timedelta(hours=1), jobs=(PURGE.id,))
        other = Window("other", "CHG-5", start=now - timedelta(hours=1), end=now + timedelta(hours=1), jobs=("x",))
        assert [q.job_id for q in views.silent(store, rows, now, recent)] == ["gdpr-purge"]
        assert [q.job_id for q in views.silent(store, rows, now, recent, (), [other])] == ["gdpr-purge"]
        assert views.silent(store, rows, now, recent, (), [swap]) == []
        assert views.overview(store, now, windows=[swap]).silent == []
    finally:
        store.close()
