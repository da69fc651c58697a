"""The launcher alone: CPU and wall for a burst of N runs handed to it at once.

Starts the launcher for many runs (chronod.runner.launchloop) as the daemon does, sends
it N plans of `true` (each in a cgroup of its own under a cgroup this bench makes, with
the fence's generation file in place, as under a daemon), and waits until every run's
result is on disk (its end pipe closed). Prints the launcher's CPU for the burst (its
own, and its reaped children's: the jobs), the wall from the first plan sent to the last
result, and the same per run; after the last round, the launcher's CPU over every round
and the gaps between them (`--gap`), in which it removes the files of the runs the bench
has recorded (discarded), as it does for the daemon. The daemon's share (claims, store, logs) is not in it:
`profile_launch.py` and `bench_daemon.py` measure the whole path.

Root and a writable cgroup v2 are needed (without one, the runs are started without a
cgroup, as in the subreaper fallback).

    .venv/bin/python bench/bench_launcher.py [--runs 1000] [--rounds 3] [--command true] [--gap 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import shutil
import tempfile
import time
from pathlib import Path

from chronod.runner import contain, fence, files
from chronod.runner.launcher import Launcher
from chronod.runner.supervisor import Plan

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ms(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU of `pid`, in ms."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1000 / CLK_TCK, (int(f[13]) + int(f[14])) * 1000 / CLK_TCK


def plans(n: int, state_dir: str, base: str | None, command: str, tag: str) -> list[Plan]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/", "LOGNAME": "root", "USER": "root", "SHELL": "/bin/sh"}
    out = []
    for i in range(n):
        run_id = f"{tag}-{i}"
        out.append(
            Plan(
                run_id=run_id,
                attempt=1,
                argv=("/bin/sh", "-c", command),
                what="shell",
                env={**env, contain.TAG: contain.tag_of(state_dir, run_id, 1)},
                workdir="/",
                stdin=None,
                creds=None,
                timeout_s=None,
                kill_grace_s=10,
                limit_bytes=64 * 1024,
                nofile=(1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]),
                state_dir=state_dir,
                cgroup=os.path.join(base, f"{run_id}.1") if base else None,
                generation=1,
            )
        )
    return out


def burst(launcher: Launcher, batch: list[Plan]) -> tuple[float, float, float, int]:
    """(wall s, launcher ms, jobs ms, runs without a result)."""
    own0, kids0 = cpu_ms(launcher.pid)
    t0 = time.monotonic()
    ends = [launcher.launch(p)[1] for p in batch]
    poller = select.epoll()
    for fd in ends:
        poller.register(fd, select.EPOLLIN)
    left = set(ends)
    while left:
        for fd, _ in poller.poll(10):
            poller.unregister(fd)
            left.discard(fd)
            os.close(fd)
    wall = time.monotonic() - t0
    time.sleep(0.3)  # the last reaps are counted
    own1, kids1 = cpu_ms(launcher.pid)
    missing = sum(1 for p in batch if not os.path.exists(files.path_of(p.state_dir, p.run_id, p.attempt, files.RESULT)))
    for p in batch:
        launcher.discard(p.state_dir, p.run_id, p.attempt)
    return wall, own1 - own0, kids1 - kids0, missing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--command", default="true")
    ap.add_argument("--gap", type=float, default=5.0, help="seconds between bursts (and after the last)")
    args = ap.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # an end pipe per run, as the daemon's
    state = tempfile.mkdtemp(prefix="chrono-bench-launcher-")
    os.chmod(state, 0o700)
    fence.take_over(state, 1)
    home = contain.own_dir()
    base = os.path.join(home, f"chrono-bench-launcher.{os.getpid()}") if home else None
    if base is not None:
        try:
            os.mkdir(base)
        except OSError:
            base = None
    launcher = Launcher()
    time.sleep(0.5)  # its interpreter is up
    own0, kids0 = cpu_ms(launcher.pid)
    print(f"{args.runs} runs of `{args.command}` per burst, cgroups {'yes' if base else 'no'}")
    print("round | wall s | launcher CPU ms | jobs CPU ms | per run ms (launcher + jobs) | no result | load")
    try:
        for r in range(args.rounds):
            batch = plans(args.runs, state, base, args.command, f"r{r}")
            wall, own, kids, missing = burst(launcher, batch)
            print(
                f"{r + 1} | {wall:.3f} | {own:.0f} | {kids:.0f} | {(own + kids) / args.runs:.2f} "
                f"({own / args.runs:.2f} + {kids / args.runs:.2f}) | {missing} | {os.getloadavg()[0]:.1f}"
            )
            time.sleep(args.gap)
        own1, kids1 = cpu_ms(launcher.pid)  # with the files of recorded runs removed meanwhile
        n = args.runs * args.rounds
        print(
            f"all rounds and the gaps after them: launcher {own1 - own0:.0f} ms, jobs {kids1 - kids0:.0f} ms; "
            f"per run {(own1 - own0) / n:.2f} + {(kids1 - kids0) / n:.2f} ms"
        )
    finally:
        launcher.close()
        time.sleep(1)
        if base is not None:
            for name in os.listdir(base):
                if os.path.isdir(os.path.join(base, name)):
                    contain.remove(os.path.join(base, name))
            contain.remove(base)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
