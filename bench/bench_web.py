"""How long does the web console take to answer, in server time?

    overview (`/`) of 10,000 jobs                    target < 500 ms
    a job's page (`/job/ID`) over 1,000,000 runs      target < 500 ms (heat map: one query)

Two databases per backend: 10,000 jobs with their last 5 runs each (the overview reads
every job's last run, next fire and hold), and bench_history.py's 1,000,000 runs over
1,000 jobs (a job every 5 minutes, hourly, daily: the job page builds the 90-day audit
report of the job, its heat map, did-it-run, missed and the last runs). Pages are asked
through Flask's test client in this process, so the figures are the server's time (Python,
SQL and templates), without the network. Best and median of --repeat requests after a warm-up.

    .venv/bin/python bench/bench_web.py [--dir /tmp/chrono-bench] [--pg URL] [--skip-pg] [--reuse] [--reuse-pg] [--repeat N]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_history  # noqa: E402

from chronod.core.model import JobSpec  # noqa: E402

JOBS = 10_000
MIX = [(500, "*/5 * * * *", 300), (4500, "{m} * * * *", 3600), (5000, "{m} {h} * * *", 86400)]


def overview_specs() -> list[tuple[JobSpec, int]]:
    out = []
    n = 0
    for count, expr, period in MIX:
        for _ in range(count):
            spec = JobSpec(
                id=f"job-{n:05d}",
                owner=f"team-{n % 40:02d}",
                schedule=expr.format(m=n % 60, h=n % 24),
                command="true",
                idempotency_class="idempotent",
                max_silence_s=3 * period,
                tags=(f"svc-{n % 100:02d}", "fleet"),
            )
            out.append((spec, period))
            n += 1
    return out


def fill_overview(url: str) -> float:
    """10,000 jobs, 5 runs each, a node with a fresh heartbeat; seconds taken."""
    from chronod.store import schema
    from chronod.store.api import open_store

    started = time.perf_counter()
    store = open_store(url)
    store.upgrade()
    jobs = overview_specs()
    store.sync_jobs("bench1", [s for s, _ in jobs])
    now = datetime.now(timezone.utc)
    bench_history.RUNS_PER_JOB = 5
    merged = heapq.merge(*(bench_history.rows(s, p, now) for s, p in jobs), key=bench_history._newest_first)
    with store.engine.begin() as conn:
        while batch := list(itertools.islice(merged, 20000)):
            conn.execute(schema.runs.insert(), batch)
    bench_history.RUNS_PER_JOB = 1000
    _analyze(store)
    store.close()
    return time.perf_counter() - started


def _analyze(store) -> None:
    import sqlalchemy as sa

    with store.engine.connect() as conn:
        conn.execute(sa.text("ANALYZE runs" if store.dialect == "postgresql" else "ANALYZE"))
        conn.commit()


def timed(client, path: str, repeat: int) -> dict:
    r = client.get(path)  # warm-up (and the check that the page answers)
    assert r.status_code == 200, (path, r.status_code, r.get_data(as_text=True)[:500])
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        r = client.get(path)
        times.append((time.perf_counter() - t) * 1000)
    return {"best_ms": round(min(times)), "median_ms": round(statistics.median(times)), "bytes": len(r.data)}


def timed_each(clients: list, path: str) -> dict:
    """The first request of each of `clients` (the first of them is the warm-up)."""
    times = []
    for i, client in enumerate(clients):
        t = time.perf_counter()
        r = client.get(path)
        if i:
            times.append((time.perf_counter() - t) * 1000)
    assert r.status_code == 200
    return {"best_ms": round(min(times)), "median_ms": round(statistics.median(times)), "bytes": len(r.data)}


def bench(label: str, overview_url: str, history_url: str, repeat: int) -> list[tuple[str, dict]]:
    from chronoctl.web.app import create_app
    from chronod.store.api import open_store

    out = []
    store = open_store(overview_url)
    c = create_app(store).test_client()
    out.append((f"{label}: overview of {JOBS:,} jobs (first page of 200)", timed(c, "/", repeat)))
    out.append((f"{label}: overview filtered to tag svc-07 (100 jobs)", timed(c, "/?tag=svc-07", repeat)))
    out.append((f"{label}: overview, state failing (every job's last run read)", timed(c, "/?state=failing", repeat)))
    cold = [create_app(store).test_client() for _ in range(repeat + 1)]  # a new console: the rows read again
    out.append((f"{label}: overview, first request of a console", timed_each(cold, "/")))
    store.close()
    store = open_store(history_url)
    c = create_app(store).test_client()
    for job, what in (("job-0000", "every 5 min"), ("job-0100", "hourly"), ("job-0700", "daily")):
        out.append((f"{label}: job page, 1,000,000 runs, {what}", timed(c, f"/job/{job}", repeat)))
    store.close()
    for name, fig in out:
        print(f"  {name:58s} best {fig['best_ms']:5d} ms  median {fig['median_ms']:5d} ms", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/chrono-bench")
    ap.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/chrono_bench_web")
    ap.add_argument("--skip-pg", action="store_true")
    ap.add_argument("--reuse", action="store_true", help="keep the SQLite databases filled before")
    ap.add_argument("--reuse-pg", action="store_true", help="keep the PostgreSQL databases filled before")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    ov, hist = d / "web-overview.db", d / "web-history.db"
    if not (a.reuse and ov.exists() and hist.exists()):
        for p in [*d.glob("web-overview.db*"), *d.glob("web-history.db*")]:
            p.unlink()
        print(f"  filled {ov} in {fill_overview(str(ov)):.0f}s", file=sys.stderr)
        print(f"  filled {hist} in {bench_history.fill(str(hist)):.0f}s", file=sys.stderr)
    load = os.getloadavg()[0]
    results = bench("SQLite", str(ov), str(hist), a.repeat)
    if not a.skip_pg:
        ov_pg, hist_pg = a.pg + "_ov", a.pg + "_hist"
        if not a.reuse_pg:
            bench_history._recreate_pg(ov_pg)
            bench_history._recreate_pg(hist_pg)
            print(f"  filled PostgreSQL overview in {fill_overview(ov_pg):.0f}s", file=sys.stderr)
            print(f"  filled PostgreSQL history in {bench_history.fill(hist_pg):.0f}s", file=sys.stderr)
        results += bench("PostgreSQL", ov_pg, hist_pg, a.repeat)
    print(f"\nserver time per page (load average {load:.1f} -> {os.getloadavg()[0]:.1f}):")
    print("| page | best | median |\n| --- | --- | --- |")
    for name, fig in results:
        print(f"| {name} | {fig['best_ms']} ms | {fig['median_ms']} ms |")


if __name__ == "__main__":
    main()
