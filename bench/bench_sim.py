"""The simulation over many seeds: which invariants held on each, and simulated days per
wall second. CI runs a handful of seeds (tests/sim/test_simulation.py); this runs them all.

    .venv/bin/python bench/bench_sim.py [--seeds 1-20] [--days 0.1] [--jobs 20]
        [--faults crash,stall,clock,outage,registry,dst] [--procs 2] [--store memory|sqlite]

Each seed runs in its own process (`--procs` at once). Exits 1 when any invariant broke on
any seed, after printing the seed, the invariant and its first counterexample."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def one(seed: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "chronod.sim", "--days", str(args.days), "--jobs", str(args.jobs)]
    cmd += ["--seed", str(seed), "--store", args.store, "--json"]
    if args.faults is not None:
        cmd += ["--faults", args.faults]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode not in (0, 1):
        return {"seed": seed, "error": res.stderr[-800:]}
    return json.loads(res.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="1-20")
    p.add_argument("--days", type=float, default=0.1)
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--faults", default=None, help="default: every fault the simulation knows")
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--store", choices=("memory", "sqlite"), default="memory", help="the store under the daemons")
    args = p.parse_args()
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"] * 3
    began = time.monotonic()
    with ThreadPoolExecutor(args.procs) as pool:
        results = list(pool.map(lambda s: one(s, args), seeds(args.seeds)))
    wall = time.monotonic() - began
    bad = 0
    for r in results:
        if "error" in r:
            bad += 1
            print(f"seed {r['seed']}: did not run: {r['error']}")
            continue
        broken = {k: v for k, v in r["invariants"].items() if not v["held"]}
        print(
            f"seed {r['seed']:>4}: {r['processes']:>6} processes, {r['daemon_lives']:>3} daemon lives, "
            f"{r['wall_s']:>7}s, {r['days_per_s']} days/s: " + ("all held" if not broken else "BROKEN")
        )
        for name, inv in broken.items():
            bad += 1
            c = inv["first"]
            print(f"      {name}: {inv['broken']}x, first {c['time']} job {c['job']} run {c['run_id']}: {c['what']}")
    days = args.days * len(results)
    after = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"] * 3
    print(
        f"{len(results)} seeds x {args.days} days x {args.jobs} jobs in {wall:.1f}s wall with {args.procs} at once: "
        f"{days / wall:.4f} simulated days per wall second (load average {' '.join(load)} before, "
        f"{' '.join(after)} after)"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
