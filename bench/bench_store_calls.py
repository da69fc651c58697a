"""Per-call cost of the store calls on the daemon's hot path, memory store against SQLite.

    .venv/bin/python bench/bench_store_calls.py [--calls 2000] [--history 20000] [--pg URL] [--cpu]

Each store first holds `--history` ended runs (over 200 jobs), then every call is timed
one run at a time, as the daemon makes them: store an occurrence (`insert_runs`), claim
it (`dispatch`), start its attempt (`set_processes`), record its outcome (`finish_many`);
and the loop's usual form of the first two, one wake-up storing the next occurrence and
claiming the due one (`commit_wakeup`). SQLite is measured on a file (as chronod runs it)
and in memory (`sqlite://`, as the simulation ran it). Reports µs per call and the ratio
to the memory store. `--cpu` times the process's CPU instead of the wall clock: on a
shared, loaded machine, what a call costs rather than how long it waited for a CPU (an
SQL store's waits for the disk or the server then do not count).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from chronod.core.model import JobSpec
from chronod.store.api import Ending, Run
from chronod.store.memory import MemoryStore
from chronod.store.sql import SqlStore

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
OPS = ("store occurrence", "claim", "start attempt", "record outcome", "wake-up: store + claim")


def occurrence(prefix: str, i: int, state: str = "pending") -> Run:
    at = T0 + timedelta(minutes=i)
    job = f"job{i % 200:03d}"
    return Run(run_id=f"{prefix}{i:08d}", job_id=job, job_key=job, scheduled_at=at, fire_at=at, state=state)


def fill(store: Any, history: int) -> int:
    store.sync_jobs(
        "n1",
        [
            JobSpec(id=f"job{j:03d}", owner="ops", schedule="* * * * *", command="true", idempotency_class="idempotent")
            for j in range(200)
        ],
    )
    store.insert_runs([occurrence("h", i, "succeeded") for i in range(history)])
    token: int = store.acquire_node("n1", pid=os.getpid(), hostname="bench", boot_id="bench", ttl_s=3600)
    return token


CLOCK = time.perf_counter


def timed(calls: int, fn: Callable[[int], object]) -> float:
    """µs per call of fn(0) .. fn(calls - 1)."""
    start = CLOCK()
    for i in range(calls):
        fn(i)
    return (CLOCK() - start) / calls * 1e6


def measure(store: Any, calls: int, history: int) -> dict[str, float]:
    token = fill(store, history)
    out = {
        OPS[0]: timed(calls, lambda i: store.insert_runs([occurrence("r", i)])),
        OPS[1]: timed(calls, lambda i: store.dispatch(f"r{i:08d}", "n1", token, None)),
        OPS[2]: timed(calls, lambda i: store.set_processes([(f"r{i:08d}", 1, 1000 + i, 999)], token)),
        OPS[3]: timed(calls, lambda i: store.finish_many([Ending(f"r{i:08d}", 1, "succeeded", exit_code=0)], token)),
    }
    store.insert_runs([occurrence("w", 0)])
    out[OPS[4]] = timed(calls, lambda i: store.commit_wakeup([occurrence("w", i + 1)], [], [f"w{i:08d}"], "n1", token))
    assert store.get_run(f"r{calls - 1:08d}").state == "succeeded"
    assert store.get_run(f"w{calls - 1:08d}").state == "running"
    assert store.stale_rejections == 0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--history", type=int, default=20000)
    ap.add_argument("--pg", help="a PostgreSQL database to measure too (it must be migrated and empty)")
    ap.add_argument("--cpu", action="store_true", help="time CPU used (process time), not the wall clock")
    args = ap.parse_args()
    global CLOCK
    if args.cpu:
        CLOCK = time.process_time
    results: dict[str, dict[str, float]] = {}
    results["memory"] = measure(MemoryStore(), args.calls, args.history)
    with tempfile.TemporaryDirectory() as tmp:
        sql = SqlStore(os.path.join(tmp, "chrono.db"))
        sql.upgrade()
        results["sqlite file"] = measure(sql, args.calls, args.history)
        sql.close()
    sql = SqlStore("sqlite://")
    sql.upgrade()
    results["sqlite ://"] = measure(sql, args.calls, args.history)
    sql.close()
    if args.pg:
        sql = SqlStore(args.pg)
        results["postgresql"] = measure(sql, args.calls, args.history)
        sql.close()
    names = list(results)
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"] * 3
    print(
        f"{args.calls} calls each, {args.history} runs stored before; µs {'of CPU' if args.cpu else ''} per call "
        "(ratio to memory); "
        f"load average {' '.join(load)} at the end"
    )
    print(f"{'':<24}" + "".join(f"{n:>22}" for n in names))
    for op in OPS:
        base = results["memory"][op]
        cells = [f"{results[n][op]:10.1f} ({results[n][op] / base:6.0f}x)" for n in names]
        print(f"{op:<24}" + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
