"""What one start of a job in a cgroup of its own costs, four ways, side by side.

The launcher (chronod.runner.launchloop) starts every job in the run's own cgroup. A child
begins in its parent's cgroup, so a job can get there in three ways; the fourth row is a
start without a cgroup, the floor:

- `fork`: fork the launcher, the child enters the cgroup and execs (what the launcher did
  before: the child runs Python between fork and exec);
- `shell`: posix_spawn a shell that enters the cgroup and execs the job (one more exec);
- `step-in`: the launcher steps into the cgroup, posix_spawns the job, steps back (what
  it does now);
- `spawn`: posix_spawn, no cgroup.

Each starts N `/bin/true` from a process that has imported the launcher's modules, one
mode after the other, ROUNDS times, and prints the CPU per start of the parent and of the
children (getrusage), and the wall per start. Root and a writable cgroup v2 are needed.

    .venv/bin/python bench/bench_cgroup_start.py [--starts 500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
import time
from collections.abc import Callable

from chronod.runner import contain, launchloop  # noqa: F401  (a launcher-sized interpreter)

NULL = os.open(os.devnull, os.O_RDWR)
IGNORED = [s for s in signal.valid_signals() if signal.getsignal(s) == signal.SIG_IGN]
ENV = {"PATH": "/usr/bin:/bin"}
SHELL = 'echo 0 >"$0/cgroup.procs" || exit 125; exec "$@"'


def _spawn(path: str, argv: list[str]) -> int:
    actions = [(os.POSIX_SPAWN_DUP2, NULL, fd) for fd in (0, 1, 2)]
    return os.posix_spawn(path, argv, ENV, file_actions=actions, setsid=True, setsigdef=IGNORED)


def fork(cgroup: str) -> int:
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # as chronod.runner.supervisor._exec_job does
        try:
            contain.enter(cgroup)
            os.setsid()
            for fd in (0, 1, 2):
                os.dup2(NULL, fd)
            for sig in IGNORED:
                signal.signal(sig, signal.SIG_DFL)
            os.execve("/bin/true", ["/bin/true"], ENV)
        finally:
            os._exit(127)
    os.close(err_w)
    os.read(err_r, 64)  # EOF at the exec
    os.close(err_r)
    return pid


def shell(cgroup: str) -> int:
    return _spawn("/bin/sh", ["sh", "-c", SHELL, cgroup, "/bin/true"])


def step_in(cgroup: str, home: str) -> int:
    contain.enter(cgroup)
    try:
        return _spawn("/bin/true", ["/bin/true"])
    finally:
        contain.enter(home)


def measure(name: str, start: Callable[[int], int], n: int) -> dict[str, float]:
    self0, kids0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    pids = [start(i) for i in range(n)]
    for pid in pids:
        os.waitpid(pid, 0)
    wall = time.monotonic() - t0
    self1, kids1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    own = self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime
    kids = kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime
    return {"mode": name, "parent": 1000 * own / n, "children": 1000 * kids / n, "wall": 1000 * wall / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    here = contain.detect("/bench-cgroup-start")
    if here.base is None:
        sys.exit(f"no cgroup v2 to start in: {here.why}")
    home = contain.own_dir()
    assert home is not None
    base = here.base

    def cgroup(i: int) -> str:
        path = os.path.join(base, f"s{i}")
        contain.create(path)
        return path

    modes: dict[str, Callable[[int], int]] = {
        "fork": lambda i: fork(cgroup(i)),
        "shell": lambda i: shell(cgroup(i)),
        "step-in": lambda i: step_in(cgroup(i), home),
        "spawn": lambda i: _spawn("/bin/true", ["/bin/true"]),
    }
    print(f"load average {os.getloadavg()[0]:.2f}; {args.starts} starts of /bin/true per row")
    print("| mode | round | parent CPU ms/start | children CPU ms/start | total | wall ms/start |")
    print("| --- | --- | --- | --- | --- | --- |")
    try:
        for r in range(1, args.rounds + 1):
            for name, start in modes.items():
                m = measure(name, start, args.starts)
                total = m["parent"] + m["children"]
                print(f"| {name} | {r} | {m['parent']:.3f} | {m['children']:.3f} | {total:.3f} | {m['wall']:.3f} |")
                for i in range(args.starts):
                    contain.remove(os.path.join(base, f"s{i}"))
    finally:
        contain.sweep(base)
        contain.remove(base)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
