"""One fencing predicate: batch writes (PostgreSQL's one-statement batches among them) are
refused under a stale token, and they ask the same lease-live predicate as every other
fenced write."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from chronod.store import pgbatch, schema
from chronod.store.api import Ending, Run
from chronod.store.sql import SqlStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def run(i: int) -> Run:
    at = T0 + timedelta(minutes=i)
    return Run(run_id=f"fence-{i:06d}", job_id="fence", job_key="fence", scheduled_at=at, fire_at=at)


def acquire(store, name: str = "n1") -> int:
    return store.acquire_node(name, pid=os.getpid(), hostname="host-a", boot_id="boot-1", ttl_s=60.0)


def expire_lease(store, name: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            schema.nodes.update()
            .where(schema.nodes.c.name == name)
            .values(lease_expires_at=datetime.now(timezone.utc) - timedelta(seconds=5))
        )


def running(store, token: int, n: int) -> list[str]:
    ids = [f"fence-{i:06d}" for i in range(1, n + 1)]
    store.insert_runs([run(i) for i in range(1, n + 1)])
    for rid in ids:
        assert store.dispatch(rid, "n1", token, None) is not None
    return ids


@pytest.fixture
def batches(store, monkeypatch):
    """How many writes went through PostgreSQL's batch statements (`pgbatch`)."""
    calls = {"set_processes": 0, "finish_many": 0}
    for name in calls:
        real = getattr(pgbatch, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(pgbatch, name, counted)
    return calls


def test_a_batch_under_a_superseded_token_is_refused_and_counted(store, batches):
    old = acquire(store)
    ids = running(store, old, 3)
    store.release_node("n1", old)
    new = acquire(store)  # the node came back: its old token is no lease any more
    assert new > old
    assert store.set_processes([(rid, 1, 10, 20) for rid in ids], old) == set()
    assert store.finish_many([Ending(rid, 1, "succeeded", exit_code=0) for rid in ids], old) == set()
    assert store.stale_rejections == 6
    assert {(r.state, r.pid) for r in map(store.get_run, ids)} == {("running", None)}
    assert [a.state for rid in ids for a in store.attempts(rid)] == ["running"] * 3
    if store.dialect == "postgresql":
        assert batches == {"set_processes": 1, "finish_many": 1}  # the batch statements were the ones asked


def test_a_batch_under_a_live_token_is_written_through_the_batch_statements(store, batches):
    token = acquire(store)
    ids = running(store, token, 3)
    assert store.set_processes([(rid, 1, 10, 20) for rid in ids], token) == set(ids)
    assert store.finish_many([Ending(rid, 1, "succeeded", exit_code=0) for rid in ids], token) == set(ids)
    assert store.stale_rejections == 0
    if store.dialect == "postgresql":
        assert batches == {"set_processes": 1, "finish_many": 1}


def test_every_fenced_write_asks_the_one_lease_live_predicate(store, monkeypatch):
    """Replace the store's predicate by one that forgets lease expiry: a batch or a claim
    under a lapsed lease is then accepted on both databases, PostgreSQL's batch statements
    and its claim built in advance too, which shows they have no predicate of their own."""
    if not isinstance(store, SqlStore):
        pytest.skip("the fencing predicate of the SQL store")
    token = acquire(store)
    ids = running(store, token, 4)
    expire_lease(store, "n1")
    assert store.finish_many([Ending(ids[0], 1, "succeeded"), Ending(ids[1], 1, "succeeded")], token) == set()

    def token_only(self, token, node=None):
        n = schema.nodes.c
        cond = [n.token == token, n.stopped_at.is_(None)]
        if node is not None:
            cond.append(n.name == node)
        return sa.exists().where(*cond)

    store.insert_runs([run(5)])
    assert store.dispatch("fence-000005", "n1", token, None) is None  # a claim under the lapsed lease
    monkeypatch.setattr(SqlStore, "_lease_live", token_only)
    assert store.set_processes([(rid, 1, 10, 20) for rid in ids[2:]], token) == set(ids[2:])
    assert store.finish_many([Ending(rid, 1, "succeeded") for rid in ids[2:]], token) == set(ids[2:])
    assert [store.get_run(rid).state for rid in ids] == ["running", "running", "succeeded", "succeeded"]
    # the claim too, though PostgreSQL's statement for it was built before the predicate changed
    assert store.dispatch("fence-000005", "n1", token, None) is not None
