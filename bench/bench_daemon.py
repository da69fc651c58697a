"""chronod against Debian cron on this machine: fire lag, idle cost, memory, start-up.

1. Fire lag. Debian cron (`cron -f`, installed with apt-get when missing) and chronod run
   side by side for the whole benchmark; each gets N = 1, 100, 1,000 jobs due at the
   same minute (`M H * * *`, chronod with `tolerance_s: 0`), and the two never fire in
   the same minute, so they do not compete for the cores. Every job appends
   `id start-time` (`date +%s.%N`) to a witness file. Reported per N and scheduler: fire
   lag p50/p99/max (start minus the minute), the time until the last job started, what
   was missed or doubled, and the ratios chronod/cron.
   Cron runs in a private mount namespace whose /etc/cron.d holds only chrono-bench (and
   whose /etc/crontab, spool and /run are empty), so it never runs another crontab on
   this host and another cron's crontab never sees these jobs; the namespace and its
   crontab vanish when cron exits.
2. Idle cost with 10,000 jobs due hours from now: the daemon's CPU time over 60 s from
   /proc/PID/stat, and its wake-ups (strace on epoll_wait/select/poll for 30 s, and the
   voluntary context switches from /proc/PID/status).
3. Resident memory (VmRSS) with 10,000 jobs, after `event=daemon.ready`.
4. Start-up with 100,000 jobs (100 files x 1,000, varied expressions and zones): exec to
   `event=daemon.ready`, then the same start-up in-process with a breakdown by phase.

Results go to stdout as tables and to bench/results/daemon-<time>.json.

    .venv/bin/python bench/bench_daemon.py [--counts 1,100,1000] [--skip fire,idle,startup]

Targets (issue 3): single-job lag p50 < 20 ms; last of 1,000 started within 1.5 s and at
most 0.3x cron's; nothing missed or doubled; idle CPU < 0.1 % of a core and no wake-ups
between fires with 10,000 jobs; RSS < 120 MB with 10,000 jobs; start-up with 100,000
jobs < 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHRONOD = shutil.which("chronod", path=str(BIN)) or "chronod"
CRON_FILE = "/etc/cron.d/chrono-bench"
ZONES = (
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Asia/Tokyo",
    "Australia/Sydney",
    "America/Los_Angeles",
    "Europe/London",
    "Asia/Kolkata",
)
CLK_TCK = os.sysconf("SC_CLK_TCK")

TARGETS = {
    "lag_p50_1_ms": 20.0,
    "last_start_1000_s": 1.5,
    "last_start_1000_ratio": 0.3,
    "idle_cpu_pct": 0.1,
    "rss_10k_mb": 120.0,
    "startup_100k_s": 10.0,
}


# --------------------------------------------------------------------------- helpers


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (values need not be sorted)."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def write_registry_file(path: Path, jobs: list[dict], defaults: dict) -> None:
    """A job file in the registry format (plain YAML written by hand: fast and readable)."""
    lines = ["defaults:"] + [f"  {k}: {json.dumps(v)}" for k, v in defaults.items()] + ["jobs:"]
    for job in jobs:
        first = True
        for k, v in job.items():
            lines.append(f"  {'- ' if first else '  '}{k}: {json.dumps(v)}")
            first = False
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)


class Chronod:
    """A chronod child with its own SQLite database, registry and log file."""

    def __init__(self, work: Path, registry: Path, name: str):
        self.work, self.registry = work, registry
        self.db = work / f"{name}.sqlite"
        self.log_path = work / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.t_exec = 0.0

    def start(self, timeout_s: float = 600) -> float:
        """Start and wait for `event=daemon.ready`; return seconds from exec to ready."""
        self.log_file = open(self.log_path, "w")
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
        self.t_exec = time.monotonic()
        self.proc = subprocess.Popen(
            [CHRONOD, "--registry", str(self.registry), "--db", str(self.db)],
            stdin=subprocess.DEVNULL,
            stdout=self.log_file,
            stderr=self.log_file,
            env=env,
            start_new_session=True,
        )
        while time.monotonic() - self.t_exec < timeout_s:
            if "event=daemon.ready" in self.log_path.read_text(errors="replace"):
                return time.monotonic() - self.t_exec
            if self.proc.poll() is not None:
                raise RuntimeError(f"chronod exited with {self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.05)
        raise RuntimeError(f"chronod not ready after {timeout_s}s:\n{self.tail()}")

    def tail(self, n: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log_file.close()


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_status(pid: int) -> dict[str, str]:
    out = {}
    out.update(proc_status_path(Path(f"/proc/{pid}/status")))
    return out


def voluntary_switches(pid: int) -> dict[str, int]:
    """Voluntary context switches of every thread of `pid`, by thread name (each sleep that
    ended is one: a thread that never wakes adds none)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            st = proc_status_path(task / "status")
        except OSError:
            continue
        out[f"{st['Name']}/{task.name}"] = int(st["voluntary_ctxt_switches"])
    return out


def proc_status_path(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def rss_mb(pid: int) -> float:
    return int(proc_status(pid)["VmRSS"].split()[0]) / 1024


# --------------------------------------------------------------------------- cron


def ensure_cron() -> str:
    """The path of Debian's cron, installing the package when it is missing."""
    found = shutil.which("cron") or (os.path.exists("/usr/sbin/cron") and "/usr/sbin/cron")
    if not found:
        print("installing Debian cron with apt-get ...", flush=True)
        subprocess.run(
            ["apt-get", "install", "-y", "cron"],
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        found = shutil.which("cron") or "/usr/sbin/cron"
    return found


def cron_version(cron: str) -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "cron"], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


class Cron:
    """Debian cron in a private mount namespace that holds only our crontab."""

    def __init__(self, cron: str, crontab_text: str, work: Path):
        self.cron, self.text, self.work = cron, crontab_text, work
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        src = self.work / "chrono-bench.crontab"
        src.write_text(self.text)
        empty = self.work / "empty-crontab"
        empty.write_text("")
        script = (
            "set -e; "
            "mount -t tmpfs -o mode=0755 chrono-bench /etc/cron.d; "
            f"cp {src} {CRON_FILE}; chmod 0644 {CRON_FILE}; "
            f"mount --bind {empty} /etc/crontab; "
            "mount -t tmpfs -o mode=1730 chrono-bench /var/spool/cron/crontabs; "
            "mount -t tmpfs -o mode=0755 chrono-bench /run; "
            f"exec {self.cron} -f"
        )
        self.log = open(self.work / "cron.log", "w")
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            start_new_session=True,
        )
        time.sleep(1.0)
        if self.proc.poll() is not None:
            raise RuntimeError(f"cron exited with {self.proc.returncode}: {(self.work / 'cron.log').read_text()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()


# --------------------------------------------------------------------------- 1. fire lag


def witness_cmd(witness: Path, job_id: str) -> str:
    return f'echo "{job_id} $(date +%s.%N)" >> {witness}'


def read_witness(path: Path) -> dict[str, list[float]]:
    seen: dict[str, list[float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                seen.setdefault(parts[0], []).append(float(parts[1]))
    return seen


def fire_stats(seen: dict[str, list[float]], ids: list[str], minute: float) -> dict:
    starts = [min(seen[i]) for i in ids if i in seen]
    lags = [s - minute for s in starts]
    return {
        "n": len(ids),
        "started": len(starts),
        "missed": sum(1 for i in ids if i not in seen),
        "doubled": sum(1 for i in ids if len(seen.get(i, ())) > 1),
        "lag_p50_s": pct(lags, 50),
        "lag_p99_s": pct(lags, 99),
        "lag_max_s": max(lags) if lags else float("nan"),
        "last_start_s": max(lags) if lags else float("nan"),
        "first_start_s": min(lags) if lags else float("nan"),
    }


def bench_fire(counts: list[int], work: Path) -> dict:
    cron_bin = ensure_cron()
    reg = work / "fire-registry"
    reg.mkdir()
    wit_chronod, wit_cron = work / "witness-chronod.txt", work / "witness-cron.txt"
    # Both start now; the first fire is far enough ahead for chronod to be ready.
    first = datetime.now(timezone.utc).replace(second=0, microsecond=0) + timedelta(minutes=2)
    if (first - datetime.now(timezone.utc)).total_seconds() < 75:
        first += timedelta(minutes=1)
    plan = []  # (scheduler, N, minute, ids)
    for k, n in enumerate(counts):
        for s, who in enumerate(("chronod", "cron")):
            minute = first + timedelta(minutes=2 * k + s)
            prefix = f"{who[:2]}{n}-"
            plan.append((who, n, minute, [f"{prefix}{i}" for i in range(n)]))
    jobs, cron_lines = [], ["SHELL=/bin/sh", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    for who, _n, minute, ids in plan:
        local = minute.astimezone()  # cron reads the host's zone; chronod is told UTC
        for i in ids:
            if who == "chronod":
                jobs.append(
                    {
                        "id": f"bench.{i}",
                        "schedule": f"{minute.minute} {minute.hour} * * *",
                        "command": witness_cmd(wit_chronod, i),
                    }
                )
            else:
                # cron turns an unescaped % into a newline
                cron_lines.append(
                    f"{local.minute} {local.hour} * * * root " + witness_cmd(wit_cron, i).replace("%", "\\%")
                )
    write_registry_file(
        reg / "fire.yaml",
        jobs,
        {
            "owner": "bench",
            "timezone": "UTC",
            "tolerance_s": 0,
            "idempotency_class": "idempotent",
            "tolerance_reason": "the benchmark measures fire lag",
            "catchup": "none",
        },
    )
    daemon = Chronod(work, reg, "fire")
    cron = Cron(cron_bin, "\n".join(cron_lines) + "\n", work)
    results: dict = {"cron_version": cron_version(cron_bin), "plan": [], "by_n": {}}
    try:
        ready = daemon.start()
        cron.start()
        print(
            f"chronod ready in {ready:.2f}s with {len(jobs)} jobs; cron {results['cron_version']} running; "
            f"fires at {', '.join(f'{w} N={n} {m:%H:%M}' for w, n, m, _ in plan)} UTC",
            flush=True,
        )
        for who, n, minute, ids in plan:
            witness = wit_chronod if who == "chronod" else wit_cron
            deadline = minute.timestamp() + 50
            while time.time() < deadline:
                seen = read_witness(witness)
                if time.time() > minute.timestamp() and all(i in seen for i in ids):
                    break
                time.sleep(0.5)
            time.sleep(1.0)  # a doubled start would show up right after
            stats = fire_stats(read_witness(witness), ids, minute.timestamp())
            results["by_n"].setdefault(str(n), {})[who] = stats
            print(
                f"  {who:<8} N={n:<5} lag p50 {stats['lag_p50_s'] * 1000:8.1f} ms  p99 "
                f"{stats['lag_p99_s'] * 1000:8.1f} ms  last start {stats['last_start_s']:7.3f} s  "
                f"missed {stats['missed']} doubled {stats['doubled']}",
                flush=True,
            )
        results["chronod_rss_after_mb"] = rss_mb(daemon.proc.pid)
        results["chronod_cpu_s"] = proc_cpu_s(daemon.proc.pid)
        results["chronod_log_lag_ms"] = daemon_lags(daemon.log_path)
    finally:
        cron.stop()
        daemon.stop()
        if os.path.exists(CRON_FILE) and not os.path.ismount("/etc/cron.d"):
            pass  # our crontab lived only inside the namespace: nothing on the host to remove
    return results


def daemon_lags(log: Path) -> dict:
    """The lag chronod itself logged at each launch (its view: claim to fork returned)."""
    lags = []
    for line in log.read_text(errors="replace").splitlines():
        if "event=run.started" in line:
            for part in line.split():
                if part.startswith("lag_ms="):
                    lags.append(float(part[7:]))
    return {"count": len(lags), "p50": pct(lags, 50), "max": max(lags) if lags else None}


# --------------------------------------------------------------------------- 2+3. idle, memory


def bench_idle(work: Path, jobs_n: int = 10_000, cpu_window_s: float = 60, strace_s: float = 30) -> dict:
    reg = work / "idle-registry"
    reg.mkdir()
    now = datetime.now(timezone.utc)
    per = 1000
    for f in range(jobs_n // per):
        jobs = []
        for j in range(per):
            i = f * per + j
            hour = (now.hour + 3 + i % 6) % 24  # 3 to 8 hours away: nothing falls due meanwhile
            jobs.append({"id": f"idle.f{f}.j{j}", "schedule": f"{i % 60} {hour} * * *", "command": "true"})
        write_registry_file(
            reg / f"idle{f:03d}.yaml", jobs, {"owner": "bench", "timezone": "UTC", "idempotency_class": "idempotent"}
        )
    daemon = Chronod(work, reg, "idle")
    out: dict = {"jobs": jobs_n}
    try:
        out["startup_s"] = daemon.start()
        pid = daemon.proc.pid
        time.sleep(2)  # let the ready line's aftermath settle
        out["rss_mb"] = rss_mb(pid)
        sw0, cpu0, t0 = voluntary_switches(pid), proc_cpu_s(pid), time.monotonic()
        trace = strace_wakeups(pid, strace_s) if shutil.which("strace") else None
        time.sleep(max(0.0, cpu_window_s - (time.monotonic() - t0)))
        cpu1, t1, sw1 = proc_cpu_s(pid), time.monotonic(), voluntary_switches(pid)
        out["cpu_s"] = cpu1 - cpu0
        out["window_s"] = t1 - t0
        out["cpu_pct"] = 100 * out["cpu_s"] / out["window_s"]
        per_thread = {name: n - sw0.get(name, 0) for name, n in sw1.items()}
        out["voluntary_ctxt_switches_by_thread"] = per_thread
        out["voluntary_ctxt_switches"] = sum(per_thread.values())
        out["strace"] = trace
        out["rss_mb_after"] = rss_mb(pid)
    finally:
        daemon.stop()
    return out


def strace_wakeups(pid: int, seconds: float) -> dict:
    """Count the daemon's wait calls (and every other syscall) for `seconds`."""
    out = Path(tempfile.mkstemp(prefix="chrono-strace-")[1])
    try:
        p = subprocess.Popen(
            ["strace", "-f", "-qq", "-o", str(out), "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(seconds)
        p.send_signal(signal.SIGINT)
        p.wait(10)
        lines = [ln for ln in out.read_text().splitlines() if ln.strip()]
    finally:
        out.unlink(missing_ok=True)
    waits = [ln for ln in lines if any(w in ln for w in WAIT_CALLS)]
    # the call in progress when strace attached/detached shows up as resumed/unfinished
    returned = [ln for ln in waits if "unfinished" not in ln]
    by_thread: dict[str, int] = {}
    for ln in lines:
        by_thread[ln.split()[0]] = by_thread.get(ln.split()[0], 0) + 1
    return {
        "seconds": seconds,
        "syscalls": len(lines),
        "wait_calls_returned": len(returned),
        "syscalls_by_thread": by_thread,
        "sample": lines[:6],
    }


WAIT_CALLS = (
    "epoll_wait",
    "epoll_pwait",
    "select(",
    "pselect6(",
    "poll(",
    "ppoll(",
    "futex(",
    "clock_nanosleep(",
    "nanosleep(",
)


# --------------------------------------------------------------------------- 4. start-up


def make_big_registry(reg: Path, files: int = 100, per: int = 1000, seed: int = 3) -> None:
    """Varied expressions and zones; most of them fire at a fixed time of day."""
    rng = random.Random(seed)
    for f in range(files):
        jobs = []
        for j in range(per):
            kind = rng.randrange(6)
            if kind == 0:
                s = f"{rng.randrange(60)} {rng.randrange(24)} * * *"
            elif kind == 1:
                s = f"{rng.randrange(60)} {rng.randrange(24)} * * 1-5"
            elif kind == 2:
                s = f"{rng.randrange(60)} {rng.randrange(24)} {rng.randrange(1, 29)} * *"
            elif kind == 3:
                s = f"{rng.randrange(60)} */{rng.choice((2, 3, 4, 6, 8, 12))} * * *"
            elif kind == 4:
                s = f"*/{rng.choice((5, 10, 15, 20, 30))} * * * *"
            else:
                s = f"@every {rng.choice((1, 2, 6, 12, 24))}h"
            jobs.append({"id": f"big.f{f}.j{j}", "schedule": s, "timezone": rng.choice(ZONES), "command": "true"})
        write_registry_file(reg / f"big{f:03d}.yaml", jobs, {"owner": "bench", "idempotency_class": "idempotent"})


BREAKDOWN = r"""
import sys, time
from collections import defaultdict
spent = defaultdict(float)
def timed(owner, name, label):
    fn = getattr(owner, name)
    def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            spent[label] += time.perf_counter() - t
    setattr(owner, name, wrapper)
t0 = time.perf_counter()
from chronod import specfile
from chronod.core import validate
from chronod.daemon import loop, main, occurrences, recovery, runs
from chronod.store import sql
spent["imports"] = time.perf_counter() - t0
timed(specfile, "parse_text", "registry parse (YAML)")
timed(specfile, "validate_document", "validation (incl. schedule compile)")
timed(runs, "compile_schedule", "schedule compile in the loop")
timed(sql.SqlStore, "sync_jobs", "store: sync job definitions")
timed(sql.SqlStore, "insert_runs", "store: insert next occurrences")
timed(sql.SqlStore, "pending", "store: read pending")
timed(occurrences.Occurrences, "load", "materialization (next occurrence per job, incl. store)")
timed(sql.SqlStore, "set_node_info", "store: node info (spec hashes)")
timed(loop.Daemon, "reload", "reload (registry + apply)")
timed(recovery.Recovery, "adopt", "adopt")
timed(loop.Daemon, "reconcile", "reconcile")
loop.Daemon.run_forever = lambda self: None
t = time.perf_counter()
code = main.main(["--registry", sys.argv[1], "--db", sys.argv[2]])
spent["total (main, after imports)"] = time.perf_counter() - t
import json
print(json.dumps(dict(spent)))
"""


def bench_startup(work: Path, files: int = 100, per: int = 1000) -> dict:
    reg = work / "big-registry"
    reg.mkdir()
    t = time.perf_counter()
    make_big_registry(reg, files, per)
    out: dict = {"jobs": files * per, "generate_s": time.perf_counter() - t}
    daemon = Chronod(work, reg, "big")
    try:
        out["exec_to_ready_s"] = daemon.start()
        out["rss_mb"] = rss_mb(daemon.proc.pid)
        out["cpu_s_to_ready"] = proc_cpu_s(daemon.proc.pid)
    finally:
        daemon.stop()
    # A second start on the same database: definitions and next occurrences are stored.
    again = Chronod(work, reg, "big")
    try:
        out["restart_exec_to_ready_s"] = again.start()
    finally:
        again.stop()
    db = work / "big-breakdown.sqlite"
    r = subprocess.run(
        [sys.executable, "-c", BREAKDOWN, str(reg), str(db)], capture_output=True, text=True, cwd=str(ROOT)
    )
    try:
        out["breakdown_s"] = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        out["breakdown_error"] = r.stderr[-2000:]
    return out


# --------------------------------------------------------------------------- report


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def report(res: dict) -> None:
    print()
    fire = res.get("fire")
    if fire:
        load = " -> ".join(" ".join(f"{x:.2f}" for x in res[k]) for k in ("load_before", "load_after") if k in res)
        print(f"Fire lag (s after the minute), chronod vs Debian cron {fire['cron_version']}; load average {load}")
        print(f"{'N':>5} {'who':<8} {'p50':>9} {'p99':>9} {'max':>9} {'last start':>11} {'missed':>7} {'doubled':>8}")
        for n, by in fire["by_n"].items():
            for who in ("chronod", "cron"):
                s = by.get(who)
                if s:
                    print(
                        f"{n:>5} {who:<8} {s['lag_p50_s']:9.4f} {s['lag_p99_s']:9.4f} {s['lag_max_s']:9.4f} "
                        f"{s['last_start_s']:11.4f} {s['missed']:7d} {s['doubled']:8d}"
                    )
            if "chronod" in by and "cron" in by:
                c, k = by["chronod"], by["cron"]
                by["ratio"] = {m: ratio(c[m], k[m]) for m in ("lag_p50_s", "lag_p99_s", "lag_max_s", "last_start_s")}
                r = by["ratio"]
                print(
                    f"{n:>5} {'ratio':<8} {r['lag_p50_s']:9.3f} {r['lag_p99_s']:9.3f} {r['lag_max_s']:9.3f} "
                    f"{r['last_start_s']:11.3f}"
                )
    idle = res.get("idle")
    if idle:
        tr = idle.get("strace") or {}
        print(
            f"\nIdle with {idle['jobs']} jobs: CPU {idle['cpu_s']:.3f} s in {idle['window_s']:.0f} s = "
            f"{idle['cpu_pct']:.4f} % of a core; voluntary context switches {idle['voluntary_ctxt_switches']} "
            f"{idle.get('voluntary_ctxt_switches_by_thread')}; "
            f"strace {tr.get('seconds')} s: {tr.get('syscalls')} syscalls {tr.get('syscalls_by_thread')}, "
            f"{tr.get('wait_calls_returned')} waits returned"
        )
        print(
            f"Memory with {idle['jobs']} jobs: VmRSS {idle['rss_mb']:.1f} MB after ready "
            f"({idle['rss_mb_after']:.1f} MB a minute later); start-up {idle['startup_s']:.2f} s"
        )
    st = res.get("startup")
    if st:
        print(
            f"\nStart-up with {st['jobs']} jobs: exec to ready {st['exec_to_ready_s']:.2f} s "
            f"(CPU {st['cpu_s_to_ready']:.2f} s, RSS {st['rss_mb']:.0f} MB); restart on the same database "
            f"{st['restart_exec_to_ready_s']:.2f} s"
        )
        for k, v in (st.get("breakdown_s") or {}).items():
            print(f"  {k:<58} {v:8.3f} s")
        if "breakdown_error" in st:
            print("  breakdown failed:", st["breakdown_error"])
    print("\nTargets:")
    for line in verdicts(res):
        print("  " + line)


def verdicts(res: dict) -> list[str]:
    out = []
    by = (res.get("fire") or {}).get("by_n", {})
    if "1" in by and "chronod" in by["1"]:
        v = by["1"]["chronod"]["lag_p50_s"] * 1000
        out.append(
            f"single-job lag p50 {v:.1f} ms (< {TARGETS['lag_p50_1_ms']:.0f} ms): {'met' if v < 20 else 'MISSED'}"
        )
    if "1000" in by and "chronod" in by["1000"]:
        c = by["1000"]["chronod"]["last_start_s"]
        k = by["1000"].get("cron", {}).get("last_start_s", float("nan"))
        out.append(
            f"last of 1000 started {c:.2f} s (< 1.5 s): {'met' if c < 1.5 else 'MISSED'}; "
            f"{ratio(c, k):.2f}x cron's {k:.2f} s (<= 0.3x): {'met' if ratio(c, k) <= 0.3 else 'MISSED'}"
        )
    for n, b in by.items():
        for who, s in b.items():
            if who != "ratio" and (s["missed"] or s["doubled"]):
                out.append(f"N={n} {who}: {s['missed']} missed, {s['doubled']} doubled: MISSED")
    idle = res.get("idle")
    if idle:
        out.append(f"idle CPU {idle['cpu_pct']:.4f} % (< 0.1 %): {'met' if idle['cpu_pct'] < 0.1 else 'MISSED'}")
        waits = (idle.get("strace") or {}).get("wait_calls_returned")
        out.append(
            f"wake-ups while idle: {waits} (strace), {idle['voluntary_ctxt_switches']} voluntary switches "
            f"(none wanted): {'met' if not waits and idle['voluntary_ctxt_switches'] == 0 else 'MISSED'}"
        )
        out.append(
            f"RSS {idle['rss_mb']:.1f} MB with 10,000 jobs (< 120 MB): {'met' if idle['rss_mb'] < 120 else 'MISSED'}"
        )
    st = res.get("startup")
    if st:
        v = st["exec_to_ready_s"]
        out.append(f"start-up with {st['jobs']} jobs {v:.2f} s (< 10 s): {'met' if v < 10 else 'MISSED'}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,100,1000")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: fire, idle, startup")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, witnesses)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_daemon: run as root (cron runs its jobs as root, apt-get installs it)")
    skip = set(filter(None, args.skip.split(",")))
    res: dict = {
        "when": datetime.now(timezone.utc).isoformat(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
        "targets": TARGETS,
    }
    work = Path(tempfile.mkdtemp(prefix="chrono-bench-daemon-"))
    try:
        if "startup" not in skip:
            print("start-up with 100,000 jobs ...", flush=True)
            res["startup"] = bench_startup(work)
        if "idle" not in skip:
            print("idle CPU and memory with 10,000 jobs (about 70 s) ...", flush=True)
            res["idle"] = bench_idle(work)
        if "fire" not in skip:
            print("fire lag, chronod and cron side by side (a few minutes) ...", flush=True)
            res["fire"] = bench_fire([int(c) for c in args.counts.split(",")], work)
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    res["load_after"] = os.getloadavg()
    report(res)
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"daemon-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(res, indent=2, default=str))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
