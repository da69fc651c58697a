"""Store throughput at fleet scale: sync 100,000 job specs, materialize 100,000 runs, and
query one job's window out of 1,000,000 runs, on SQLite and (with --pg URL) PostgreSQL.

    .venv/bin/python bench/bench_store.py [--pg postgresql://postgres@127.0.0.1/postgres] [--rows 1000000]

With --pg, a scratch database is created next to the given one and dropped afterwards.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

from chronod.core.model import JobSpec
from chronod.store.api import Run
from chronod.store.sql import SqlStore, normalize_url

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def timed(label: str, fn):
    start = time.perf_counter()
    out = fn()
    print(f"  {label:<44} {time.perf_counter() - start:7.2f} s")
    return out


def runs_for(jobs: int, per_job: int, offset: int = 0) -> list[Run]:
    return [
        Run(
            run_id=f"j{j:06d}-{i:06d}",
            job_id=f"j{j:06d}",
            job_key=f"j{j:06d}",
            scheduled_at=T0 + timedelta(hours=i),
            fire_at=T0 + timedelta(hours=i),
            state="succeeded",
        )
        for j in range(offset, offset + jobs)
        for i in range(per_job)
    ]


def bench(store: SqlStore, rows: int) -> None:
    print(f"{store.dialect}: {store.url_safe}")
    store.upgrade()
    specs = [
        JobSpec(
            id=f"job-{i:06d}", owner="ops", schedule="*/5 * * * *", command=f"run {i}", idempotency_class="idempotent"
        )
        for i in range(100_000)
    ]
    timed("sync_jobs 100,000 specs (first)", lambda: store.sync_jobs("n1", specs))
    timed("sync_jobs 100,000 specs (unchanged)", lambda: store.sync_jobs("n1", specs))
    pending = [
        Run(run_id=f"p{i:07d}", job_id=f"job-{i:06d}", job_key=f"job-{i:06d}", scheduled_at=T0, fire_at=T0)
        for i in range(100_000)
    ]
    timed("insert_runs 100,000 pending", lambda: store.insert_runs(pending))
    per_job = 100
    done = 0
    while done < rows:
        batch = min(100_000, rows - done)
        store.insert_runs(runs_for(batch // per_job, per_job, offset=done // per_job))
        done += batch
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    print(f"  history: {rows:,} runs in {rows // per_job:,} jobs")
    window = dict(since=T0 + timedelta(hours=10), until=T0 + timedelta(hours=40))
    got = timed("runs(job, 30 h window) x100", lambda: [store.runs(f"j{j:06d}", **window) for j in range(100)])
    assert all(len(g) == 30 for g in got)
    q = store.runs_query("j000042", **window)
    with store.engine.connect() as conn:
        sql = str(q.compile(conn, compile_kwargs={"literal_binds": True}))
        prefix = "EXPLAIN QUERY PLAN " if store.dialect == "sqlite" else "EXPLAIN "
        plan = [str(r[-1]) for r in conn.exec_driver_sql(prefix + sql)]
    print("  plan: " + " | ".join(p.strip() for p in plan))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", help="an admin URL of a PostgreSQL server to bench against too")
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqlStore(str(Path(tmp) / "bench.db"))
        try:
            bench(store, args.rows)
        finally:
            store.close()
    if args.pg:
        admin = sa.create_engine(normalize_url(args.pg), isolation_level="AUTOCOMMIT")
        name = f"chrono_bench_{uuid.uuid4().hex[:8]}"
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        store = SqlStore(sa.engine.make_url(normalize_url(args.pg)).set(database=name).render_as_string(False))
        try:
            bench(store, args.rows)
        finally:
            store.close()
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
            admin.dispose()


if __name__ == "__main__":
    main()
