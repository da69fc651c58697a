"""The store agrees with itself, on every backend: each fenced write counts what it
refused, the reads of a pause agree on whether it holds (and on one clock), every read of
a job's latest run answers for any job id, orders hold with missing values, and a call
leaves its caller's values alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from chronod.store.memory import MemoryStore
from chronod.store.sql import SqlStore
from tests.contract.test_store_backfills import stored
from tests.contract.test_store_contract import T0, acquire, run, spec

LONG_AGO = datetime(2020, 1, 1, tzinfo=timezone.utc)  # before any clock this suite runs under
FAR_OFF = datetime(2100, 1, 1, tzinfo=timezone.utc)  # after any


# --- fencing -------------------------------------------------------------------------------


def test_note_held_under_a_superseded_token_changes_nothing_and_is_counted(store):
    old = acquire(store)
    store.insert_runs([run(1), run(2)])
    store.release_node("n1", old)
    acquire(store)  # the node came back: its old token is no lease any more
    ids = ["backup-000001", "backup-000002"]
    assert store.note_held(ids, "held by a window", FAR_OFF, node="n1", token=old) == 0
    assert store.stale_rejections == 2
    assert {(r.error, r.next_attempt_at) for r in map(store.get_run, ids)} == {(None, None)}


def test_note_held_under_a_live_token_counts_nothing(store):
    token = acquire(store)
    store.insert_runs([run(1), run(2, state="succeeded")])
    assert store.note_held(["backup-000001", "backup-000002"], "held", FAR_OFF, node="n1", token=token) == 1
    assert store.stale_rejections == 0  # a row that is not pending is no refused write
    held = store.get_run("backup-000001")
    assert (held.error, held.next_attempt_at) == ("held", FAR_OFF)


def test_a_fenced_settle_must_name_its_node(store):
    token = acquire(store)
    store.insert_runs([run(1)])
    with pytest.raises(ValueError, match="node"):
        store.settle("backup-000001", "skipped_overlap", error="x", next_run=None, token=token)
    assert store.get_run("backup-000001").state == "pending"
    assert store.settle("backup-000001", "skipped_overlap", error="x", next_run=None, node="n1", token=token)
    settled = store.get_run("backup-000001")
    assert (settled.state, settled.node, settled.token) == ("skipped_overlap", "n1", token)


# --- pauses ---------------------------------------------------------------------------------


def test_metrics_count_only_the_pauses_that_hold(store):
    store.sync_jobs("n1", [spec("a"), spec("b"), spec("c"), spec("d")])
    store.set_paused("a", True, "until resumed")
    store.set_paused("b", True, "over", until=LONG_AGO)
    store.set_paused("c", True, "still on", until=FAR_OFF)
    assert set(store.paused_jobs()) == {"a", "c"}
    assert {j.job_id for j in store.jobs() if j.paused} == {"a", "c"}
    assert store.metrics()["paused_jobs"] == 2


@pytest.fixture
def skewed(backend, request):
    """A store whose own clock says 2023 (a node's clock far behind the database's)."""
    clock = lambda: datetime(2023, 1, 1, tzinfo=timezone.utc)  # noqa: E731
    if backend == "memory":
        yield MemoryStore(now=clock)
        return
    st = SqlStore(request.getfixturevalue("store_url"), now=clock)
    yield st
    st.close()


def test_a_jobs_pause_holds_by_one_clock_in_every_read(skewed):
    """Ended by the database's clock on PostgreSQL (now() is past 2024), not yet by the
    node's clock (2023) where that clock is the store's (SQLite, memory): the reads agree
    with each other whichever clock the store keeps."""
    store = skewed
    store.sync_jobs("n1", [spec("a")])
    store.set_paused("a", True, "until 2024", until=datetime(2024, 1, 1, tzinfo=timezone.utc))
    holds = "a" in store.paused_jobs()
    assert holds == (store.dialect != "postgresql")
    assert store.get_job("a").paused is holds
    assert [j.paused for j in store.jobs()] == [holds]
    assert [p.target for p in store.pauses()] == (["a"] if holds else [])
    assert store.metrics()["paused_jobs"] == int(holds)


# --- each job's latest run -------------------------------------------------------------------


def test_each_jobs_latest_run_is_answered_for_any_job_id(store):
    store.sync_jobs("n1", [spec("kept"), spec("gone")])
    store.insert_runs([run(1, job=j, state="succeeded") for j in ("kept", "gone", "never")])
    store.sync_jobs("n1", [spec("kept")])  # "gone" is removed; "never" was never registered
    ids = ["kept", "gone", "never", "no-runs"]
    until = T0 + timedelta(days=1)
    assert sorted(store.last_successes(ids, until)) == ["gone", "kept", "never"]
    assert {j: r.run_id for j, r in store.last_runs(ids, until).items()} == {
        "kept": "kept-000001",
        "gone": "gone-000001",
        "never": "never-000001",
    }
    assert store.last_states(ids, until) == {"kept": "succeeded", "gone": "succeeded", "never": "succeeded"}
    assert store.last_runs(ids, until, skip=("succeeded",)) == {} == store.last_states(ids, until, skip=("succeeded",))


def test_each_jobs_latest_run_is_answered_for_more_ids_than_one_read_asks(store):
    asked = [f"job-{i:05d}" for i in range(2500)]
    store.insert_runs([run(1, job=j, state="failed") for j in asked[::500]])
    until = T0 + timedelta(days=1)
    assert sorted(store.last_runs(asked, until)) == asked[::500]
    assert store.last_states(asked, until) == dict.fromkeys(asked[::500], "failed")
    assert store.last_successes(asked, until) == {}


# --- orders with a missing value -------------------------------------------------------------


def test_a_registry_error_without_a_line_comes_first_in_its_file(store):
    errors = [{"file": "x.yaml", "line": n, "message": f"at {n}"} for n in (5, None, 2)]
    store.set_registry_errors("a", errors)
    assert [e["line"] for e in store.registry_errors()] == [None, 2, 5]


def test_a_waiting_retry_without_a_due_time_comes_first(store):
    waiting = [
        replace(run(i), state="retry_wait", node="n1", attempts=1, next_attempt_at=at)
        for i, at in ((1, T0 + timedelta(minutes=9)), (2, None), (3, T0 + timedelta(minutes=4)))
    ]
    store.insert_runs(waiting)
    assert [r.run_id for r in store.waiting_retries("n1")] == ["backup-000002", "backup-000003", "backup-000001"]


# --- backfills ---------------------------------------------------------------------------------


def test_opening_a_backfill_run_leaves_the_callers_run_alone(store):
    bf_id = stored(store)
    mine = run(0, state="failed")
    opened = store.open_backfill_run(bf_id, 0, mine)
    assert (opened.state, opened.trigger) == ("pending", "backfill")
    assert (mine.state, mine.trigger) == ("failed", "schedule")
    assert opened is not mine


def test_cancelling_a_backfill_clears_the_hold_noted_on_its_runs(store):
    token = acquire(store)
    bf_id = stored(store)
    assert store.open_backfill_run(bf_id, 0, run(0)) is not None
    assert store.note_held(["backup-000000"], "held by a window", FAR_OFF, node="n1", token=token) == 1
    assert store.cancel_backfill(bf_id, "not wanted") == (True, ["backup-000000"])
    cancelled = store.get_run("backup-000000")
    assert (cancelled.state, cancelled.error, cancelled.next_attempt_at) == ("cancelled", "not wanted", None)
