"""The store's part of a backfill, on every backend: stored, opened once per occurrence,
attempts kept against the occurrence, never an occurrence in flight."""

from __future__ import annotations

from datetime import timedelta

from tests.contract.test_store_contract import T0, acquire, finish_ok, run


def stored(store, n: int = 3) -> int:
    items = [(f"backup-{i:06d}", "backup", T0 + timedelta(minutes=i), T0 + timedelta(minutes=i)) for i in range(n)]
    return store.add_backfill(
        "backup",
        from_at=T0,
        to_at=T0 + timedelta(minutes=n),
        only="all",
        max_concurrency=1,
        allow_unsafe=False,
        reason=None,
        requested_by="ops",
        items=items,
    )


def test_a_backfill_is_stored_running_with_its_occurrences_oldest_first(store):
    bf = store.get_backfill(stored(store))
    assert (bf.state, bf.started, bf.job_id) == ("running", 0, "backup")
    assert bf.run_ids == ["backup-000000", "backup-000001", "backup-000002"]
    assert bf.items[1][2] == T0 + timedelta(minutes=1)
    assert [b.id for b in store.backfills(active_only=True)] == [bf.id]


def test_an_occurrence_without_a_row_is_inserted_with_trigger_backfill_and_counted_started(store):
    bf_id = stored(store)
    opened = store.open_backfill_run(bf_id, 0, run(0))
    assert (opened.state, opened.trigger, opened.attempts) == ("pending", "backfill", 0)
    assert store.get_backfill(bf_id).started == 1


def test_an_ended_run_is_opened_again_and_keeps_counting_its_attempts(store):
    token = acquire(store)
    store.insert_runs([run(0)])
    store.dispatch("backup-000000", "n1", token, None)
    assert finish_ok(store, "backup-000000", 1, token)
    bf_id = stored(store)
    opened = store.open_backfill_run(bf_id, 0, run(0))
    assert (opened.state, opened.trigger, opened.attempts, opened.finished_at) == ("pending", "backfill", 1, None)
    again = store.dispatch("backup-000000", "n1", token, None)
    assert again.attempts == 2
    assert [a.attempt for a in store.attempts("backup-000000")] == [1, 2]


def test_an_occurrence_in_flight_is_not_opened_twice(store):
    store.insert_runs([run(0)])  # pending: the daemon has it
    bf_id = stored(store)
    assert store.open_backfill_run(bf_id, 0, run(0)) is None
    assert store.get_run("backup-000000").trigger == "schedule"
    assert store.get_backfill(bf_id).started == 1  # passed over, not retried forever


def test_only_the_writer_at_the_current_index_opens_an_occurrence(store):
    bf_id = stored(store)
    assert store.open_backfill_run(bf_id, 0, run(0)) is not None
    assert store.open_backfill_run(bf_id, 0, run(0)) is None  # a second writer at the same index
    assert store.get_backfill(bf_id).started == 1


def test_a_backfill_ends_once(store):
    bf_id = stored(store)
    assert store.end_backfill(bf_id, "done")
    assert not store.end_backfill(bf_id, "cancelled")
    bf = store.get_backfill(bf_id)
    assert bf.state == "done" and bf.finished_at is not None
    assert store.backfills(active_only=True) == []


def test_a_cancelled_backfill_opens_nothing_more_and_cancels_what_waits_to_start(store):
    token = acquire(store)
    bf_id = stored(store)
    assert store.open_backfill_run(bf_id, 0, run(0)) is not None
    store.dispatch("backup-000000", "n1", token, None)  # running: it finishes
    assert store.open_backfill_run(bf_id, 1, run(1)) is not None  # opened, not started yet
    assert store.cancel_backfill(bf_id, "cancelled by ops: wrong range") == (True, ["backup-000001"])
    bf = store.get_backfill(bf_id)
    assert (bf.state, bf.error, bf.started) == ("cancelled", "cancelled by ops: wrong range", 2)
    assert store.open_backfill_run(bf_id, 2, run(2)) is None and store.get_run("backup-000002") is None
    assert store.get_run("backup-000000").state == "running"
    assert (store.get_run("backup-000001").state, store.get_run("backup-000001").error) == (
        "cancelled",
        "cancelled by ops: wrong range",
    )
    assert store.cancel_backfill(bf_id, "again") == (False, [])
    assert store.backfills(active_only=True) == []
