"""`python -m chronod.sim`: run one seeded simulation of chronod and check its promises.

Prints each invariant as held or broken, with the first counterexample (seed, time, job,
run id) of a broken one; exits 1 when any is broken, 2 on a usage error."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import sys
import textwrap
import time
from typing import Any

from chronod.sim.fleet import FLEET_FAULTS
from chronod.sim.scenario import FAULTS, SECONDS_JOBS, Config

EXIT_BROKEN = 1
EXIT_USAGE = 2
MAX_DAYS = 3660  # ten years of simulated time
MAX_JOBS = 100_000
MAX_NODES = 64


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m chronod.sim", description="Simulate chronod for DAYS with a fake clock and check its promises."
    )
    p.add_argument("--days", type=float, default=1.0, help="simulated days (default 1, at most 3660)")
    p.add_argument(
        "--jobs", type=int, default=50, help="jobs in the registry at the start (default 50, at most 100000)"
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="daemons on one store; above 1 a fleet (faults crash,stall,zombie,outage); at most 64",
    )
    p.add_argument("--seed", type=int, default=1, help="fixes every choice of the simulation (default 1)")
    p.add_argument(
        "--faults",
        default=None,
        help=f"comma-separated, from {','.join(FAULTS)} (one node) or {','.join(FLEET_FAULTS)} (a fleet); "
        "default all; '' for none",
    )
    p.add_argument(
        "--store",
        choices=("memory", "sqlite"),
        default="memory",
        help="the store under the daemons: memory (default, fast) or the real SQLite store",
    )
    p.add_argument(
        "--seconds-jobs",
        type=int,
        default=SECONDS_JOBS,
        help=f"the most jobs with a schedule in seconds (default {SECONDS_JOBS}); -1: every one drawn (5 %% of jobs)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p.parse_args(argv)


def config(args: argparse.Namespace) -> Config:
    if args.nodes < 1:
        raise ValueError("--nodes must be at least 1")
    known = FAULTS if args.nodes == 1 else FLEET_FAULTS
    given = ",".join(known) if args.faults is None else args.faults
    faults = frozenset(f for f in given.split(",") if f)
    unknown = faults - set(known)
    if unknown:
        kind = "one node" if args.nodes == 1 else "a fleet"
        raise ValueError(
            f"--faults: {', '.join(sorted(unknown))} not simulated for {kind}; choose from {', '.join(known)}"
        )
    if args.days <= 0 or args.jobs < 1:
        raise ValueError("--days must be above 0 and --jobs at least 1")
    if not math.isfinite(args.days) or args.days > MAX_DAYS:
        raise ValueError(f"--days {args.days} is not a number of days up to {MAX_DAYS}")
    if args.jobs > MAX_JOBS:
        raise ValueError(f"--jobs {args.jobs} is more than {MAX_JOBS:,}, the most a simulation holds")
    if args.nodes > MAX_NODES:
        raise ValueError(f"--nodes {args.nodes} is more than {MAX_NODES}, the largest fleet simulated")
    return Config(
        days=args.days,
        jobs=args.jobs,
        nodes=args.nodes,
        seed=args.seed,
        faults=faults,
        store=args.store,
        seconds_jobs=None if args.seconds_jobs < 0 else args.seconds_jobs,
    )


def run(cfg: Config) -> dict[str, Any]:
    """Simulate, check, and say what held: the result as a plain dict."""
    from chronod.sim.driver import Simulation
    from chronod.sim.fleet import FleetSimulation
    from chronod.sim.fleet_checks import check_fleet
    from chronod.sim.invariants import check

    began = time.monotonic()
    sim: Any = FleetSimulation(cfg) if cfg.nodes > 1 else Simulation(cfg)
    try:
        out: Any = sim.run()
    except BaseException:  # interrupted (Ctrl-C, SIGTERM) or failed: leave no working directory behind
        sim.store.close()
        shutil.rmtree(sim.tmp, ignore_errors=True)
        raise
    try:
        simulated = time.monotonic() - began
        results = check_fleet(out) if cfg.nodes > 1 else check(out)
        procs = out.world.procs.values()
        return {
            "seed": cfg.seed,
            "days": cfg.days,
            "jobs": cfg.jobs,
            "nodes": cfg.nodes,
            "store": cfg.store,
            "faults": sorted(cfg.faults),
            "started_at": out.start.isoformat(),
            "wall_s": round(simulated, 2),
            "days_per_s": round(cfg.days / simulated, 4) if simulated else None,
            "processes": len(procs),
            "daemon_lives": len(out.world.lives),
            "invariants": {
                name: {"held": not bad, "broken": len(bad), "first": bad[0].as_dict() if bad else None}
                for name, bad in results.items()
            },
        }
    finally:
        out.close()


def render(result: dict[str, Any], width: int | None = None) -> str:
    """The result for a terminal, each line wrapped to `width` (the terminal's)."""
    width = width or shutil.get_terminal_size().columns
    lines = [
        (
            f"seed {result['seed']}: {result['days']} days, {result['jobs']} jobs, {result['nodes']} node"
            f"{'s' if result['nodes'] > 1 else ''} on the {result['store']} store, faults "
            f"{','.join(result['faults']) or 'none'}; {result['processes']} processes, "
            f"{result['daemon_lives']} daemon lives; {result['wall_s']}s "
            f"({result['days_per_s']} simulated days per second)"
        )
    ]
    for name, inv in result["invariants"].items():
        if inv["held"]:
            lines.append(f"  held    {name}")
        else:
            c = inv["first"]
            lines.append(
                f"  BROKEN  {name}: {inv['broken']} counterexamples; first: seed {result['seed']}, "
                f"{c['time']}, job {c['job']}, run {c['run_id']}: {c['what']}"
            )
    wrap = textwrap.TextWrapper(width=max(width, 40), subsequent_indent=" " * 10, break_on_hyphens=False)
    return "\n".join(wrapped for line in lines for wrapped in wrap.wrap(line))


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = config(args)
    except ValueError as e:
        sys.stderr.write(f"chronod.sim: error: {e}\n")
        return EXIT_USAGE
    result = run(cfg)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return EXIT_BROKEN if any(not inv["held"] for inv in result["invariants"].values()) else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so that a stopped run cleans up after itself
    sys.exit(main())
