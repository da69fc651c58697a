"""The contract names every store method: each public method of the `Store` protocol and of
the notification outbox is called somewhere in tests/contract, and the ones no other
contract file reached are tested here, on every backend.

The daemon and chronoctl reach the store only through the protocol (mypy --strict checks
every call against it), so a method missing from this suite is a method whose behaviour
on one backend nobody pins down."""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from pathlib import Path

import pytest

from chronod.store.api import Store, StoreError, open_store
from chronod.store.memory import MemoryOutbox, MemoryStore
from chronod.store.outbox import Outbox
from tests.contract.test_store_contract import T0, acquire, expire_lease, run, spec

CONTRACT = Path(__file__).parent


def _public_methods(cls: type) -> list[str]:
    """Its own and its bases' (the `Store` protocol is the union of the store's roles)."""
    return sorted({n for k in cls.__mro__ for n, v in vars(k).items() if callable(v) and not n.startswith("_")})


def test_every_store_and_outbox_method_is_called_by_the_contract_suite():
    text = "\n".join(p.read_text() for p in sorted(CONTRACT.glob("test_*.py")) if p.name != Path(__file__).name)
    text += Path(__file__).read_text().split("# --- the methods", 1)[1]
    untested = [
        f"{cls.__name__}.{name}"
        for cls in (Store, Outbox)
        for name in _public_methods(cls)
        if not re.search(rf"\.{name}\(", text)
    ]
    assert len(_public_methods(Store)) > 60  # the protocol was read, not an empty class
    assert untested == [], f"no contract test calls {untested}: add one to tests/contract"


@pytest.mark.parametrize(("protocol", "implementation"), [(Store, MemoryStore), (Outbox, MemoryOutbox)])
def test_the_memory_store_implements_every_method_with_the_same_parameters(protocol, implementation):
    """One suite runs on three stores: a method missing from the memory store, or taking
    other parameters, would make the simulation run on a store the daemon does not use."""
    missing, differ = [], []
    for name in _public_methods(protocol):
        mine = getattr(implementation, name, None)
        if mine is None or not callable(mine):
            missing.append(name)
            continue
        want = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(protocol, name)).parameters.values()]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(mine).parameters.values()]
        if want != got:
            differ.append(f"{name}: {got} != {want}")
    assert len(_public_methods(protocol)) > 10
    assert missing == [], f"{implementation.__name__} lacks {missing}"
    assert differ == [], differ
    for attribute in ("url_safe", "dialect", "stale_rejections"):
        if protocol is Store:
            assert hasattr(MemoryStore(), attribute)


def test_the_memory_store_is_never_a_database_url():
    """The memory store is for the simulation: chronod's and chronoctl's --database (which
    open through `open_store`) refuse it as a URL (a plain `memory` is an SQLite file so named)."""
    for url in ("memory://", "memory://sim"):
        with pytest.raises(StoreError, match="unsupported database|memory"):
            open_store(url).schema_revision()


# --- the methods no other contract file calls ---------------------------------------------


def test_jobs_version_changes_with_a_definition_a_pause_and_a_removal(store):
    acquire(store)
    before = store.jobs_version()
    store.sync_jobs("n1", [spec("backup"), spec("report")])
    added = store.jobs_version()
    assert added[0] == before[0] + 2 and added != before
    assert store.jobs_version() == added  # reading changes nothing

    store.set_paused("report", True, "disk swap", by="ops")
    paused = store.jobs_version()
    assert paused != added

    store.sync_jobs("n1", [spec("backup")])  # report removed (the row stays, marked)
    removed = store.jobs_version()
    assert removed != paused and removed[0] == added[0]


def test_revive_reopens_only_occurrences_cancelled_before_they_started(store):
    token = acquire(store)
    store.sync_jobs("n1", [spec("backup")])
    store.insert_runs([run(1), run(2)])
    store.dispatch("backup-000001", "n1", token, None)  # it started: never revived
    store.sync_jobs("n1", [])  # the job leaves the registry: its pending occurrence is cancelled
    assert store.get_run("backup-000002").state == "cancelled"

    assert store.revive(["backup-000001", "backup-000002", "no-such-run"]) == 1
    back = store.get_run("backup-000002")
    assert (back.state, back.error, back.finished_at) == ("pending", None, None)
    assert store.get_run("backup-000001").state == "running"
    assert store.revive([]) == 0
    assert store.revive(["backup-000002"]) == 0  # pending already: nothing to do


def test_note_held_says_why_pending_rows_wait_and_a_stale_token_writes_nothing(store):
    token = acquire(store)
    store.insert_runs([run(1), run(2), run(3)])
    store.dispatch("backup-000003", "n1", token, None)
    until = T0 + timedelta(hours=2)

    held = store.note_held(["backup-000001", "backup-000003"], "window nightly-freeze", until, node="n1", token=token)
    assert held == 1  # the running one is not held
    first = store.get_run("backup-000001")
    assert (first.state, first.error, first.next_attempt_at) == ("pending", "window nightly-freeze", until)
    assert store.get_run("backup-000002").error is None

    expire_lease(store, "n1")
    fresh = acquire(store, "n2")
    assert store.note_held(["backup-000002"], "window other", until, node="n1", token=token) == 0
    assert store.get_run("backup-000002").error is None
    assert store.note_held(["backup-000002"], "window other", until, node="n2", token=fresh) == 1


def test_last_runs_and_states_give_each_jobs_latest_run_before_until_skipping_states(store):
    token = acquire(store)
    store.sync_jobs("n1", [spec("backup"), spec("report"), spec("idle")])
    store.insert_runs([run(1), run(2), run(3), run(1, job="report"), run(9, job="report")])
    store.dispatch("backup-000001", "n1", token, None)
    store.settle("backup-000002", "skipped_overlap", error="a run was running", next_run=None)
    until = T0 + timedelta(minutes=5)
    ids = ["backup", "report", "idle", "no-such-job"]

    latest = store.last_runs(ids, until)
    assert {j: r.run_id for j, r in latest.items()} == {"backup": "backup-000003", "report": "report-000001"}
    assert store.last_states(ids, until) == {"backup": "pending", "report": "pending"}

    waiting = ("pending", "retry_wait")
    done = store.last_runs(ids, until, skip=waiting)
    assert {j: r.run_id for j, r in done.items()} == {"backup": "backup-000002"}
    assert store.last_states(ids, until, skip=waiting) == {"backup": "skipped_overlap"}
    assert store.last_runs([], until) == {} and store.last_states(ids, T0) == {}
