"""The simulation over many seeds: which invariants held on each, and simulated days per
wall second, for each mode asked: one node or a fleet (`--nodes`), on the memory store or
the real SQLite store (`--store`). CI runs a handful of seeds (tests/sim/test_simulation.py);
this runs them all.

    .venv/bin/python bench/bench_sim.py [--seeds 1-20] [--days 0.1] [--jobs 20]
        [--nodes 1,8] [--store memory,sqlite] [--faults ...] [--procs 2]

(the defaults: every mode, 20 seeds of 0.1 days of 20 jobs each).

Each seed runs in its own process (`--procs` at once), one mode after another. The days per
second of a mode are its simulated days over the sum of its seeds' simulation times (each
seed's own `wall_s`: the simulated daemons' time, without the checks or the interpreter's
start), so that `--procs` does not change them on an idle machine; the wall time of each
mode, checks included, is printed beside them, and the CPU seconds its processes used
(start-up and checks included): on a shared machine, days per CPU second say more than
days per wall second. Exits 1 when any invariant broke
on any seed, after printing the seed, the invariant and its first counterexample."""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def one(seed: int, nodes: int, store: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "chronod.sim", "--days", str(args.days), "--jobs", str(args.jobs)]
    cmd += ["--seed", str(seed), "--nodes", str(nodes), "--store", store, "--json"]
    if args.faults is not None:
        cmd += ["--faults", args.faults]
    if args.seconds_jobs is not None:
        cmd += ["--seconds-jobs", str(args.seconds_jobs)]
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
    p.add_argument(
        "--seconds-jobs",
        type=int,
        default=None,
        help="the most jobs with a schedule in seconds (default: the simulation's, 10; -1: 5 %% of jobs, the old mix)",
    )
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--nodes", default="1,8", help="comma-separated: 1 (one node) and/or a fleet's size (default 1,8)")
    p.add_argument(
        "--store",
        default="memory,sqlite",
        help="comma-separated: the stores under the daemons, memory and/or sqlite (default both)",
    )
    args = p.parse_args()
    modes = [(int(n), st) for n in args.nodes.split(",") for st in args.store.split(",")]
    bad, summary = 0, []
    for nodes, store in modes:
        if store not in ("memory", "sqlite"):
            p.error(f"--store {store}: choose from memory, sqlite")
        n_bad, line = mode(nodes, store, args)
        bad += n_bad
        summary.append(line)
    if len(summary) > 1:
        print("\n".join(summary))
    return 1 if bad else 0


def loadavg() -> list[str]:
    return open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"] * 3


def mode(nodes: int, store: str, args: argparse.Namespace) -> tuple[int, str]:
    """Run every seed in one mode; print each and the mode's days per second."""
    load = loadavg()
    began = time.monotonic()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with ThreadPoolExecutor(args.procs) as pool:
        results = list(pool.map(lambda s: one(s, nodes, store, args), seeds(args.seeds)))
    wall = time.monotonic() - began
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    what = f"{nodes} node{'s' if nodes > 1 else ''}, {store} store"
    print(f"--- {what}")
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
    ran = [r for r in results if "error" not in r]
    days = args.days * len(ran)
    simulated = sum(r["wall_s"] for r in ran)
    line = (
        f"{what}: {len(ran)} seeds x {args.days} days x {args.jobs} jobs, {simulated:.1f}s simulating "
        f"({wall:.1f}s wall with {args.procs} at once, {cpu:.1f} CPU s): "
        f"{days / simulated if simulated else float('nan'):.4f} simulated days per second, "
        f"{days / cpu if cpu else float('nan'):.4f} per CPU second "
        f"(load average {' '.join(load)} before, {' '.join(loadavg())} after)"
    )
    print(line)
    return bad, line


if __name__ == "__main__":
    sys.exit(main())
