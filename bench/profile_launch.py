"""Where chronod's time goes when N jobs fall due in the same second (the launch path).

One chronod on SQLite carries N jobs (`true`, `tolerance_s: 0`) that fire twice in one
minute, 30 s apart:

1. the first burst is sampled by py-spy (`record --subprocesses --format raw`, so the
   daemon, its zygote and the Python supervisors it forks), and measured in CPU time
   from /proc: the daemon's own, and the zygote's with its reaped children (each
   supervisor and, below it, the job);
2. the second burst runs under `strace -c -f` attached to the daemon and the zygote
   (syscall counts and time; strace slows what it traces, so no timing from this one).

Prints the top Python frames (own samples and inclusive), the top syscalls, and CPU
milliseconds per run. py-spy and strace must be installed (`pip install py-spy`,
`apt-get install strace`). Run as root (py-spy and strace attach to other processes).

    .venv/bin/python bench/profile_launch.py [--jobs 500] [--keep]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_daemon import (  # the same daemon wrapper and file writer
    Chronod,
    write_registry_file,
)

BIN = Path(sys.executable).parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int, children: bool = False) -> int:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = int(f[11]) + int(f[12])
    return own + (int(f[13]) + int(f[14]) if children else 0)


def zygote_of(pid: int) -> int:
    """The daemon's helper: the launcher for many runs, or (before it) the zygote."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if any(name in Path(f"/proc/{child}/cmdline").read_text() for name in ("launchloop", "zygote")):
            return int(child)
    raise RuntimeError("no launcher or zygote under the daemon")


def wait_until(t: datetime) -> None:
    time.sleep(max(0.0, (t - datetime.now(UTC)).total_seconds()))


def top_frames(raw: Path, n: int = 15) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    """From py-spy's raw (collapsed) stacks: (own samples by frame, inclusive samples by
    frame, total samples)."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        total += k
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")" if " (" in f else f
            for f in stack.split(";")
        ]
        own[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    return own.most_common(n), incl.most_common(n), total


def strace_top(text: str, n: int = 15) -> list[str]:
    lines = text.splitlines()
    body = [ln for ln in lines if ln.strip() and not ln.startswith(("%", "-", "total")) and "syscall" not in ln]
    total = [ln for ln in lines if ln.strip().endswith("total")]
    return body[:n] + total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    py_spy, strace = shutil.which("py-spy", path=str(BIN)) or shutil.which("py-spy"), shutil.which("strace")
    if not py_spy or not strace:
        sys.exit("profile_launch: needs py-spy (pip install py-spy) and strace")
    work = Path(tempfile.mkdtemp(prefix="chrono-profile-launch-"))
    reg = work / "registry"
    reg.mkdir()
    now = datetime.now(UTC)
    minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if (minute - now).total_seconds() < 20:
        minute += timedelta(minutes=1)
    first, second = minute + timedelta(seconds=10), minute + timedelta(seconds=40)
    jobs = [
        {"id": f"p.{i}", "schedule": f"10,40 {minute.minute} {minute.hour} * * *", "command": "true"}
        for i in range(args.jobs)
    ]
    write_registry_file(
        reg / "burst.yaml",
        jobs,
        {
            "owner": "bench",
            "timezone": "UTC",
            "tolerance_s": 0,
            "idempotency_class": "idempotent",
            "tolerance_reason": "the benchmark measures launches",
            "catchup": "none",
        },
    )
    daemon = Chronod(work, reg, "profile")
    out = []
    try:
        daemon.start()
        pid = daemon.proc.pid
        zyg = zygote_of(pid)
        wait_until(first - timedelta(seconds=3))
        d0, z0 = cpu_ticks(pid), cpu_ticks(zyg, children=True)
        raw = work / "pyspy.txt"
        spy = subprocess.Popen(
            [
                py_spy,
                "record",
                "--pid",
                str(pid),
                "--subprocesses",
                "--rate",
                "250",
                "--format",
                "raw",
                "--nonblocking",
                "--duration",
                "12",
                "--output",
                str(raw),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        spy.wait(60)
        time.sleep(3)  # every run ended and was reaped
        d1, z1 = cpu_ticks(pid), cpu_ticks(zyg, children=True)
        dump = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, check=False).stdout
        wait_until(second - timedelta(seconds=3))
        st_file = work / "strace.txt"
        st = subprocess.Popen(
            [strace, "-c", "-f", "-o", str(st_file), "-p", str(pid), "-p", str(zyg)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(second + timedelta(seconds=12))
        st.send_signal(signal.SIGINT)
        try:
            st.wait(60)
        except subprocess.TimeoutExpired:  # seen once: strace stuck detaching from a vfork child
            st.kill()
            st.wait()
        own, incl, total = top_frames(raw)
        n = args.jobs
        out.append(
            f"{n} jobs due in one second, chronod on SQLite; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
        )
        out.append(
            f"CPU for the burst: daemon {(d1 - d0) * 1000 / CLK_TCK:.0f} ms, zygote + supervisors + jobs "
            f"{(z1 - z0) * 1000 / CLK_TCK:.0f} ms; per run {(d1 - d0 + z1 - z0) * 1000 / CLK_TCK / n:.1f} ms "
            f"(daemon {(d1 - d0) * 1000 / CLK_TCK / n:.1f} ms)"
        )
        out.append(f"\npy-spy, {total} samples at 250 Hz (daemon, zygote, supervisors); own samples:")
        out += [f"  {k:6d} {100 * k / max(total, 1):5.1f} %  {f}" for f, k in own]
        out.append("inclusive:")
        out += [f"  {k:6d} {100 * k / max(total, 1):5.1f} %  {f}" for f, k in incl]
        out.append("\nstrace -c -f (daemon and zygote, their children), second burst:")
        out += ["  " + ln for ln in strace_top(st_file.read_text() if st_file.exists() else "")] or ["  (none)"]
        out.append("\npy-spy dump of the daemon after the first burst:")
        out += ["  " + ln for ln in dump.splitlines()[:25]]
    finally:
        daemon.stop()
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(out))


if __name__ == "__main__":
    main()
