"""How fast the runner starts jobs, compared with plain subprocess.Popen.

For N = 1, 100, 1000 trivial jobs (`true`, and `sh -c 'echo $CHRONO_RUN_ID >> file'`) it
reports the time to launch them all (the daemon's cost), the time until the last one
had started (the supervisors' `started_at` witnesses), the time until all were
collected, and the cost per launch.

    .venv/bin/python bench/bench_spawn.py [--counts 1,100,1000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from chronod.core.model import JobSpec
from chronod.runner.api import LaunchRequest
from chronod.runner.runner import Runner, raise_fd_limit


def jobs(kind: str, witness: Path) -> JobSpec:
    command = ("true",) if kind == "true" else f"echo $CHRONO_RUN_ID >> {witness}"
    return JobSpec(id="bench", owner="bench", schedule="@every 1m", command=command, idempotency_class="idempotent")


def bench_runner(n: int, kind: str, work: Path) -> dict[str, float]:
    witness = work / f"runner-{kind}-{n}.txt"
    runner = Runner(work / f"state-{kind}-{n}")
    spec = jobs(kind, witness)
    t0_wall = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    for i in range(n):
        runner.launch(LaunchRequest(f"r{i}", 1, spec, {"CHRONO_RUN_ID": f"r{i}"}))
    launched = time.perf_counter() - t0
    outcomes = []
    while runner.handles():
        for handle in runner.ready(5):
            outcomes.append(runner.collect(handle))
    done = time.perf_counter() - t0
    assert len(outcomes) == n and all(o.state == "succeeded" for o in outcomes), outcomes[:3]
    if kind == "echo":
        assert len(witness.read_text().splitlines()) == n
    last_start = max(o.started_at for o in outcomes)
    return {"launch": launched, "last_start": (last_start - t0_wall).total_seconds(), "done": done}


def bench_popen(n: int, kind: str, work: Path) -> dict[str, float]:
    witness = work / f"popen-{kind}-{n}.txt"
    argv = ["true"] if kind == "true" else ["/bin/sh", "-c", f"echo $CHRONO_RUN_ID >> {witness}"]
    base = {"PATH": "/usr/bin:/bin", "HOME": "/", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/sh"}
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            argv,
            env={**base, "CHRONO_RUN_ID": f"r{i}"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for i in range(n)
    ]
    launched = time.perf_counter() - t0
    for p in procs:
        p.wait()
    done = time.perf_counter() - t0
    return {"launch": launched, "last_start": launched, "done": done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,100,1000")
    args = parser.parse_args()
    raise_fd_limit()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, pid {os.getpid()}")
    print(f"{'how':<8} {'job':<5} {'N':>5} {'launch all':>11} {'per launch':>11} {'last start':>11} {'all done':>9}")
    with tempfile.TemporaryDirectory(prefix="chrono-bench-") as tmp:
        work = Path(tmp)
        for n in (int(c) for c in args.counts.split(",")):
            for kind in ("true", "echo"):
                for how, fn in (("runner", bench_runner), ("popen", bench_popen)):
                    r = fn(n, kind, work)
                    print(
                        f"{how:<8} {kind:<5} {n:>5} {r['launch']:>10.3f}s {r['launch'] / n * 1e6:>9.0f}us "
                        f"{r['last_start']:>10.3f}s {r['done']:>8.3f}s",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
