"""What the store hands out and takes in are copies, on every backend: a caller that
mutates a run, an attempt, a node or a job row it was given, or a run it gave, changes
nothing stored. (The SQL stores get this from the database; the memory store must make it.)
And the memory store's time is the clock it is given: leases end when that clock says so."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core.clock import FakeClock
from chronod.store.api import Run
from chronod.store.memory import MemoryStore
from tests.contract.test_store_backfills import stored
from tests.contract.test_store_contract import T0, acquire, run, spec


def test_runs_given_and_runs_got_are_copies(store):
    token = acquire(store)
    mine = run(1)
    store.insert_runs([mine])
    mine.state, mine.error = "succeeded", "mutated by the caller"
    got = store.get_run("backup-000001")
    assert (got.state, got.error) == ("pending", None)
    got.state = "failed"
    [listed] = store.pending()
    listed.job_key = "other"
    assert store.get_run("backup-000001").state == "pending" and store.pending()[0].job_key == "backup"

    claimed = store.dispatch("backup-000001", "n1", token, next_run := run(2))
    next_run.state = "failed"
    claimed.attempts = 99
    assert store.get_run("backup-000002").state == "pending"
    assert store.get_run("backup-000001").attempts == 1
    [attempt] = store.attempts("backup-000001")
    attempt.state = "lost"
    assert store.attempts("backup-000001")[0].state == "running"
    for r in store.runs("backup") + store.running():
        r.state = "cancelled"
    assert store.run_states(["backup-000001", "backup-000002"]) == {
        "backup-000001": "running",
        "backup-000002": "pending",
    }


def test_nodes_jobs_requests_state_and_backfills_got_are_copies(store):
    token = acquire(store)
    store.set_node_info("n1", token, {"jobs": 3})
    store.nodes()[0].info["jobs"] = 7
    assert store.nodes()[0].info == {"jobs": 3}
    store.sync_jobs("n1", [spec("backup")])
    row = store.get_job("backup")
    row.paused, row.removed_at = True, T0
    assert store.get_job("backup").paused is False and store.get_job("backup").removed_at is None
    state = {"boot_id": "b1", "seen": [1]}
    store.set_job_state("backup", state)
    state["seen"].append(2)
    store.get_job_state("backup")["seen"].append(3)
    assert store.get_job_state("backup") == {"boot_id": "b1", "seen": [1]}
    payload = {"by": "alice"}
    store.add_request("trigger", "backup", payload)
    payload["by"] = "mallory"
    assert store.take_requests("n1")[0].payload == {"by": "alice"}
    bf = store.get_backfill(stored(store))
    bf.items.clear()
    bf.started = 2
    again = store.get_backfill(bf.id)
    assert len(again.items) == 3 and again.started == 0


def test_a_nodes_info_is_decoded_once_per_text_and_what_it_holds_is_read_only(store):
    """Every node reads every node's info at each version check: the store decodes a text
    it read before no more (the spec hashes are one object between reads), and that
    object refuses changes, so that no reader changes what the others read."""
    token = acquire(store)
    store.set_node_info("n1", token, {"jobs": 2, "spec_hashes": {"a": "h1", "b": "h2"}, "tags": ["x"]})
    first, second = store.nodes()[0].info, store.nodes()[0].info
    assert first == {"jobs": 2, "spec_hashes": {"a": "h1", "b": "h2"}, "tags": ["x"]}
    assert first["spec_hashes"] is second["spec_hashes"] and first is not second
    with pytest.raises(TypeError):
        first["spec_hashes"]["a"] = "mine"
    with pytest.raises(TypeError):
        first["tags"].append("y")
    first["jobs"] = 7
    assert store.nodes()[0].info["jobs"] == 2
    assert json.loads(json.dumps(first["spec_hashes"])) == {"a": "h1", "b": "h2"}
    assert copy.deepcopy(first)["spec_hashes"] == {"a": "h1", "b": "h2"}
    store.set_node_info("n1", token, {"jobs": 2, "spec_hashes": {"a": "h3"}})
    assert store.nodes()[0].info["spec_hashes"] == {"a": "h3"}


def test_the_memory_store_keeps_time_by_its_clock_and_its_tokens_only_grow():
    clock = FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))
    store = MemoryStore(now=clock.now)
    tokens = [acquire(store, "a", ttl=15), acquire(store, "b", ttl=15)]
    store.insert_runs([run(1)])
    assert store.live_nodes() == [("a", tokens[0]), ("b", tokens[1])]
    clock.advance(14.9)
    assert store.renew_lease("b", tokens[1], 15) is True
    clock.advance(0.2)  # a's lease ended at 15 s: its writes are refused from now on
    assert store.live_nodes() == [("b", tokens[1])]
    assert [n.name for n in store.expired_nodes()] == ["a"]
    assert store.dispatch("backup-000001", "a", tokens[0], None) is None and store.stale_rejections == 1
    claimed = store.dispatch("backup-000001", "b", tokens[1], None)
    assert claimed.started_at == clock.now() and claimed.updated_at == clock.now()
    tokens.append(acquire(store, "a", ttl=15))
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert store.jobs_version() == (0, None)
    store.sync_jobs("a", [spec("backup")])
    assert store.jobs_version() == (1, clock.now())
    assert store.known_spans(["backup"]) == {"backup": [(clock.now(), None)]}


def test_the_memory_store_stores_utc_whatever_the_zone_given():
    store = MemoryStore()
    paris = timezone(timedelta(hours=1))
    r = Run("x", "backup", "backup", T0.astimezone(paris), T0.astimezone(paris))
    store.insert_runs([r])
    got = store.get_run("x")
    assert got.scheduled_at == T0 and got.scheduled_at.tzinfo is timezone.utc
