"""The notifier's reads of what changed, on every backend (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chronod.store.api import Run
from tests.contract.conftest import outbox, sql_only

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def run(i: int, state: str, updated_at: datetime) -> Run:
    at = T0 + timedelta(minutes=i)
    return Run(
        run_id=f"r-{i:04d}",
        job_id="backup",
        job_key="backup",
        scheduled_at=at,
        fire_at=at,
        state=state,
        updated_at=updated_at,
    )


def test_changed_run_keys_name_the_runs_ended_as_the_notifier_reads_them_in_the_window_oldest_first(store):
    at = [T0 + timedelta(seconds=s) for s in range(6)]
    store.insert_runs(
        [
            run(1, "succeeded", at[3]),
            run(2, "failed", at[1]),
            run(3, "pending", at[2]),  # not ended: not a change the notifier reads
            run(4, "skipped_overlap", at[1]),
            run(5, "succeeded", at[5]),  # at the window's end: outside
            run(6, "succeeded", at[0] - timedelta(microseconds=1)),  # before it
            run(7, "skipped_outage", at[2]),  # a skip that tells nothing (shed): not read
            run(8, "skipped_paused", at[2]),
        ]
    )
    keys = outbox(store).changed_run_keys(at[0], at[5])
    assert keys == [("r-0002", at[1]), ("r-0004", at[1]), ("r-0001", at[3])]


def test_postgresql_sessions_read_time_in_utc_and_the_keys_come_back_aware_in_utc(store):
    """The driver hands out UTC datetimes as they are only in a UTC session (a server in
    Etc/UTC or another zone cost a conversion per value read)."""
    sql_only(store, "a session's time zone")
    if store.dialect != "postgresql":
        pytest.skip("PostgreSQL only: SQLite keeps naive UTC text")
    import sqlalchemy as sa

    with store.database.tx(write=False) as c:
        assert c.execute(sa.text("SHOW TIME ZONE")).scalar() == "UTC"
    store.insert_runs([run(1, "succeeded", T0)])
    assert [at.utcoffset() for _, at in outbox(store).changed_run_keys(T0, T0 + timedelta(1))] == [timedelta(0)]
    with store.engine.connect() as c:  # behind a pooler that hands out another session: still UTC
        c.exec_driver_sql("SET TIME ZONE 'America/New_York'")
        c.commit()
    keys = outbox(store).changed_run_keys(T0, T0 + timedelta(1))
    assert keys == [("r-0001", T0)] and keys[0][1].utcoffset() == timedelta(0)


def test_terminal_runs_read_whole_rows_of_the_ended_runs_among_the_ids_in_change_order(store):
    at = [T0 + timedelta(seconds=s) for s in range(4)]
    store.insert_runs([run(1, "succeeded", at[3]), run(2, "failed", at[1]), run(3, "pending", at[2])])
    got = outbox(store).terminal_runs(["r-0001", "r-0002", "r-0003", "r-9999", "r-0001"])
    assert [(r.run_id, r.state, r.updated_at) for r in got] == [
        ("r-0002", "failed", at[1]),
        ("r-0001", "succeeded", at[3]),
    ]
    many = [run(i, "succeeded", at[0]) for i in range(10, 1210)]  # more ids than one IN list
    store.insert_runs(many)
    assert len(outbox(store).terminal_runs([r.run_id for r in many])) == 1200
    assert outbox(store).terminal_runs([]) == []


# --- notifier state and the outbox's delivery bookkeeping ---------------------------------


def notice(key: str, job: str = "backup") -> dict:
    return dict(
        job_id=job,
        event="run_ended",
        state="failed",
        run_id=f"run-{key}",
        dedupe_key=key,
        route={"kind": "command", "command": "true"},
        payload={"text": f"{job} failed"},
    )


def test_a_notice_is_stored_once_per_dedupe_key(store):
    box = outbox(store)
    assert box.add([notice("a"), notice("b")], T0) == 2
    assert box.add([notice("a"), notice("c", job="report")], T0) == 1  # "a" was computed again
    rows = box.notices()
    assert [r.dedupe_key for r in rows] == ["a", "b", "c"]
    assert rows[0].route == {"kind": "command", "command": "true"} and rows[0].payload == {"text": "backup failed"}
    assert [r.dedupe_key for r in box.notices("report")] == ["c"]


def test_one_claim_at_a_time_and_a_lost_claim_cannot_mark_the_notice(store):
    box = outbox(store)
    box.add([notice("a"), notice("b"), notice("c")], T0)
    mine = box.claim("n1", T0, limit=2, hold_s=60)
    assert [r.dedupe_key for r in mine] == ["a", "b"] and all(r.claimed_by == "n1" for r in mine)
    assert [r.dedupe_key for r in box.claim("n2", T0, hold_s=60)] == ["c"]  # the rest, not n1's
    assert box.claim("n2", T0 + timedelta(seconds=30)) == []  # n1's claim still holds

    later = T0 + timedelta(seconds=61)  # every claim lapsed: n2 takes n1's "a" and "b" over
    assert [r.dedupe_key for r in box.claim("n2", later, hold_s=60)] == ["a", "b", "c"]
    assert box.mark_sent(mine[0].id, "n1", later) is False  # n1 lost it: n2 sends
    assert box.mark_sent(mine[0].id, "n2", later) is True
    assert box.mark_sent(mine[0].id, "n2", later) is False  # once
    sent = {r.dedupe_key: r for r in box.notices()}["a"]
    assert (sent.sent_at, sent.attempts, sent.last_error) == (later, 1, None)


def test_a_failed_delivery_waits_for_its_retry_time_and_keeps_the_error(store):
    box = outbox(store)
    box.add([notice("a")], T0)
    [row] = box.claim("n1", T0)
    retry_at = T0 + timedelta(minutes=5)
    box.mark_failed(row.id, "n1", "connection refused " + "x" * 3000, retry_at)
    [failed] = box.notices()
    assert failed.attempts == 1 and failed.claimed_by is None and failed.sent_at is None
    assert failed.last_error.startswith("connection refused") and len(failed.last_error) == 2000
    assert box.claim("n1", retry_at - timedelta(seconds=1)) == []
    assert [r.id for r in box.claim("n1", retry_at)] == [row.id]


def test_a_restarted_node_releases_what_its_dead_process_had_claimed(store):
    box = outbox(store)
    box.add([notice("a"), notice("b")], T0)
    a, b = box.claim("n1", T0, hold_s=300)
    box.mark_sent(a.id, "n1", T0)
    assert box.release_claims("n2") == 0
    assert box.release_claims("n1") == 1  # only the unsent one
    assert [r.dedupe_key for r in box.claim("n1", T0 + timedelta(seconds=1))] == ["b"]


def test_a_claim_skips_the_jobs_of_a_full_lane_and_rows_given_back_are_free_at_once(store):
    box = outbox(store)
    box.add([notice("a", "slow1"), notice("b", "slow2"), notice("c", "root"), notice("d", "slow1")], T0)
    got = box.claim("n1", T0, limit=2, hold_s=600, skip_jobs=["slow1", "slow2"])
    assert [r.dedupe_key for r in got] == ["c"]  # the oldest rows belong to jobs whose lane is full
    mine = box.claim("n1", T0, limit=2, hold_s=600)
    assert [r.dedupe_key for r in mine] == ["a", "b"]
    box.release([mine[1].id], "n2")  # another node cannot give back what n1 holds
    assert [r.dedupe_key for r in box.claim("n2", T0)] == ["d"]
    box.release([mine[1].id], "n1")
    assert [r.dedupe_key for r in box.claim("n2", T0)] == ["b"]  # free before its claim would lapse


def test_notifier_state_is_kept_per_name_and_replaced_whole(store):
    box = outbox(store)
    assert box.get_state("cursor") == {} and box.get_states(["cursor", "x"]) == {}
    box.set_states({"cursor": {"at": "2026-03-01T12:00:00+00:00"}, "silence:backup": {"n": 1}}, T0)
    box.set_states({"silence:backup": {"n": 2}}, T0 + timedelta(seconds=1))
    box.set_states({}, T0)  # nothing to write: nothing changes
    assert box.get_state("cursor") == {"at": "2026-03-01T12:00:00+00:00"}
    assert box.get_states(["silence:backup", "nope"]) == {"silence:backup": {"n": 2}}
    many = {f"k{i}": {"i": i} for i in range(1100)}  # more names than one IN list holds
    box.set_states(many, T0)
    assert box.get_states(many) == many


def test_many_states_are_saved_a_chunk_a_transaction_in_the_order_given(store, monkeypatch):
    # one transaction over 100,000 names held SQLite's write lock for seconds: the loop's
    # writes waited behind it
    from chronod.store import outbox as module

    sql_only(store, "transactions of the database")
    box = outbox(store)
    seen: list[int] = []
    real = box.db.tx

    def counted(*args, **kwargs):
        seen.append(len(seen))
        return real(*args, **kwargs)

    monkeypatch.setattr(box.db, "tx", counted)
    many = {f"k{i}": {"i": i} for i in range(2 * getattr(module, "STATES_PER_TX", 1000) + 1)}
    box.set_states({**many, "cursor": {"at": "last"}}, T0)
    assert len(seen) == 3  # the cursor in the last chunk
    monkeypatch.undo()
    assert box.get_states([*many, "cursor"]) == {**many, "cursor": {"at": "last"}}


def test_the_chain_reads_latest_first_and_waiting(store):
    at = T0 + timedelta(hours=1)
    store.insert_runs(
        [
            run(1, "succeeded", at),
            run(2, "failed", at),
            run(3, "pending", at),
            Run(run_id="x-1", job_id="other", job_key="other", scheduled_at=T0, fire_at=T0, state="retry_wait"),
            Run(run_id="y-1", job_id="done", job_key="done", scheduled_at=T0, fire_at=T0, state="succeeded"),
        ]
    )
    box = outbox(store)
    assert box.waiting_keys() == {"backup", "other"}
    assert box.latest_runs() == {
        "backup": ("r-0003", T0 + timedelta(minutes=3)),
        "other": ("x-1", T0),
        "done": ("y-1", T0),
    }
    assert box.first_seen() == {"backup": T0 + timedelta(minutes=1), "other": T0, "done": T0}
