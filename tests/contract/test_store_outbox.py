"""The notifier's reads of what changed, on every backend (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from chronod.store.api import Run
from chronod.store.outbox import Outbox

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


def test_changed_run_keys_name_the_terminal_runs_changed_in_the_window_oldest_first(store):
    at = [T0 + timedelta(seconds=s) for s in range(6)]
    store.insert_runs(
        [
            run(1, "succeeded", at[3]),
            run(2, "failed", at[1]),
            run(3, "pending", at[2]),  # not ended: not a change the notifier reads
            run(4, "skipped_outage", at[1]),
            run(5, "succeeded", at[5]),  # at the window's end: outside
            run(6, "succeeded", at[0] - timedelta(microseconds=1)),  # before it
        ]
    )
    keys = Outbox(store).changed_run_keys(at[0], at[5])
    assert keys == [("r-0002", at[1]), ("r-0004", at[1]), ("r-0001", at[3])]


def test_terminal_runs_read_whole_rows_of_the_ended_runs_among_the_ids_in_change_order(store):
    at = [T0 + timedelta(seconds=s) for s in range(4)]
    store.insert_runs([run(1, "succeeded", at[3]), run(2, "failed", at[1]), run(3, "pending", at[2])])
    got = Outbox(store).terminal_runs(["r-0001", "r-0002", "r-0003", "r-9999", "r-0001"])
    assert [(r.run_id, r.state, r.updated_at) for r in got] == [
        ("r-0002", "failed", at[1]),
        ("r-0001", "succeeded", at[3]),
    ]
    many = [run(i, "succeeded", at[0]) for i in range(10, 1210)]  # more ids than one IN list
    store.insert_runs(many)
    assert len(Outbox(store).terminal_runs([r.run_id for r in many])) == 1200
    assert Outbox(store).terminal_runs([]) == []
