"""The store's retention contract (SQLite and PostgreSQL): pruning in batches with a per-job
watermark, the latest success kept, one query for many jobs' last successes, the size."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chronod.store.api import Run
from tests.contract.test_store_contract import T0, acquire, run


def terminal(i: int, job: str = "backup", state: str = "succeeded") -> Run:
    r = run(i, job)
    r.state = state
    r.finished_at = r.scheduled_at + timedelta(seconds=30)
    return r


def at(i: int):
    return T0 + timedelta(minutes=i)


def test_prune_deletes_oldest_first_in_batches_and_raises_the_watermark_with_each(store):
    store.insert_runs([terminal(i, state="failed") for i in range(10)] + [terminal(10)])
    assert store.prune_runs("backup", at(8), kept_s=3600, limit=3) == 3
    assert sorted(r.run_id for r in store.runs("backup"))[0] == "backup-000003"
    mark = store.pruned()["backup"]
    assert (mark.through, mark.kept_s) == (at(2), 3600)
    assert store.prune_runs("backup", at(8), kept_s=3600, limit=100) == 5
    assert store.prune_runs("backup", at(8), kept_s=3600, limit=100) == 0
    assert store.pruned(["backup"])["backup"].through == at(7)
    assert [r.run_id for r in store.runs("backup", newest_first=False)] == [
        "backup-000008",
        "backup-000009",
        "backup-000010",
    ]


def test_prune_never_deletes_waiting_or_running_runs_nor_the_latest_success(store):
    store.insert_runs([terminal(0), terminal(1), terminal(2, state="failed"), run(3), terminal(4, state="failed")])
    token = acquire(store)
    store.dispatch("backup-000003", "n1", token, None)
    assert store.prune_runs("backup", at(10), kept_s=60, limit=100) == 3
    left = {r.run_id: r.state for r in store.runs("backup")}
    assert left == {"backup-000001": "succeeded", "backup-000003": "running"}
    assert store.pruned()["backup"].through == at(4)


def test_prune_of_one_job_leaves_the_others_alone_and_attempts_go_with_their_run(store):
    store.insert_runs([run(0), terminal(1, state="failed"), terminal(0, job="other", state="failed")])
    token = acquire(store)
    store.dispatch("backup-000000", "n1", token, None)
    store.finish(
        "backup-000000", 1, "failed", exit_code=1, signal=None, output_tail="", output_bytes=0, error=None, token=token
    )
    assert store.attempts("backup-000000")
    assert store.prune_runs("backup", at(5), kept_s=60, limit=100) == 2
    assert store.attempts("backup-000000") == []
    assert [r.run_id for r in store.runs("other")] == ["other-000000"]
    assert "other" not in store.pruned()


def test_the_watermark_never_moves_back(store):
    store.insert_runs([terminal(i, state="failed") for i in range(5)])
    store.prune_runs("backup", at(5), kept_s=60, limit=100)
    store.insert_runs([terminal(1, state="failed")])  # an old row that came back (a restore)
    store.prune_runs("backup", at(5), kept_s=120, limit=100)
    mark = store.pruned()["backup"]
    assert (mark.through, mark.kept_s) == (at(4), 120)


def test_prunable_counts_what_prune_would_delete_without_deleting(store):
    store.insert_runs(
        [terminal(i, state="failed") for i in range(4)] + [terminal(4)] + [terminal(0, job="other", state="failed")]
    )
    assert store.prunable({"backup": at(10), "other": at(0), "none": at(10)}) == {"backup": 4}
    assert len(store.runs("backup")) == 5 and store.pruned() == {}
    assert store.job_ids_with_runs_before(at(1)) == ["backup", "other"]
    assert store.job_ids_with_runs_before(at(0)) == []


def test_last_successes_answers_for_many_jobs_at_once(store):
    store.insert_runs(
        [
            terminal(0),
            terminal(1),
            terminal(2, state="failed"),
            terminal(0, job="b"),
            terminal(5, job="b"),
            terminal(0, job="never", state="failed"),
        ]
    )
    found = store.last_successes(["backup", "b", "never", "unknown"], until=at(4))
    assert {j: r.run_id for j, r in found.items()} == {"backup": "backup-000001", "b": "b-000000"}
    assert store.last_successes([], until=at(4)) == {}
    many = store.last_successes([f"j{i}" for i in range(1200)] + ["b"], until=at(10))
    assert {j: r.run_id for j, r in many.items()} == {"b": "b-000005"}


def test_the_database_knows_its_size(store):
    size = store.database_bytes()
    if store.dialect == "memory":  # no database on disk: the protocol's "will not say"
        assert size is None and store.metrics()["database_bytes"] is None
        return
    assert isinstance(size, int) and size > 0


# --- the daemon's pruner over a real store --------------------------------------------------


class _Log:
    def __init__(self):
        self.events = []

    def __call__(self, event, level="info", **fields):
        self.events.append((event, fields))


@pytest.mark.parametrize("carried", ["none given", "long carried", "long carried, the rest read at once"])
def test_the_pruner_keeps_each_job_its_own_history_days_and_unknown_jobs_the_default(store, carried, monkeypatch):
    """The loop's specs (`known_specs`) give the carried jobs' retention; the others' (here
    `short`, carried by no one now) come from the store, one by one or all at once."""
    from dataclasses import replace

    from chronod.daemon import pruner as pruner_module
    from chronod.daemon.metrics import Metrics
    from chronod.daemon.pruner import Pruner
    from tests.contract.test_store_contract import spec

    now = T0 + timedelta(days=500)
    store.sync_jobs("n1", [replace(spec("short"), history_days=10), spec("long")])
    known = None if carried == "none given" else (lambda: {"long": spec("long")})
    if carried.endswith("at once"):
        monkeypatch.setattr(pruner_module, "READ_ONE_BY_ONE", 0)

    def old(job: str, days_ago: float, state: str = "failed") -> Run:
        when = now - timedelta(days=days_ago)
        return Run(
            run_id=f"{job}-{days_ago}",
            job_id=job,
            job_key=job,
            scheduled_at=when,
            fire_at=when,
            state=state,
            finished_at=when,
        )

    store.insert_runs(
        [
            old("short", 11),
            old("short", 12),
            old("short", 9),
            old("short", 30, "succeeded"),
            old("long", 300),
            old("long", 401),
            old("gone", 399),
            old("gone", 402),
        ]
    )
    metrics, log = Metrics(), _Log()
    pruner = Pruner(store, None, log, "n1", metrics=metrics, batch=1, pause_s=0, known_specs=known)
    assert pruner.step(now) == 4
    left = {r.run_id for r in store.runs()}
    assert left == {"short-9", "short-30", "long-300", "gone-399"}  # short-30: its latest success
    marks = store.pruned()
    assert {j: (m.through, m.kept_s) for j, m in marks.items()} == {
        "short": (now - timedelta(days=11), 10 * 86400),
        "long": (now - timedelta(days=401), 400 * 86400),
        "gone": (now - timedelta(days=402), 400 * 86400),
    }
    assert ("retention.pruned", {"runs": 4}) in log.events
    assert metrics.pruned._value.get() == 4
    assert metrics.database_bytes._value.get() > 0 or store.database_bytes() is None
    assert metrics.stored_runs.labels(state="failed")._value.get() == 3
    assert metrics.stored_runs.labels(state="running")._value.get() == 0
    assert pruner.step(now) == 0


def test_in_a_fleet_only_the_first_live_node_prunes(store):
    from chronod.daemon.pruner import Pruner

    if store.dialect == "sqlite":
        pytest.skip("SQLite holds one node")

    acquire(store, "a-node")
    acquire(store, "b-node")
    store.insert_runs([terminal(0, state="failed"), terminal(1)])
    now = T0 + timedelta(days=401)
    assert Pruner(store, None, _Log(), "b-node", pause_s=0).step(now) == 0
    assert Pruner(store, None, _Log(), "a-node", pause_s=0).step(now) == 1
