"""One contract for the store, run against every backend (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from chronod import fsutil
from chronod.core.model import JobSpec
from chronod.store import schema
from chronod.store.api import Ending, NodeConflict, Run, SchemaTooNew, SchemaTooOld, StoreError
from chronod.store.memory import MemoryStore
from chronod.store.sql import SqlStore, mask_url
from tests.contract.conftest import sql_only
from tests.integration.daemon_helpers import wait_until

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
HOST = "host-a"
BOOT = "boot-1"


def run(i: int, job: str = "backup", state: str = "pending") -> Run:
    at = T0 + timedelta(minutes=i)
    return Run(
        run_id=f"{job}-{i:06d}",
        job_id=job,
        job_key=job,
        scheduled_at=at,
        fire_at=at + timedelta(seconds=7),
        state=state,
    )


def spec(job_id: str, command: str = "true") -> JobSpec:
    return JobSpec(id=job_id, owner="ops", schedule="*/5 * * * *", command=command, idempotency_class="idempotent")


def acquire(store, name: str = "n1", ttl: float = 60.0) -> int:
    return store.acquire_node(name, pid=os.getpid(), hostname=HOST, boot_id=BOOT, ttl_s=ttl)


def expire_lease(store, name: str) -> None:
    if isinstance(store, MemoryStore):
        store._expire(name, datetime.now(timezone.utc) - timedelta(seconds=5))
        return
    with store.engine.begin() as conn:
        conn.execute(
            schema.nodes.update()
            .where(schema.nodes.c.name == name)
            .values(lease_expires_at=datetime.now(timezone.utc) - timedelta(seconds=5))
        )


def finish_ok(store, run_id: str, attempt: int, token: int | None) -> bool:
    return store.finish(
        run_id,
        attempt,
        "succeeded",
        exit_code=0,
        signal=None,
        output_tail="done\n",
        output_bytes=5,
        error=None,
        token=token,
    )


# --- schema ---------------------------------------------------------------------------


def test_a_migrated_database_is_at_this_chronos_head(store):
    sql_only(store, "schema revisions are alembic's")
    assert store.schema_revision() == schema.HEAD_REVISION
    store.check_schema()


def test_an_empty_database_is_too_old_and_names_the_command_that_fixes_it(tmp_path):
    st = SqlStore(str(tmp_path / "empty.db"))
    try:
        assert st.schema_revision() is None
        with pytest.raises(SchemaTooOld, match="chronoctl db upgrade"):
            st.check_schema()
    finally:
        st.close()


def test_a_database_from_a_newer_chrono_is_refused_with_upgrade_chrono(store):
    sql_only(store, "schema revisions are alembic's")
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(SchemaTooNew, match="this chrono is older than the database; upgrade chrono"):
        store.check_schema()


def test_upgrade_twice_is_harmless(store):
    sql_only(store, "migrations")
    store.upgrade()
    assert store.schema_revision() == schema.HEAD_REVISION


# --- URLs and secrets ---------------------------------------------------------------------


def test_url_safe_hides_the_password():
    st = SqlStore("postgresql://chrono:hunter2-secret@db.example:5432/chrono")
    try:
        assert "hunter2-secret" not in st.url_safe
        assert st.url_safe == "postgresql+psycopg://chrono:***@db.example:5432/chrono"
    finally:
        st.close()
    assert "hunter2" not in mask_url("postgres://u:hunter2@h/d")


def test_an_unreachable_postgres_raises_store_error_without_the_password():
    st = SqlStore("postgresql://chrono:hunter2-secret@127.0.0.1:1/chrono?connect_timeout=2")
    try:
        with pytest.raises(StoreError) as err:
            st.schema_revision()
    finally:
        st.close()
    text = str(err.value)
    assert "hunter2-secret" not in text and "127.0.0.1:1" in text
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_a_plain_path_becomes_an_sqlite_url_and_its_directory_is_created_private(tmp_path):
    path = tmp_path / "deep" / "chrono.db"
    st = SqlStore(str(path))
    try:
        assert st.dialect == "sqlite" and st.url_safe == f"sqlite:///{path}"
        assert (path.parent.stat().st_mode & 0o777) == 0o700
    finally:
        st.close()


# --- occurrences ----------------------------------------------------------------------------


def test_inserting_a_run_twice_keeps_one_row(store):
    assert store.insert_runs([run(1)]) == 1
    assert store.insert_runs([run(1)]) == 0
    assert [r.run_id for r in store.pending()] == ["backup-000001"]


def test_insert_runs_counts_only_new_runs_and_keeps_their_states(store):
    assert store.insert_runs([run(i) for i in range(1500)] + [run(2000, state="skipped_outage")]) == 1501
    assert store.insert_runs([run(i) for i in range(1490, 1510)]) == 10
    assert len(store.pending()) == 1510
    assert store.get_run("backup-002000").state == "skipped_outage"


def test_runs_by_prefix_finds_runs_whose_id_starts_with_it_and_no_wildcard_matches(store):
    store.insert_runs([run(i) for i in (1, 2, 12)] + [run(3, job="back_up")])
    assert [r.run_id for r in store.runs_by_prefix("backup-00000")] == ["backup-000001", "backup-000002"]
    assert [r.run_id for r in store.runs_by_prefix("backup-000012")] == ["backup-000012"]
    assert [r.run_id for r in store.runs_by_prefix("backup-", limit=2)] == ["backup-000001", "backup-000002"]
    assert [r.run_id for r in store.runs_by_prefix("back_")] == ["back_up-000003"]  # `_` is no wildcard
    assert store.runs_by_prefix("back%") == []


def test_datetimes_come_back_aware_utc(store):
    store.insert_runs([run(3)])
    got = store.get_run("backup-000003")
    assert got.scheduled_at == T0 + timedelta(minutes=3) and got.scheduled_at.tzinfo == timezone.utc
    assert got.fire_at - got.scheduled_at == timedelta(seconds=7)


def test_naive_datetimes_are_refused(store):
    bad = run(4)
    bad.scheduled_at = bad.scheduled_at.replace(tzinfo=None)
    with pytest.raises((ValueError, StoreError)):
        store.insert_runs([bad])


# --- dispatch ---------------------------------------------------------------------------------


def test_dispatch_claims_once_and_writes_the_next_occurrence_in_the_same_transaction(store):
    token = acquire(store)
    store.insert_runs([run(1)])
    claimed = store.dispatch("backup-000001", "n1", token, run(2))
    assert claimed.state == "running" and claimed.attempts == 1 and claimed.node == "n1"
    assert claimed.token == token and claimed.started_at is not None
    assert store.dispatch("backup-000001", "n1", token, run(3)) is None
    assert [r.run_id for r in store.pending()] == ["backup-000002"]
    [attempt] = store.attempts("backup-000001")
    assert (attempt.attempt, attempt.node, attempt.token, attempt.state) == (1, "n1", token, "running")
    assert store.stale_rejections == 0


def test_one_wakeup_stores_settles_and_claims_in_one_call_and_a_stale_token_changes_nothing_but_inserts(store):
    token = acquire(store)
    store.insert_runs([run(1), run(2), run(3)])
    store.dispatch("backup-000003", "n1", token, None)
    claimed = store.commit_wakeup(
        [run(1), run(4)],
        [("backup-000002", "skipped_outage", "catch-up: latest"), ("backup-000003", "skipped_outage", "not waiting")],
        ["backup-000001", "backup-000003", "backup-000004"],
        "n1",
        token,
    )
    assert sorted(c.run_id for c in claimed) == ["backup-000001", "backup-000004"]
    states = {r: store.get_run(f"backup-00000{r}").state for r in (1, 2, 3, 4)}
    assert states == {1: "running", 2: "skipped_outage", 3: "running", 4: "running"}
    assert store.get_run("backup-000002").error == "catch-up: latest"
    expire_lease(store, "n1")
    assert (
        store.commit_wakeup(
            [run(5), run(6)], [("backup-000005", "skipped_outage", "x")], ["backup-000006"], "n1", token
        )
        == []
    )
    assert (store.get_run("backup-000005").state, store.get_run("backup-000006").state) == ("pending", "pending")
    assert store.stale_rejections >= 1


def test_a_chunk_of_claims_writes_one_attempt_row_per_claimed_run_and_none_for_the_others(store):
    token = acquire(store)
    store.insert_runs([run(i) for i in range(1, 5)])
    [running] = [store.dispatch("backup-000002", "n1", token, None)]  # no longer waiting
    claimed = store.commit_wakeup([], [], ["backup-000001", "backup-000002", "backup-000004", "nope"], "n1", token)
    assert sorted(c.run_id for c in claimed) == ["backup-000001", "backup-000004"]
    for c in claimed:
        [a] = store.attempts(c.run_id)
        assert (a.attempt, a.node, a.token, a.state, a.started_at) == (1, "n1", token, "running", c.started_at)
    [a] = store.attempts("backup-000002")
    assert (a.attempt, a.started_at) == (1, running.started_at)
    expire_lease(store, "n1")
    assert store.commit_wakeup([], [], ["backup-000003"], "n1", token) == []
    assert store.attempts("backup-000003") == []
    assert store.get_run("backup-000003").state == "pending"


def test_a_chunk_of_claims_is_one_statement_on_postgresql(store):
    sql_only(store, "statements sent to a database")
    if store.dialect != "postgresql":
        pytest.skip("SQLite has no round trips to save: the claim and its attempt rows stay two statements")
    token = acquire(store)
    store.insert_runs([run(i) for i in range(1, 51)])
    sent: list[str] = []

    def note(conn, cursor, statement, *args):
        sent.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", note)
    try:
        claimed = store.commit_wakeup([], [], [f"backup-{i:06d}" for i in range(1, 51)], "n1", token)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", note)
    assert len(claimed) == 50
    assert len(sent) == 1, sent
    assert all(len(store.attempts(c.run_id)) == 1 for c in claimed)


def test_run_states_answer_for_the_ids_that_have_a_row_and_live_nodes_lists_unexpired_leases(store):
    token = acquire(store, "n1")
    store.insert_runs([run(1), run(2)])
    store.dispatch("backup-000002", "n1", token, None)
    assert store.run_states(["backup-000001", "backup-000002", "nope"]) == {
        "backup-000001": "pending",
        "backup-000002": "running",
    }
    assert store.live_nodes() == [("n1", token)]
    expire_lease(store, "n1")
    assert store.live_nodes() == []


def test_a_failed_dispatch_does_not_write_the_next_occurrence(store):
    token = acquire(store)
    assert store.dispatch("no-such-run", "n1", token, run(9)) is None
    assert store.get_run("backup-000009") is None


def test_dispatch_with_a_superseded_token_is_rejected_and_counted(store):
    old = acquire(store)
    new = acquire(store)
    assert new > old
    store.insert_runs([run(1)])
    assert store.dispatch("backup-000001", "n1", old, run(2)) is None
    assert store.stale_rejections == 1
    assert store.get_run("backup-000001").state == "pending"
    assert store.get_run("backup-000002") is None
    assert store.dispatch("backup-000001", "n1", new, run(2)).token == new


def test_dispatch_in_group_refuses_while_the_resource_is_full_and_still_stores_the_next_occurrence(store):
    token = acquire(store)
    store.sync_jobs(
        "n1",
        [
            JobSpec(
                id=j, owner="ops", schedule="*/5 * * * *", command="true", idempotency_class="idempotent", resource="db"
            )
            for j in ("backup", "report")
        ],
    )
    store.insert_runs([run(1), run(1, job="report")])
    first, full = store.dispatch_in_group("backup-000001", "n1", token, run(2), resource="db", limit=1)
    assert first is not None and first.state == "running" and not full
    second, full = store.dispatch_in_group("report-000001", "n1", token, run(2, job="report"), resource="db", limit=1)
    assert second is None and full
    assert store.get_run("report-000001").state == "pending"
    assert store.get_run("report-000002").state == "pending"  # the chain of occurrences never breaks
    third, full = store.dispatch_in_group("report-000001", "n1", token, None, resource="db", limit=2)
    assert third is not None and not full


def test_dispatch_group_claims_as_many_runs_as_the_resource_has_free_slots_in_one_call(store):
    token = acquire(store)
    jobs = ("a", "b", "c", "d")
    store.sync_jobs(
        "n1",
        [
            JobSpec(
                id=j, owner="ops", schedule="*/5 * * * *", command="true", idempotency_class="idempotent", resource="db"
            )
            for j in jobs
        ],
    )
    store.insert_runs([run(1, job=j) for j in jobs])
    ids = [f"{j}-000001" for j in jobs]
    first, full = store.dispatch_group(ids[:1], "n1", token, [run(2, job="a")], resource="db", limit=3)
    assert [r.run_id for r in first] == ["a-000001"] and not full
    claimed, full = store.dispatch_group(
        ids[1:], "n1", token, [run(2, job=j) for j in jobs[1:]], resource="db", limit=3
    )
    assert [r.run_id for r in claimed] == ["b-000001", "c-000001"] and full  # 1 running + 2 = the limit of 3
    assert store.get_run("d-000001").state == "pending"
    assert all(store.get_run(f"{j}-000002").state == "pending" for j in jobs)  # every chain goes on


def test_claim_offline_stores_and_claims_a_run_at_the_attempt_and_start_it_really_had(store):
    token = acquire(store)
    started = run(1)
    started.state, started.attempts, started.node, started.started_at = "running", 1, "n1", T0 + timedelta(seconds=9)
    claimed = store.claim_offline(started, "n1", token)
    assert claimed is not None and claimed.attempts == 1 and claimed.started_at == T0 + timedelta(seconds=9)
    assert store.get_run("backup-000001").state == "running"
    assert store.claim_offline(started, "n1", token) is None  # no longer waiting


def test_waiting_retries_are_the_retry_wait_runs_a_node_last_held(store):
    token = acquire(store)
    store.insert_runs([run(1), run(2)])
    store.dispatch("backup-000001", "n1", token, None)
    assert store.schedule_retry(
        "backup-000001", 1, T0 + timedelta(minutes=5), exit_code=1, signal=None, error="exit 1", token=token
    )
    assert [r.run_id for r in store.waiting_retries("n1")] == ["backup-000001"]
    assert store.waiting_retries("n2") == []
    assert store.dispatch("backup-000001", "n1", token, None) is not None  # its next attempt starts
    assert store.waiting_retries("n1") == []


def test_dispatch_after_the_lease_expired_is_rejected_and_counted(store):
    token = acquire(store)
    store.insert_runs([run(1)])
    expire_lease(store, "n1")
    assert store.renew_lease("n1", token, 60) is False
    assert store.dispatch("backup-000001", "n1", token, None) is None
    assert store.stale_rejections == 1


def test_writes_after_release_are_rejected(store):
    token = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", token, None)
    store.release_node("n1", token)
    assert finish_ok(store, "backup-000001", 1, token) is False
    assert store.stale_rejections == 1
    assert store.get_run("backup-000001").state == "running"


@pytest.mark.postgres
def test_two_nodes_racing_on_postgres_claim_each_run_exactly_once(store, store_url):
    if store.dialect != "postgresql":
        pytest.skip("one node per SQLite database")
    other = SqlStore(store_url)
    try:
        tokens = {"a": acquire(store, "a"), "b": acquire(other, "b")}
        store.insert_runs([run(i) for i in range(200)])
        won: dict[str, list[str]] = {"a": [], "b": []}
        barrier = threading.Barrier(2)

        def race(name: str, st: SqlStore) -> None:
            barrier.wait()
            for i in range(200):
                got = st.dispatch(f"backup-{i:06d}", name, tokens[name], None)
                if got is not None:
                    won[name].append(got.run_id)

        threads = [threading.Thread(target=race, args=("a", store)), threading.Thread(target=race, args=("b", other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(won["a"] + won["b"]) == [f"backup-{i:06d}" for i in range(200)]
        assert not set(won["a"]) & set(won["b"])
        assert all(len(store.attempts(r)) == 1 for r in won["a"][:20] + won["b"][:20])
        assert store.stale_rejections == other.stale_rejections == 0
    finally:
        other.close()


# --- process ids, finish, retries -------------------------------------------------------------


def test_finish_records_the_outcome_only_at_the_running_attempt(store):
    token = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", token, None)
    assert store.set_processes([("backup-000001", 1, 4242, 4241)], token) == {"backup-000001"}
    assert finish_ok(store, "backup-000001", 2, token) is False
    assert store.stale_rejections == 0
    assert finish_ok(store, "backup-000001", 1, token) is True
    assert finish_ok(store, "backup-000001", 1, token) is False
    done = store.get_run("backup-000001")
    assert (done.state, done.exit_code, done.pid, done.supervisor_pid) == ("succeeded", 0, 4242, 4241)
    assert (done.output_tail, done.output_bytes) == ("done\n", 5)
    assert done.finished_at >= done.started_at
    [attempt] = store.attempts("backup-000001")
    assert (attempt.state, attempt.exit_code, attempt.pid) == ("succeeded", 0, 4242)


def test_many_endings_in_one_call_each_recorded_only_where_it_holds(store):
    token = acquire(store)
    for i in (1, 2, 3):
        store.insert_runs([run(i)])
        store.dispatch(f"backup-{i:06d}", "n1", token, None)
    started = [(f"backup-{i:06d}", 1, 100 + i, 200 + i) for i in (1, 2, 3)] + [("backup-000009", 1, 9, 9)]
    assert store.set_processes(started, token) == {"backup-000001", "backup-000002", "backup-000003"}
    endings = [
        Ending("backup-000001", 1, "succeeded", exit_code=0),
        Ending("backup-000002", 2, "failed", exit_code=1),  # not the running attempt
        Ending("backup-000003", 1, "failed", exit_code=3, error="exit 3"),
    ]
    assert store.finish_many(endings, token) == {"backup-000001", "backup-000003"}
    got = {r: store.get_run(r) for r in ("backup-000001", "backup-000002", "backup-000003")}
    assert [(g.state, g.exit_code, g.pid) for g in got.values()] == [
        ("succeeded", 0, 101),
        ("running", None, 102),
        ("failed", 3, 103),
    ]
    assert [a.state for a in store.attempts("backup-000003")] == ["failed"]
    assert store.finish_many([], token) == set()


def test_a_batch_of_endings_fills_each_attempt_row_and_a_batch_under_a_lapsed_lease_is_refused_and_counted(store):
    token = acquire(store)
    ids = [f"backup-{i:06d}" for i in range(1, 6)]
    store.insert_runs([run(i) for i in range(1, 6)])
    for rid in ids:
        store.dispatch(rid, "n1", token, None)
    assert store.set_processes([(rid, 1, 10 + k, 20 + k) for k, rid in enumerate(ids)], token) == set(ids)
    end = datetime.now(timezone.utc).replace(microsecond=0)
    endings = [
        Ending(ids[0], 1, "succeeded", exit_code=0, output_tail="a\n", output_bytes=2, finished_at=end),
        Ending(ids[1], 1, "timed_out", signal=9, error="timeout 5 s", output_bytes=7),
    ]
    assert store.finish_many(endings, token) == {ids[0], ids[1]}
    [a0], [a1] = store.attempts(ids[0]), store.attempts(ids[1])
    assert (a0.state, a0.exit_code, a0.output_tail, a0.output_bytes, a0.pid, a0.finished_at) == (
        "succeeded",
        0,
        "a\n",
        2,
        10,
        end,
    )
    assert (a1.state, a1.signal, a1.error, a1.output_bytes, a1.supervisor_pid) == ("timed_out", 9, "timeout 5 s", 7, 21)
    assert store.get_run(ids[1]).finished_at == a1.finished_at is not None
    expire_lease(store, "n1")
    late = [Ending(rid, 1, "succeeded", exit_code=0) for rid in ids[2:]]
    assert store.finish_many(late, token) == set()
    assert store.stale_rejections == 3
    assert store.set_processes([(rid, 1, 1, 1) for rid in ids[2:]], token) == set()
    assert store.stale_rejections == 6
    assert {store.get_run(rid).state for rid in ids[2:]} == {"running"}
    # an operator's finish is not fenced
    assert store.finish_many([Ending(rid, 1, "failed", exit_code=1) for rid in ids[2:4]], None) == set(ids[2:4])
    assert [store.get_run(rid).state for rid in ids[2:]] == ["failed", "failed", "running"]


def test_finish_with_another_nodes_token_is_rejected(store):
    if store.dialect == "sqlite":
        pytest.skip("one node per SQLite database")
    a, b = acquire(store, "a"), acquire(store, "b")
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "a", a, None)
    assert finish_ok(store, "backup-000001", 1, b) is False
    assert store.set_processes([("backup-000001", 1, 1, 1)], b) == set()


def test_an_operator_finish_without_token_is_not_fenced(store):
    token = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", token, None)
    store.release_node("n1", token)
    assert (
        store.finish(
            "backup-000001",
            1,
            "cancelled",
            exit_code=None,
            signal=15,
            output_tail=None,
            output_bytes=0,
            error="cancelled by an operator",
            token=None,
        )
        is True
    )
    assert store.get_run("backup-000001").state == "cancelled"


def test_finish_refuses_a_non_terminal_state(store):
    with pytest.raises(ValueError, match="terminal"):
        store.finish(
            "x", 1, "running", exit_code=None, signal=None, output_tail=None, output_bytes=0, error=None, token=None
        )


def test_a_retry_waits_then_is_dispatched_as_attempt_two(store):
    token = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", token, None)
    later = T0 + timedelta(minutes=5)
    assert (
        store.schedule_retry("backup-000001", 1, later, exit_code=3, signal=None, error="exit 3", token=token) is True
    )
    waiting = store.get_run("backup-000001")
    assert (waiting.state, waiting.next_attempt_at, waiting.exit_code) == ("retry_wait", later, 3)
    assert [r.run_id for r in store.pending()] == ["backup-000001"]
    again = store.dispatch("backup-000001", "n1", token, None)
    assert again.attempts == 2 and again.exit_code is None and again.next_attempt_at is None
    assert [(a.attempt, a.state, a.exit_code) for a in store.attempts("backup-000001")] == [
        (1, "failed", 3),
        (2, "running", None),
    ]


def test_schedule_retry_with_a_stale_token_is_rejected_and_counted(store):
    old = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", old, None)
    acquire(store)
    assert store.schedule_retry("backup-000001", 1, T0, exit_code=1, signal=None, error="x", token=old) is False
    assert store.stale_rejections == 1


def test_a_restarted_daemon_adopts_its_running_attempt_then_finishes_it(store):
    old = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", old, None)
    new = acquire(store)
    assert finish_ok(store, "backup-000001", 1, new) is False
    assert store.adopt("backup-000001", 1, node="n1", token=new) is True
    assert store.get_run("backup-000001").token == new
    assert finish_ok(store, "backup-000001", 1, new) is True


def test_a_live_holders_run_cannot_be_adopted_or_reclaimed(store):
    if store.dialect == "sqlite":
        pytest.skip("one node per SQLite database")
    a, b = acquire(store, "a"), acquire(store, "b")
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "a", a, None)
    assert store.adopt("backup-000001", 1, node="b", token=b) is False
    assert store.reclaim("backup-000001", 1, node="b", token=b, state="lost", error="x") is False
    expire_lease(store, "a")
    assert [n.name for n in store.expired_nodes()] == ["a"]
    assert (
        store.reclaim(
            "backup-000001", 1, node="b", token=b, state="lost", error="node a died mid-run; the job is unsafe"
        )
        is True
    )
    assert store.get_run("backup-000001").state == "lost"
    assert store.attempts("backup-000001")[0].state == "lost"


def test_reclaim_into_retry_wait_makes_a_new_attempt_possible(store):
    old = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", old, None)
    new = acquire(store)
    assert (
        store.reclaim(
            "backup-000001",
            1,
            node="n1",
            token=new,
            state="retry_wait",
            error="the daemon restarted and the process was gone",
        )
        is True
    )
    assert store.dispatch("backup-000001", "n1", new, None).attempts == 2


# --- settle, cancel, queries -----------------------------------------------------------------


def test_settle_records_a_skip_and_the_next_occurrence_together(store):
    store.insert_runs([run(1)])
    assert store.settle("backup-000001", "skipped_paused", error="paused: maintenance", next_run=run(2)) is True
    assert store.settle("backup-000001", "skipped_paused", error="again", next_run=run(3)) is False
    skipped = store.get_run("backup-000001")
    assert (skipped.state, skipped.error) == ("skipped_paused", "paused: maintenance")
    assert skipped.finished_at is not None
    assert [r.run_id for r in store.pending()] == ["backup-000002"]


def test_settle_with_a_stale_token_is_rejected(store):
    old = acquire(store)
    acquire(store)
    store.insert_runs([run(1)])
    assert store.settle("backup-000001", "skipped_overlap", error="x", next_run=None, node="n1", token=old) is False
    assert store.stale_rejections == 1 and store.get_run("backup-000001").state == "pending"


def test_running_lists_runs_held_by_a_node(store):
    token = acquire(store)
    store.insert_runs([run(1), run(2)])
    store.dispatch("backup-000001", "n1", token, None)
    assert [r.run_id for r in store.running()] == ["backup-000001"]
    assert [r.run_id for r in store.running("n1")] == ["backup-000001"]
    assert store.running("elsewhere") == []


def test_runs_filters_by_job_window_and_state(store):
    store.insert_runs([run(i) for i in range(10)] + [run(i, job="other") for i in range(10)])
    store.settle("backup-000004", "skipped_outage", error="down", next_run=None)
    got = store.runs("backup", since=T0 + timedelta(minutes=2), until=T0 + timedelta(minutes=6))
    assert [r.run_id for r in got] == ["backup-000005", "backup-000004", "backup-000003", "backup-000002"]
    oldest = store.runs("backup", newest_first=False, limit=2)
    assert [r.run_id for r in oldest] == ["backup-000000", "backup-000001"]
    assert [r.run_id for r in store.runs("backup", states=["skipped_outage"])] == ["backup-000004"]
    assert len(store.runs()) == 20


def test_delete_run_removes_its_attempts(store):
    token = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", token, None)
    assert store.delete_run("backup-000001") is True
    assert store.get_run("backup-000001") is None and store.attempts("backup-000001") == []


# --- nodes ----------------------------------------------------------------------------------


def test_tokens_grow_on_every_acquisition_and_leases_renew(store):
    first = acquire(store)
    second = acquire(store)
    assert second > first
    assert store.renew_lease("n1", first, 60) is False
    assert store.renew_lease("n1", second, 60) is True
    [node] = store.nodes()
    assert (node.name, node.token, node.pid, node.hostname) == ("n1", second, os.getpid(), HOST)
    assert node.lease_expires_at > node.heartbeat_at
    store.set_node_info("n1", second, {"jobs": 3})
    assert store.nodes()[0].info == {"jobs": 3}
    store.release_node("n1", second)
    assert store.nodes()[0].stopped_at is not None and store.expired_nodes() == []


def test_sqlite_refuses_a_second_live_chronod(store):
    if store.dialect != "sqlite":
        pytest.skip("a fleet shares PostgreSQL")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        store.acquire_node("first", pid=sleeper.pid, hostname=HOST, boot_id=BOOT, ttl_s=60)
        with pytest.raises(NodeConflict) as err:
            acquire(store, "second")
        message = str(err.value)
        assert f"another chronod (pid {sleeper.pid}, node first) is using this database since" in message
        assert "SQLite supports one node" in message and "PostgreSQL" in message
        with pytest.raises(NodeConflict):
            acquire(store, "first")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert acquire(store, "second") > 0


def test_sqlite_takes_over_from_a_chronod_that_died_or_whose_host_rebooted(store):
    if store.dialect != "sqlite":
        pytest.skip("a fleet shares PostgreSQL")
    store.acquire_node("old", pid=os.getpid(), hostname=HOST, boot_id="an-earlier-boot", ttl_s=60)
    assert acquire(store, "new") > 0


def test_sqlite_takes_over_from_a_zombie_or_a_pid_now_held_by_another_process(store):
    """A holder is judged by pid, process start time and boot id: its unreaped zombie is
    dead, and a live process the kernel gave its pid to since is not the old chronod."""
    if store.dialect != "sqlite":
        pytest.skip("a fleet shares PostgreSQL")
    ended = subprocess.Popen(["true"])  # not waited for: a zombie until the end of the test
    wait_until(lambda: fsutil.process_start(ended.pid) is None, what="the child to end")
    assert fsutil.pid_alive(ended.pid), "a zombie still answers kill -0"
    store.acquire_node("zombie", pid=ended.pid, pid_start=1, hostname=HOST, boot_id=BOOT, ttl_s=60)
    store.release_node("after-zombie", acquire(store, "after-zombie"))
    ended.wait()
    mine = fsutil.process_start(os.getpid())
    assert mine is not None
    store.acquire_node("reused", pid=os.getpid(), pid_start=mine - 1, hostname=HOST, boot_id=BOOT, ttl_s=60)
    store.release_node("after-reuse", acquire(store, "after-reuse"))
    store.acquire_node("alive", pid=os.getpid(), pid_start=mine, hostname=HOST, boot_id=BOOT, ttl_s=60)
    with pytest.raises(NodeConflict):
        acquire(store, "second")


def test_postgres_lets_distinct_nodes_share_the_database(store):
    if store.dialect == "sqlite":
        pytest.skip("one node per SQLite database")
    assert acquire(store, "a") != acquire(store, "b")
    assert {n.name for n in store.nodes()} == {"a", "b"}


# --- job definitions -----------------------------------------------------------------------------


def test_sync_jobs_upserts_and_round_trips_the_spec(store):
    store.sync_jobs("n1", [spec("backup", "tar czf /b.tgz /etc"), spec("rotate")])
    row = store.get_job("backup")
    assert row.spec == spec("backup", "tar czf /b.tgz /etc") and row.node == "n1"
    assert row.spec_hash == spec("backup", "tar czf /b.tgz /etc").spec_hash()
    store.sync_jobs("n1", [spec("backup", "tar cJf /b.txz /etc"), spec("rotate")])
    assert store.get_job("backup").spec.command == "tar cJf /b.txz /etc"


def test_jobs_hands_back_a_known_spec_with_the_stored_hash_and_parses_the_others(store):
    held, changed = spec("backup"), spec("rotate", "logrotate -f")
    store.sync_jobs("n1", [held, spec("rotate")])
    rows = {r.job_id: r for r in store.jobs(known={"backup": held, "rotate": changed})}
    assert rows["backup"].spec is held
    assert rows["rotate"].spec is not changed and rows["rotate"].spec == spec("rotate")
    assert [r.spec for r in store.jobs()] == [held, spec("rotate")]


def test_a_removed_jobs_run_waiting_for_its_retry_keeps_its_last_attempts_outcome(store):
    token = acquire(store)
    store.sync_jobs("n1", [spec("backup")])
    store.insert_runs([run(1), run(2), run(3)])
    store.dispatch("backup-000001", "n1", token, None)
    store.schedule_retry(
        "backup-000001", 1, T0 + timedelta(minutes=5), exit_code=3, signal=None, error="exit code 3", token=token
    )
    store.dispatch("backup-000002", "n1", token, None)
    store.schedule_retry(
        "backup-000002",
        1,
        T0 + timedelta(minutes=5),
        exit_code=None,
        signal=9,
        error="killed after its timeout",
        token=token,
        attempt_state="timed_out",
    )
    store.sync_jobs("n1", [])
    failed, timed_out, never = (store.get_run(f"backup-00000{n}") for n in (1, 2, 3))
    assert (failed.state, failed.error, failed.next_attempt_at) == (
        "failed",
        "exit code 3; retry 2 not started: job removed from the registry",
        None,
    )
    assert failed.finished_at is not None
    assert (timed_out.state, timed_out.error) == (
        "timed_out",
        "killed after its timeout; retry 2 not started: job removed from the registry",
    )
    assert (never.state, never.error) == ("cancelled", "job removed from the registry")
    assert store.pending() == []


def test_an_unchanged_job_is_not_rewritten_by_a_second_sync(store):
    held = spec("backup")
    store.sync_jobs("n1", [held])
    first = store.get_job("backup").updated_at
    store.sync_jobs("n1", [held])
    store.sync_jobs("n1", [spec("backup")])
    assert store.get_job("backup").updated_at == first
    store.sync_jobs("n1", [spec("backup", "false")])
    assert store.get_job("backup").spec.command == "false"


def test_a_job_removed_from_the_registry_is_marked_and_its_pending_runs_cancelled(store):
    store.sync_jobs("n1", [spec("backup"), spec("rotate")])
    store.insert_runs([run(1), run(2, job="rotate")])
    store.sync_jobs("n1", [spec("rotate")])
    assert [j.job_id for j in store.jobs()] == ["rotate"]
    assert store.get_job("backup").removed_at is not None
    assert [j.job_id for j in store.jobs(include_removed=True)] == ["backup", "rotate"]
    gone = store.get_run("backup-000001")
    assert (gone.state, gone.error) == ("cancelled", "job removed from the registry")
    assert store.get_run("rotate-000002").state == "pending"
    store.sync_jobs("n1", [spec("backup"), spec("rotate")])
    assert store.get_job("backup").removed_at is None


def test_a_removal_records_in_the_same_write_what_fell_due_after_the_stored_occurrence(store):
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    ahead = Run(run_id="later-1", job_id="later", job_key="later", scheduled_at=soon, fire_at=soon, state="pending")
    store.sync_jobs("n1", [spec("backup"), spec("later"), spec("rotate")])
    store.insert_runs([run(1), run(2), ahead, run(1, job="rotate")])
    asked = []

    def fell_due(job: JobSpec, after: datetime, now: datetime) -> list[Run]:
        asked.append((job.id, job.command, after))
        unrun = run(3)
        unrun.state, unrun.error, unrun.finished_at = "cancelled", "removed; it fell due while down", now
        return [unrun]

    def fails(job: JobSpec, after: datetime, now: datetime) -> list[Run]:
        raise RuntimeError("cannot say")

    with pytest.raises(RuntimeError):
        store.sync_jobs("n1", [spec("rotate")], fails)
    assert store.get_job("backup").removed_at is None  # nothing of that removal was written
    assert store.get_run("backup-000002").state == "pending"
    store.sync_jobs("n1", [spec("rotate")], fell_due)
    # asked once, from the latest stored occurrence that fell due; `later`'s is yet to
    assert asked == [("backup", "true", T0 + timedelta(minutes=2))]
    assert [(r.run_id, r.state, r.error) for r in store.runs("backup", newest_first=False)] == [
        ("backup-000001", "cancelled", "job removed from the registry"),
        ("backup-000002", "cancelled", "job removed from the registry"),
        ("backup-000003", "cancelled", "removed; it fell due while down"),
    ]
    assert store.get_run("later-1").state == "cancelled" and store.get_run("rotate-000001").state == "pending"


def test_the_store_records_when_each_job_was_known_from_registration_to_removal(store):
    before = datetime.now(timezone.utc) - timedelta(seconds=5)
    store.sync_jobs("n1", [spec("backup"), spec("rotate")])
    store.sync_jobs("n1", [spec("backup", "edited"), spec("rotate")])  # an edit is not a new registration
    spans = store.known_spans(["backup", "rotate", "never"])
    assert set(spans) == {"backup", "rotate"}
    ((start, end),) = spans["backup"]
    assert before < start <= datetime.now(timezone.utc) + timedelta(seconds=5) and end is None
    store.sync_jobs("n1", [spec("rotate")])
    ((start2, removed),) = store.known_spans(["backup"])["backup"]
    assert start2 == start and removed is not None and removed >= start
    store.sync_jobs("n1", [spec("backup"), spec("rotate")])
    first, again = store.known_spans()["backup"]
    assert first == (start, removed) and again[0] >= removed and again[1] is None
    assert store.known_spans(["rotate"])["rotate"] == spans["rotate"]


def test_sync_jobs_leaves_jobs_written_by_other_nodes_alone(store):
    store.sync_jobs("a", [spec("backup")])
    store.sync_jobs("b", [spec("rotate")])
    assert {j.job_id for j in store.jobs()} == {"backup", "rotate"}


def test_pause_and_resume_keep_the_reason_and_survive_a_sync(store):
    store.sync_jobs("n1", [spec("backup")])
    assert store.set_paused("backup", True, "disk replacement") is True
    store.sync_jobs("n1", [spec("backup", "other")])
    row = store.get_job("backup")
    assert (row.paused, row.paused_reason) == (True, "disk replacement") and row.paused_at is not None
    assert store.paused_jobs() == {"backup": "disk replacement"}
    assert store.set_paused("backup", False, None) is True
    assert store.get_job("backup").paused is False and store.paused_jobs() == {}
    assert store.set_paused("nope", True, "x") is False


def test_a_pause_keeps_who_and_until_when_and_is_over_by_itself_at_its_end(store):
    store.sync_jobs("n1", [spec("backup"), spec("rotate")])
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    assert store.set_paused("backup", True, "disk swap", by="alice", until=soon) is True
    store.set_group_pause("tag", "db", "INC-4 replica lag", by="bob")
    store.set_group_pause("resource", "pg", "gone", until=datetime.now(timezone.utc) - timedelta(seconds=1))
    got = {(p.kind, p.target): p for p in store.pauses()}
    assert set(got) == {("job", "backup"), ("tag", "db")}  # the resource pause has ended
    assert (got["job", "backup"].by, got["job", "backup"].until) == ("alice", soon)
    assert (got["tag", "db"].reason, got["tag", "db"].by, got["tag", "db"].until) == ("INC-4 replica lag", "bob", None)
    row = store.get_job("backup")
    assert (row.paused, row.paused_by, row.paused_until) == (True, "alice", soon)
    store.set_group_pause("tag", "db", "again", by="carol")  # replaces the earlier pause of the tag
    assert [p.reason for p in store.pauses() if p.kind == "tag"] == ["again"]
    assert store.clear_group_pause("tag", "db") is True and store.clear_group_pause("tag", "db") is False
    store.set_paused("rotate", True, "old", until=datetime.now(timezone.utc) - timedelta(seconds=1))
    assert store.get_job("rotate").paused is False and "rotate" not in store.paused_jobs()


# --- requests, job state, registry errors -------------------------------------------------------


def test_each_request_is_taken_by_exactly_one_node(store):
    first = store.add_request("trigger", "backup", {"by": "alice"})
    second = store.add_request("reload", None, {})
    taken = store.take_requests("n1")
    assert [(r.id, r.kind, r.job_id, r.payload) for r in taken] == [
        (first, "trigger", "backup", {"by": "alice"}),
        (second, "reload", None, {}),
    ]
    assert taken[0].created_at.tzinfo == timezone.utc
    assert store.take_requests("n2") == []


def test_job_state_is_replaced_whole(store):
    assert store.get_job_state("backup@n1") == {}
    store.set_job_state("backup@n1", {"boot_id": "b1", "notified": "failed"})
    store.set_job_state("backup@n1", {"boot_id": "b2"})
    assert store.get_job_state("backup@n1") == {"boot_id": "b2"}


def test_registry_errors_are_replaced_per_node(store):
    store.set_registry_errors("a", [{"file": "/etc/chrono/jobs.d/x.yaml", "line": 3, "message": "bad"}])
    store.set_registry_errors("b", [{"file": "y.yaml", "line": None, "message": "worse"}])
    store.set_registry_errors("a", [])
    [only] = store.registry_errors()
    assert (only["node"], only["file"], only["line"], only["message"]) == ("b", "y.yaml", None, "worse")
    assert only["at"].tzinfo == timezone.utc


def test_late_names_the_pending_scheduled_any_occurrences_past_a_time_and_when_the_next_falls_due(store):
    """A fleet's rescue asks in one read which occurrences are late: pending, scheduled,
    of an `any` job (its key is its id), fire time at or before the bound and not held
    past it; oldest first, at most `limit`; and the next such fire time after it."""
    each = dataclasses.replace(run(1, job="each"), run_id="each@n2-000001", job_key="each@n2")
    retry = dataclasses.replace(run(2, job="retrying"), state="retry_wait", attempts=1)
    manual = dataclasses.replace(run(3, job="manual"), trigger="manual")
    held = dataclasses.replace(run(4, job="held"), next_attempt_at=T0 + timedelta(hours=1))
    held_until_then = dataclasses.replace(run(5, job="released"), next_attempt_at=T0 + timedelta(minutes=5))
    done = run(6, job="done", state="succeeded")
    store.insert_runs([run(8), run(7, job="rotate"), run(30, job="later"), run(20, job="soon")])
    store.insert_runs([each, retry, manual, held, held_until_then, done])
    bound = T0 + timedelta(minutes=10)
    late, upcoming = store.late(bound, 10)
    assert [r.run_id for r in late] == ["released-000005", "rotate-000007", "backup-000008"]
    assert upcoming == run(20, job="soon").fire_at and upcoming.utcoffset() == timedelta(0)
    assert late[1].fire_at == run(7).fire_at and late[1].state == "pending"
    assert [r.run_id for r in store.late(bound, 2)[0]] == ["released-000005", "rotate-000007"]
    assert store.late(T0, 10) == ([], run(4).fire_at)  # a held one too: looking early costs a read
    assert store.late(T0 + timedelta(days=1), 10)[1] is None


def test_late_follows_each_run_as_it_is_claimed_ended_revived_held_or_opened_by_a_backfill(store):
    """`late` answers from the runs as they are now: a run claimed, waiting for its retry,
    cancelled, held by a window until after the bound, or opened again by a backfill is not
    late; a cancelled one revived is again; an `each` job's run never is."""
    token = acquire(store)
    each = dataclasses.replace(run(1, job="each"), run_id="each@n1-000001", job_key="each@n1")
    store.insert_runs([run(i) for i in range(6)] + [each])
    bound = T0 + timedelta(hours=1)

    def late(at: datetime = bound, limit: int = 10) -> tuple[list[str], datetime | None]:
        found, upcoming = store.late(at, limit)
        return [r.run_id for r in found], upcoming

    assert late() == ([f"backup-{i:06d}" for i in range(6)], None)
    assert store.dispatch("backup-000000", "n1", token, None) is not None
    assert late()[0][0] == "backup-000001"
    assert store.schedule_retry(
        "backup-000000", 1, T0 + timedelta(minutes=5), exit_code=1, signal=None, error="exit 1", token=token
    )
    assert store.settle("backup-000001", "cancelled", error="removed", next_run=None) is True
    assert store.note_held(["backup-000002"], "window", T0 + timedelta(hours=2), node="n1", token=token) == 1
    assert store.dispatch("backup-000003", "n1", token, None) is not None
    assert finish_ok(store, "backup-000003", 1, token)
    three = run(3)
    backfill = store.add_backfill(
        "backup",
        from_at=T0,
        to_at=bound,
        only="all",
        max_concurrency=1,
        allow_unsafe=False,
        reason=None,
        requested_by="ops",
        items=[(three.run_id, "backup", three.scheduled_at, three.fire_at)],
    )
    assert store.open_backfill_run(backfill, 0, three) is not None
    assert late() == (["backup-000004", "backup-000005"], None)
    assert store.revive(["backup-000001"]) == 1
    store.insert_runs([run(90)])
    assert late() == (["backup-000001", "backup-000004", "backup-000005"], run(90).fire_at)
    assert late(limit=1) == (["backup-000001"], run(90).fire_at)
    assert late(T0 + timedelta(hours=3)) == (
        ["backup-000001", "backup-000002", "backup-000004", "backup-000005", "backup-000090"],
        None,
    )


def test_pending_of_many_job_keys_reads_every_field_as_a_few_keys_do(store):
    """Past 500 keys the store reads every waiting run at once (the daemon's start-up):
    the same runs, every field equal (aware UTC datetimes, None kept), in fire order."""
    runs = [run(i, job=f"job{i:04d}") for i in range(600)]
    retry = dataclasses.replace(
        run(700, job="job0001"),
        state="retry_wait",
        attempts=2,
        node="n1",
        started_at=T0 + timedelta(seconds=1, microseconds=250),
        finished_at=T0 + timedelta(seconds=9),
        next_attempt_at=T0 + timedelta(hours=2),
        exit_code=3,
        error="boom",
        trigger="manual",
    )
    store.insert_runs([*runs, retry, run(800, job="job0002", state="succeeded")])
    keys = [f"job{i:04d}" for i in range(0, 600, 1)]
    many = store.pending(keys)
    few = sorted(
        (r for chunk in (keys[n : n + 100] for n in range(0, 600, 100)) for r in store.pending(chunk)),
        key=lambda r: (r.fire_at, r.run_id),
    )
    assert len(many) == 601 and [r.as_dict() for r in many] == [r.as_dict() for r in few]
    got = next(r for r in many if r.run_id == retry.run_id)
    for name in ("scheduled_at", "fire_at", "started_at", "finished_at", "next_attempt_at"):
        assert getattr(got, name) == getattr(retry, name) and getattr(got, name).utcoffset() == timedelta(0)
    assert (got.state, got.attempts, got.error, got.trigger, got.pid) == ("retry_wait", 2, "boom", "manual", None)
    assert [r.run_id for r in many] == [r.run_id for r in sorted(many, key=lambda r: (r.fire_at, r.run_id))]


def test_pending_soon_and_its_later_pages_are_every_waiting_run(store):
    """A warm start reads the waiting runs but the scheduled ones firing after a bound, and
    the job keys of those; after READY it reads those in pages by (fire time, run id): the
    two together are `pending()`, every field equal, with none twice (ties of fire time
    cut between pages included)."""
    tied = [dataclasses.replace(run(40, job=f"tie{j}"), run_id=f"tie{j}-000040") for j in range(5)]
    retry = dataclasses.replace(run(90, job="retrying"), state="retry_wait", attempts=1)  # fires later: read soon
    manual = dataclasses.replace(run(95, job="manual"), trigger="manual")
    each = dataclasses.replace(run(60, job="each"), run_id="each@n2-000060", job_key="each@n2")
    store.insert_runs([run(i, job=f"job{i:02d}") for i in range(0, 80, 3)])
    store.insert_runs([*tied, retry, manual, each, run(50, job="done", state="succeeded")])
    bound = run(20).fire_at
    soon, keys = store.pending_soon(bound)
    assert [r.run_id for r in soon] == [
        *(f"job{i:02d}-{i:06d}" for i in range(0, 21, 3)),
        "retrying-000090",
        "manual-000095",
    ]
    pages, after = [], None
    while True:
        page = store.pending_later(bound, after, 4)
        pages.append(page)
        if len(page) < 4:
            break
        after = (page[-1].fire_at, page[-1].run_id)
    later = [r for page in pages for r in page]
    assert [len(page) for page in pages] == [4, 4, 4, 4, 4, 4, 2]
    assert keys == {r.job_key for r in later} and "each@n2" in keys and len(later) == 26
    every = store.pending()
    together = sorted([*soon, *later], key=lambda r: (r.fire_at, r.run_id))
    assert [r.as_dict() for r in together] == [r.as_dict() for r in every]
    assert all(r.fire_at.utcoffset() == timedelta(0) for r in together)
    assert store.pending_later(bound, (later[-1].fire_at, later[-1].run_id), 4) == []
    assert store.pending_soon(T0 + timedelta(days=1)) == (every, set())


def test_registry_files_are_kept_per_node_and_replaced_or_forgotten_per_path(store):
    """A node's validated job files (key and result, opaque bytes) outlive the process: a
    restart reads them back exactly, per node; None forgets a path, others stay."""
    assert store.registry_files("a") == {}
    blob = bytes(range(256)) * 40  # any bytes, NUL included
    store.set_registry_files(
        "a", {"/etc/chrono/jobs.d/x.yaml": ("k1", blob), "/etc/chrono/jobs.d/y.yaml": ("k2", b"y")}
    )
    store.set_registry_files("b", {"/etc/chrono/jobs.d/x.yaml": ("other", b"b")})
    store.set_registry_files("a", {"/etc/chrono/jobs.d/x.yaml": ("k3", b"new"), "/etc/chrono/jobs.d/y.yaml": None})
    assert store.registry_files("a") == {"/etc/chrono/jobs.d/x.yaml": ("k3", b"new")}
    assert store.registry_files("b") == {"/etc/chrono/jobs.d/x.yaml": ("other", b"b")}
    store.set_registry_files("a", {"/etc/chrono/jobs.d/z.yaml": ("k4", blob)})
    assert store.registry_files("a") == {
        "/etc/chrono/jobs.d/x.yaml": ("k3", b"new"),
        "/etc/chrono/jobs.d/z.yaml": ("k4", blob),
    }
    store.set_registry_files("a", {})  # nothing to write: nothing changes
    assert set(store.registry_files("a")) == {"/etc/chrono/jobs.d/x.yaml", "/etc/chrono/jobs.d/z.yaml"}


def test_metrics_count_runs_by_state(store):
    store.sync_jobs("n1", [spec("backup")])
    store.insert_runs([run(1), run(2), run(3, state="skipped_outage")])
    m = store.metrics()
    assert m["runs_by_state"] == {"pending": 2, "skipped_outage": 1}
    assert (m["jobs"], m["paused_jobs"], m["stale_rejections"]) == (1, 0, 0)


# --- the query plan behind `runs()` --------------------------------------------------------------


def test_runs_by_job_and_window_uses_the_job_time_index(store):
    sql_only(store, "a query plan")
    store.insert_runs([run(i, job=f"job{j:02d}") for j in range(20) for i in range(100)])
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE runs" if store.dialect == "postgresql" else "ANALYZE")
    q = store.runs_query("job07", since=T0, until=T0 + timedelta(days=1), limit=50)
    with store.engine.connect() as conn:
        if store.dialect == "sqlite":
            sql = str(q.compile(conn, compile_kwargs={"literal_binds": True}))
            plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
        else:
            conn.exec_driver_sql("SET enable_seqscan = off")
            sql = str(q.compile(conn, compile_kwargs={"literal_binds": True}))
            plan = " ".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {sql}"))
        conn.rollback()
    assert "ix_runs_job_id_scheduled_at" in plan, plan


def test_the_look_for_late_occurrences_reads_the_pending_runs_by_fire_time_not_every_run(store):
    """A fleet's node asks a few times a second which occurrences are late (Store.late):
    both its reads go through the partial index of pending runs by fire time."""
    from chronod.store.sql_occurrences import late_queries

    sql_only(store, "a query plan")
    done = [run(i, job=f"job{j:02d}", state="succeeded") for j in range(20) for i in range(100)]
    waiting = [
        run(i, job=f"job{j:02d}") for j in range(20) for i in range(170, 270)
    ]  # 10 minutes late, the rest due later
    store.insert_runs([*done, *waiting])
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE runs" if store.dialect == "postgresql" else "ANALYZE")
    for q in late_queries(T0 + timedelta(hours=3), 1000):
        with store.engine.connect() as conn:
            sql = str(q.compile(conn, compile_kwargs={"literal_binds": True}))
            if store.dialect == "sqlite":
                plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
            else:
                conn.exec_driver_sql("SET enable_seqscan = off")
                plan = " ".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {sql}"))
            conn.rollback()
        assert "ix_runs_pending_fire_at" in plan, plan


def test_the_stored_spec_json_and_hash_match_the_models_own():
    import dataclasses
    import json

    from chronod.core.model import Notify, Retry, RunOn
    from chronod.store.sql import spec_json_and_hash

    rich = JobSpec(
        id="rich",
        owner="ops",
        schedule="0 3 * * *",
        command=("/usr/bin/backup", "--all"),
        idempotency_class="keyed",
        retry=Retry(attempts=3, backoff_s=5),
        run_on=RunOn("any", ("web-*",)),
        env=(("A", "1"), ("B", "2")),
        notify=(Notify(on=("failed", "lost"), command=("page", "ops")),),
        tags=("compliance",),
        max_silence_s=90000,
        source_file="/etc/chrono/jobs.d/a.yaml",
        source_line=7,
    )
    odd = JobSpec(
        id="odd",
        owner="ops",
        schedule="@hourly",
        command='echo "source_file": x',
        idempotency_class="unsafe",
        env=(("source_file", "a.yaml"),),
        source_file='we"ird.yaml',
    )
    for one in (rich, spec("plain"), odd):
        own = dataclasses.replace(one).spec_hash()  # a copy: the call below memoizes its digest in `one`
        text, digest = spec_json_and_hash(one)
        assert json.loads(text) == json.loads(json.dumps(one.to_json_dict()))
        assert digest == own == one.spec_hash()
        assert JobSpec.from_json_dict(json.loads(text)) == one


def test_threads_of_one_daemon_claim_each_run_once(store):
    token = acquire(store)
    store.insert_runs([run(i) for i in range(60)])
    won: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for i in range(60):
            got = store.dispatch(f"backup-{i:06d}", "n1", token, None)
            if got is not None:
                with lock:
                    won.append(got.run_id)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [f"backup-{i:06d}" for i in range(60)]


def upgrade_in_three_processes(url: str) -> None:
    import sys

    code = "import sys; from chronod.store.sql import SqlStore; s = SqlStore(sys.argv[1]); s.upgrade(); s.close()"
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE) for _ in range(3)]
    results = [(p.wait(timeout=60), p.stderr.read().decode()) for p in procs]
    assert [rc for rc, _ in results] == [0, 0, 0], results
    st = SqlStore(url)
    try:
        assert st.schema_revision() == schema.HEAD_REVISION
    finally:
        st.close()


def test_concurrent_upgrades_of_a_new_sqlite_database_all_succeed(tmp_path):
    upgrade_in_three_processes(str(tmp_path / "race.db"))


@pytest.mark.postgres
def test_concurrent_upgrades_of_a_new_postgres_database_all_succeed(new_pg_database):
    upgrade_in_three_processes(new_pg_database(migrated=False))


def test_a_database_directory_that_cannot_be_created_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match=f"cannot create {blocker}"):
        SqlStore(str(blocker / "sub" / "chrono.db"))


def test_run_marks_give_each_run_of_the_window_with_its_aware_utc_time(store):
    store.insert_runs([run(i) for i in range(5)] + [run(i, job="other", state="succeeded") for i in range(2, 7)])
    marks = store.run_marks(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=4))
    full = store.runs(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=4))
    assert sorted(marks) == sorted((r.run_id, r.job_id, r.job_key, r.scheduled_at, r.state, r.trigger) for r in full)
    assert len(marks) == 5 and all(m[3].utcoffset() == timedelta(0) for m in marks)
    assert {m[3] for m in marks} == {T0 + timedelta(minutes=i) for i in (1, 2, 3)}


def test_a_removed_jobs_pause_is_shown_to_the_daemon_only(store):
    """The daemon reads pauses with include_removed: a reload prepared beside its loop marks
    the job removed before the loop lets the job go, and the pause must hold until then."""
    store.sync_jobs("n1", [spec("backup"), spec("rotate")])
    store.set_paused("backup", True, "disk swap", by="alice")
    store.sync_jobs("n1", [spec("rotate")])
    assert [p.target for p in store.pauses()] == []
    assert [(p.kind, p.target) for p in store.pauses(include_removed=True)] == [("job", "backup")]


def test_run_marks_are_utc_whatever_the_sessions_time_zone(store):
    """PostgreSQL hands timestamptz back in the session's zone: marks are read in UTC."""
    sql_only(store, "a PostgreSQL session's time zone")
    if store.dialect != "postgresql":
        pytest.skip("SQLite keeps naive UTC text")
    store.insert_runs([run(i) for i in range(3)])
    with store.engine.connect() as c:  # the pool hands this session out again
        c.exec_driver_sql("SET TIME ZONE 'America/New_York'")
        c.commit()
    marks = store.run_marks(since=T0, until=T0 + timedelta(minutes=3))
    assert len(marks) == 3 and all(m.scheduled_at.utcoffset() == timedelta(0) for m in marks)
    assert {m.scheduled_at for m in marks} == {T0 + timedelta(minutes=i) for i in range(3)}


def test_a_late_result_of_an_attempt_settled_lost_is_kept_next_to_the_lost(store):
    """An outcome that arrives after its attempt was settled `lost` is stored as what
    happened: added to the attempt's (and the run's) error, the state stays `lost`, once."""
    old = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", old, None)
    new = acquire(store)
    assert store.reclaim("backup-000001", 1, node="n1", token=new, state="lost", error="outcome unknown")
    late = "late result, after this attempt was settled lost: succeeded (exit code 0)"
    assert store.note_late_outcome("backup-000001", 1, late) is True
    assert store.note_late_outcome("backup-000001", 1, late) is False  # once
    got = store.get_run("backup-000001")
    assert got is not None and got.state == "lost" and got.error == f"outcome unknown; {late}"
    (attempt,) = store.attempts("backup-000001")
    assert attempt.state == "lost" and attempt.error == f"outcome unknown; {late}"


def test_a_late_result_never_touches_an_attempt_that_was_not_lost(store):
    tok = acquire(store)
    store.insert_runs([run(1)])
    store.dispatch("backup-000001", "n1", tok, None)
    assert store.note_late_outcome("backup-000001", 1, "late result") is False
    assert store.note_late_outcome("backup-000001", 7, "late result") is False


def test_a_run_started_offline_before_its_job_was_removed_is_claimed_not_left_cancelled(store):
    """An `each` job's occurrence ran while the database was unreachable; chronod died, and
    the next start read the job removed and cancelled the occurrence before it replayed
    the spool. The spooled start outranks that cancel, which came after it: the run is
    claimed at its real start. One that started after the cancel, or a stale node, is not."""
    token = acquire(store)
    store.sync_jobs("n1", [spec("backup")])
    store.insert_runs([run(1), run(2)])
    store.sync_jobs("n1", [])  # removed: its occurrences not yet started are cancelled
    assert store.get_run("backup-000001").state == "cancelled"
    ran = run(1)
    ran.state, ran.attempts, ran.node, ran.started_at = "running", 1, "n1", T0 + timedelta(seconds=9)
    assert store.claim_offline(ran, "n1", token + 100) is None  # a stale token reopens nothing
    assert store.get_run("backup-000001").state == "cancelled"
    claimed = store.claim_offline(ran, "n1", token)
    assert claimed is not None and claimed.attempts == 1 and claimed.started_at == T0 + timedelta(seconds=9)
    assert store.get_run("backup-000001").state == "running" and store.get_run("backup-000001").error is None
    later = run(2)
    later.state, later.attempts, later.node = "running", 1, "n1"
    later.started_at = datetime.now(timezone.utc) + timedelta(hours=1)  # after the cancel
    assert store.claim_offline(later, "n1", token) is None
    assert store.get_run("backup-000002").state == "cancelled"
