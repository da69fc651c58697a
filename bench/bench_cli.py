"""Wall time of the chronoctl commands that need no database, and where start-up goes.

Runs the installed binary (next to this interpreter) as a subprocess: `--help`,
`next --cron ...`, `validate examples/jobs.yaml`, `explain --cron`, `forecast`; median
and minimum of N runs each (the minimum is what the machine can do; the median what it
did while busy). Then the largest cumulative entries of `python -X importtime` for each.

    .venv/bin/python bench/bench_cli.py [--runs 10] [--top 12]

Target (issue "Core"): under 300 ms wall for every one of these.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHRONOCTL = shutil.which("chronoctl", path=str(BIN)) or "chronoctl"
TARGET_MS = 300

CASES = {
    "--help": ["--help"],
    "next --cron": ["next", "--cron", "30 2 * * *", "--tz", "America/New_York", "--count", "5", "--json"],
    "validate examples/jobs.yaml": ["validate", str(ROOT / "examples" / "jobs.yaml")],
    "explain --cron": ["explain", "--cron", "30 2 * * *", "--tz", "America/New_York"],
    "forecast 24h/1m": ["forecast", "--registry", str(ROOT / "examples"), "--json"],
}


def _child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_ms(argv: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) milliseconds of `runs` runs of `argv`. CPU time is the
    steadier figure on a busy machine; wall time is what an operator waits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONO_")}
    wall, cpu = [], []
    for _ in range(runs):
        cpu0, start = _child_cpu_s(), time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((_child_cpu_s() - cpu0) * 1000)
    return wall, cpu


def _line(label: str, wall: list[float], cpu: list[float]) -> str:
    over = "" if min(wall) < TARGET_MS else f"   OVER {TARGET_MS} ms"
    return (
        f"{label:30} wall median {statistics.median(wall):6.0f} min {min(wall):6.0f} ms"
        f"   cpu median {statistics.median(cpu):6.0f} ms{over}"
    )


def import_profile(args: list[str], top: int) -> list[tuple[int, str]]:
    """(cumulative µs, module) of the `top` costliest imports of one run."""
    code = f"import sys; sys.argv = ['chronoctl', *{args!r}]; from chronoctl.main import main; main()"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=False)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|")
        rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=12)
    opts = parser.parse_args()
    print(f"chronoctl: {CHRONOCTL}; {opts.runs} runs each; load average {os.getloadavg()[0]:.2f}")
    print(_line("python -c pass (the floor)", *timed_ms([sys.executable, "-c", "pass"], opts.runs)))
    slow = []
    for label, args in CASES.items():
        wall, cpu = timed_ms([CHRONOCTL, *args], opts.runs)
        print(_line(label, wall, cpu))
        if min(wall) >= TARGET_MS:
            slow.append(label)
    for label in ("--help", "next --cron", "validate examples/jobs.yaml"):
        print(f"\nslowest imports, chronoctl {label} (cumulative ms):")
        for micros, name in import_profile(CASES[label], opts.top):
            print(f"  {micros / 1000:8.1f}  {name}")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
