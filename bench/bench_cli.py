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


def wall_ms(args: list[str], runs: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONO_")}
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([CHRONOCTL, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        out.append((time.perf_counter() - start) * 1000)
    return out


def import_profile(args: list[str], top: int) -> list[tuple[int, str]]:
    """(cumulative µs, module) of the `top` costliest imports of one run."""
    code = f"import sys; sys.argv = ['chronoctl', *{args!r}]; from chronoctl.main import main; main()"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=False
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=12)
    opts = parser.parse_args()
    print(f"chronoctl: {CHRONOCTL}; {opts.runs} runs each; load average {os.getloadavg()[0]:.2f}")
    interp = []
    for _ in range(opts.runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=False)
        interp.append((time.perf_counter() - start) * 1000)
    print(f"{'python -c pass (floor)':32} median {statistics.median(interp):7.1f} ms   min {min(interp):7.1f} ms")
    slow = []
    for label, args in CASES.items():
        times = wall_ms(args, opts.runs)
        med = statistics.median(times)
        flag = "" if min(times) < TARGET_MS else f"   OVER {TARGET_MS} ms"
        if flag:
            slow.append(label)
        print(f"{label:32} median {med:7.1f} ms   min {min(times):7.1f} ms{flag}")
    for label in ("--help", "next --cron", "validate examples/jobs.yaml"):
        print(f"\nslowest imports, chronoctl {label} (cumulative ms):")
        for micros, name in import_profile(CASES[label], opts.top):
            print(f"  {micros / 1000:8.1f}  {name}")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
