"""How fast the schedule evaluator is, beside croniter on the same expressions.

    .venv/bin/python bench/bench_schedule.py [--jobs 100000] [--gap-jobs 10000]

Prints per-call next-fire times for realistic expressions, the start-up cost of computing
the next fire of many distinct jobs across zones, and the cost of validating gaps.
CPU time is shown beside wall time: it is the steadier figure on a busy machine.
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from croniter import croniter

from chronod.core.schedule import compile_schedule

UTC = timezone.utc
AFTER = datetime(2026, 5, 17, 13, 47, 12, tzinfo=UTC)
EXPRESSIONS = [
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 9-17 * * 1-5",
    "15 3 * * 0",
    "0 0 1 * *",
    "*/10 8-18 * * mon-fri",
    "0 0 1 1 *",
    "0 12 1,15 * *",
    "45 23 * * 6",
]
ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Sydney", "Asia/Kolkata", "America/Sao_Paulo"]


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def per_call(zone: str, n: int) -> None:
    print(f"\nnext fire per call, zone {zone} ({n} calls each)")
    print(f"  {'expression':<24} {'chrono µs':>10} {'croniter µs':>12} {'ratio':>6}")
    start_local = AFTER.astimezone(ZoneInfo(zone))
    for expr in EXPRESSIONS:
        s = compile_schedule(expr, zone)
        _, ours = _timed(lambda s=s: [s.next_after(AFTER) for _ in range(n)])
        _, theirs = _timed(lambda expr=expr: [croniter(expr, start_local).get_next(datetime) for _ in range(n)])
        print(f"  {expr:<24} {ours / n * 1e6:>10.1f} {theirs / n * 1e6:>12.1f} {theirs / ours:>6.1f}")


def _distinct_jobs(count: int, seed: int = 7) -> list[tuple[str, str]]:
    rnd = random.Random(seed)
    jobs, seen = [], set()
    while len(jobs) < count:
        m, h, d, dow = rnd.randrange(60), rnd.randrange(24), rnd.randrange(1, 29), rnd.randrange(7)
        expr = rnd.choice(
            [
                f"{m} {h} * * *",
                f"{m} * * * *",
                f"{m} {h} * * {dow}",
                f"{m} {h} {d} * *",
                f"{m % 15}-59/15 * * * *",
                f"{m} {h % 8}-{h % 8 + 10} * * 1-5",
                f"{m} {h},{(h + 12) % 24} * * *",
                f"{rnd.randrange(60)} {m} {h} * * *",
            ]
        )
        key = (expr, rnd.choice(ZONES))
        if key not in seen:
            seen.add(key)
            jobs.append(key)
    return jobs


def startup(count: int) -> None:
    jobs = _distinct_jobs(count)
    compile_schedule.cache_clear()
    wall_c, cpu_c = _timed(lambda: [compile_schedule(e, z) for e, z in jobs])
    schedules = [compile_schedule(e, z) for e, z in jobs]
    wall_n, cpu_n = _timed(lambda: [s.next_after(AFTER) for s in schedules])
    print(f"\nstart-up: {count} distinct jobs over {len(ZONES)} zones")
    print(f"  compile           {wall_c:7.2f} s wall {cpu_c:7.2f} s cpu")
    print(f"  next fire (chrono){wall_n:7.2f} s wall {cpu_n:7.2f} s cpu  ({cpu_n / count * 1e6:.1f} µs/job)")
    sample = jobs[: max(1, count // 10)]
    wall_k, cpu_k = _timed(
        lambda: [
            croniter(e, AFTER.astimezone(ZoneInfo(z)), second_at_beginning=len(e.split()) == 6).get_next(datetime)
            for e, z in sample
        ]
    )
    scale = count / len(sample)
    print(
        f"  next fire (croniter, {len(sample)} jobs, scaled x{scale:.0f})"
        f" {wall_k * scale:7.2f} s wall {cpu_k * scale:7.2f} s cpu"
    )


def gaps(count: int) -> None:
    jobs = _distinct_jobs(count, seed=11)
    compile_schedule.cache_clear()
    wall, cpu = _timed(lambda: [(s.min_gap_s(), s.max_gap_s()) for s in (compile_schedule(e, z) for e, z in jobs)])
    print(f"\nvalidation: compile + min/max gap of {count} distinct jobs: {wall:.2f} s wall {cpu:.2f} s cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--gap-jobs", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    for zone in ("UTC", "America/New_York"):
        per_call(zone, args.calls)
    startup(args.jobs)
    gaps(args.gap_jobs)


if __name__ == "__main__":
    main()
