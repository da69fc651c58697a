"""chronod's start-up, reloads and memory with many jobs, on SQLite.

For each job count N (default 10,000 and 100,000; 1,000 jobs a file, varied expressions
and zones, none due while the benchmark runs) the benchmark

1. starts the real `chronod` with NOTIFY_SOCKET pointing at a datagram socket it owns and
   measures the time from exec to `READY=1`, its CPU and that of the worker processes that
   validated its files, then VmRSS (and the peak, VmHWM);
2. waits until the daemon settles (the work left for after READY done: less than 5 % of a
   CPU for two seconds) and notes VmRSS, then sends K SIGHUPs one after the other (the
   registry unchanged; the daemon answers each reload with a `STATUS=` datagram) and
   records the time and CPU of each reload and VmRSS after it: the series should stay
   within 10 % of the settled daemon's;
3. (with --trace) runs the same start-up in-process under tracemalloc and prints the
   largest allocation sites after ready, and what grew over K reloads.

Memory figures are stable from run to run; times depend on the load of the machine
(run a big N once, and read its times with that in mind).

    .venv/bin/python bench/bench_startup.py [--jobs 10000,100000] [--reloads 8] [--restarts 2] [--trace 10000]

4. (with --restarts K, default 2) waits until the daemon has stored every job's next
   occurrence (as a daemon that ran for a while has), stops it and starts it K times again
   on the same database and job files: a warm restart, which reuses the stored validated
   files and trusts the stored occurrences checked against the same definitions; each
   warm daemon gets SIGHUPs 1 and 3 s after READY and runs 12 s.

An `@every 1s` job runs beside them (tolerance 0: an occurrence started late is skipped):
the table gives its largest lag (start minus fire time) during the reloads and over the
whole run, and how many of its occurrences were skipped or missing.

Targets: RSS < 120 MB with 10,000 jobs; start-up < 10 s and < 400 MB with 100,000 jobs;
RSS flat (within 10 %) across reloads; no occurrence skipped and no firing lag over 100 ms
during a reload.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_daemon import ZONES, write_registry_file

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHRONOD = shutil.which("chronod", path=str(BIN)) or "chronod"
PER_FILE = 1000


def make_registry(reg: Path, n: int, seed: int = 3) -> None:
    """N jobs, 1,000 a file: varied expressions and zones, none of which fires while the
    benchmark runs (days of the month 10-28 and weekdays other than today and tomorrow), so
    that memory and reload times measure the registry, not runs."""
    rng = random.Random(seed)
    today = time.gmtime()
    days = [d for d in range(10, 29) if abs(d - today.tm_mday) > 1]
    dows = [w for w in range(7) if w not in ((today.tm_wday + 1) % 7, (today.tm_wday + 2) % 7)]
    for f in range((n + PER_FILE - 1) // PER_FILE):
        jobs = []
        for j in range(min(PER_FILE, n - f * PER_FILE)):
            kind = rng.randrange(4)
            if kind == 0:
                s = f"{rng.randrange(60)} {rng.randrange(24)} {rng.choice(days)} * *"
            elif kind == 1:
                s = f"{rng.randrange(60)} {rng.randrange(24)} * * {rng.choice(dows)}"
            elif kind == 2:
                s = f"{rng.randrange(60)} */{rng.choice((2, 3, 4, 6, 8, 12))} {rng.choice(days)} * *"
            else:
                s = f"*/{rng.choice((5, 10, 15, 20, 30))} * {rng.choice(days)} {rng.randrange(1, 13)} *"
            jobs.append({"id": f"big.f{f}.j{j}", "schedule": s, "timezone": rng.choice(ZONES), "command": "true"})
        write_registry_file(reg / f"big{f:03d}.yaml", jobs, {"owner": "bench", "idempotency_class": "idempotent"})


def proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def mem_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB."""
    st = proc_status(pid)
    return int(st["VmRSS"].split()[0]) / 1024, int(st["VmHWM"].split()[0]) / 1024


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def workers_cpu_s(pid: int) -> float:
    """CPU of the children the process has waited for: at READY, its file validation's
    worker processes (the launchers and the zygote still run)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, quiet_cpu: float = 0.05, limit_s: float = 300.0) -> float:
    """Wait until the daemon uses less than `quiet_cpu` of a CPU over two seconds in a row;
    the seconds waited."""
    t0, last, quiet = time.monotonic(), cpu_s(pid), 0
    while time.monotonic() - t0 < limit_s and quiet < 2:
        time.sleep(1.0)
        now = cpu_s(pid)
        quiet = quiet + 1 if now - last < quiet_cpu else 0
        last = now
    return time.monotonic() - t0


class NotifySocket:
    """The datagram socket systemd would own: chronod sends READY=1 and STATUS= here."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))

    def wait_for(self, word: str, proc: subprocess.Popen, timeout_s: float) -> float:
        """Block until a datagram containing `word` arrives; the monotonic time it did."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(0.5)
            try:
                data = self.sock.recv(65536).decode(errors="replace")
            except TimeoutError:
                if proc.poll() is not None:
                    raise RuntimeError(f"chronod exited with {proc.returncode}") from None
                continue
            if word in data:
                return time.monotonic()
        raise RuntimeError(f"no {word} from chronod within {timeout_s} s")

    def drain(self, quiet_s: float = 0.3) -> None:
        """Drop what is already queued (a reload may send READY=1 and STATUS= apart)."""
        self.sock.settimeout(quiet_s)
        try:
            while True:
                self.sock.recv(65536)
        except TimeoutError:
            pass

    def close(self) -> None:
        self.sock.close()


TICK = "bench.tick"


def tick_figures(db: Path, ready_wall: float, end_wall: float, windows: list[tuple[float, float]]) -> dict:
    """The `@every 1s` job's record: every second from ready to the end should have one
    succeeded run; the lag of each (start minus fire time), over all and during reloads."""
    from chronod.store.sql import SqlStore

    store = SqlStore(str(db))
    runs = {r.scheduled_at.timestamp(): r for r in store.runs(TICK, limit=100_000)}
    first, last = int(ready_wall) + 2, int(end_wall) - 2
    expected = range(first, last + 1)

    def in_reload(t: float) -> bool:
        return any(a - 1 <= t <= b + 1 for a, b in windows)

    lags, reload_lags, skipped, skipped_reload = [], [], 0, 0
    for t in expected:
        r = runs.get(float(t))
        if r is None or r.state != "succeeded" or r.started_at is None:
            skipped += 1
            skipped_reload += in_reload(t)
            continue
        lag = (r.started_at - r.fire_at).total_seconds() * 1000
        lags.append(lag)
        if in_reload(t):
            reload_lags.append(lag)
    return {
        "tick_due": len(expected),
        "tick_skipped": skipped,
        "tick_skipped_in_reloads": skipped_reload,
        "tick_lag_max_ms": max(lags, default=float("nan")),
        "tick_lag_p50_ms": sorted(lags)[len(lags) // 2] if lags else float("nan"),
        "tick_lag_max_in_reloads_ms": max(reload_lags, default=float("nan")),
    }


def stored_pending(db: Path) -> int:
    """How many waiting occurrences the database holds."""
    import sqlite3

    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute("SELECT count(*) FROM runs WHERE state = 'pending'").fetchone()[0]


def bench_real(n: int, reloads: int, work: Path, settle_max_s: float = 300.0) -> dict:
    reg = work / f"registry-{n}"
    reg.mkdir()
    make_registry(reg, n)
    # the witness of a reload that holds firing: due every second, tolerance 0 (the default
    # for a one-second gap), so an occurrence started late is skipped and counted
    write_registry_file(
        reg / "tick.yaml",
        [{"id": TICK, "schedule": "@every 1s", "command": "true"}],
        {"owner": "bench", "idempotency_class": "idempotent"},
    )
    sock = NotifySocket(work / f"notify-{n}.sock")
    log = open(work / f"chronod-{n}.log", "w")  # noqa: SIM115  (closed in the finally below)
    env = {k: v for k, v in os.environ.items() if k not in ("WATCHDOG_USEC", "WATCHDOG_PID")}
    env["NOTIFY_SOCKET"] = str(sock.path)
    out: dict = {"jobs": n}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [CHRONOD, "--registry", str(reg), "--db", str(work / f"chrono-{n}.sqlite")],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        env=env,
        start_new_session=True,
    )
    try:
        out["ready_s"] = sock.wait_for("READY=1", proc, 900) - t0
        out["cpu_to_ready_s"] = cpu_s(proc.pid)
        out["workers_cpu_to_ready_s"] = workers_cpu_s(proc.pid)
        time.sleep(1.0)  # the ready wake-up's aftermath
        out["rss_ready_mb"], out["hwm_ready_mb"] = mem_mb(proc.pid)
        print(
            f"  ready in {out['ready_s']:.2f} s ({out['cpu_to_ready_s']:.2f} s CPU, workers "
            f"{out['workers_cpu_to_ready_s']:.2f} s), RSS {out['rss_ready_mb']:.1f} MB",
            flush=True,
        )
        ready_wall = time.time() - 1.0
        time.sleep(3.0)  # the tick job's lag without a reload, for comparison
        # the work left for after READY (first occurrences stored in slices, the notifier's
        # first round over every job) ends before the reloads, whose RSS is compared with it
        out["settle_s"] = settle(proc.pid, limit_s=settle_max_s)
        out["rss_settled_mb"] = mem_mb(proc.pid)[0]
        print(f"  settled {out['settle_s']:.1f} s after, RSS {out['rss_settled_mb']:.1f} MB", flush=True)
        series, times, windows, cpus = [], [], [], []
        for _ in range(reloads):
            sock.drain()
            t, w, c = time.monotonic(), time.time(), cpu_s(proc.pid)
            proc.send_signal(signal.SIGHUP)
            times.append(sock.wait_for("STATUS=", proc, 900) - t)
            cpus.append(cpu_s(proc.pid) - c)
            windows.append((w, time.time()))
            series.append(mem_mb(proc.pid)[0])
            print(
                f"  reload {len(series)}: {times[-1]:.2f} s ({cpus[-1]:.2f} s CPU), RSS {series[-1]:.1f} MB", flush=True
            )
        time.sleep(3.0)
        end_wall = time.time()
        out["reload_s"], out["rss_reloads_mb"], out["reload_cpu_s"] = times, series, cpus
        out["hwm_mb"] = mem_mb(proc.pid)[1]
        # a warm restart of a daemon that ran for a while: every job's next occurrence
        # stored (the first ones are stored in slices after READY), as before a deploy
        t = time.monotonic()
        while stored_pending(work / f"chrono-{n}.sqlite") < n and time.monotonic() - t < settle_max_s:
            time.sleep(1.0)
        out["stored_before_stop"] = stored_pending(work / f"chrono-{n}.sqlite")
        print(f"  {out['stored_before_stop']} occurrences stored before the stop", flush=True)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        sock.close()
    if "reload_s" in out:
        out.update(tick_figures(work / f"chrono-{n}.sqlite", ready_wall, end_wall, windows))
    return out


def bench_restarts(
    n: int, restarts: int, work: Path, hups: tuple[float, ...] = (1.0, 3.0), watch_s: float = 12.0
) -> list[dict]:
    """Start chronod again, `restarts` times, on the registry and database `bench_real`
    left (its files unchanged): exec to READY=1, CPU and RSS of each warm start; then a
    SIGHUP at each of `hups` seconds after READY (a deploy reloads when it likes), and the
    `@every 1s` job's lag from READY to `watch_s` after it."""
    reg, db = work / f"registry-{n}", work / f"chrono-{n}.sqlite"
    out = []
    for i in range(restarts):
        sock = NotifySocket(work / f"notify-{n}-restart{i}.sock")
        env = {k: v for k, v in os.environ.items() if k not in ("WATCHDOG_USEC", "WATCHDOG_PID")}
        env["NOTIFY_SOCKET"] = str(sock.path)
        with open(work / f"chronod-{n}-restart{i}.log", "w") as log:
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [CHRONOD, "--registry", str(reg), "--db", str(db)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
            try:
                ready = sock.wait_for("READY=1", proc, 900) - t0
                cpu = cpu_s(proc.pid)
                ready_wall = time.time()
                time.sleep(1.0)
                rss, hwm = mem_mb(proc.pid)
                out.append({"ready_s": ready, "cpu_to_ready_s": cpu, "rss_ready_mb": rss, "hwm_ready_mb": hwm})
                print(f"  restart {i + 1}: ready in {ready:.2f} s ({cpu:.2f} s CPU), RSS {rss:.1f} MB", flush=True)
                windows = []
                for h in hups:
                    time.sleep(max(0.0, ready_wall + h - time.time()))
                    sock.drain(0.01)
                    w = time.time()
                    proc.send_signal(signal.SIGHUP)
                    sock.wait_for("STATUS=", proc, 900)
                    windows.append((w, time.time()))
                time.sleep(max(0.0, ready_wall + watch_s - time.time()))
                end_wall = time.time()
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                sock.close()
        # from READY on (the first whole second after it), reloads included
        out[-1].update(tick_figures(db, ready_wall - 1.0, end_wall, windows))
        print(
            f"    from READY, SIGHUPs at {', '.join(f'{h:g}' for h in hups)} s: worst lag "
            f"{out[-1]['tick_lag_max_ms']:.0f} ms, {out[-1]['tick_skipped']} of {out[-1]['tick_due']} skipped",
            flush=True,
        )
    return out


TRACE = r"""
import gc, json, sys, tracemalloc
tracemalloc.start(int(sys.argv[4]))
from chronod.daemon import loop, main
reloads, top = int(sys.argv[3]), int(sys.argv[5])

def sites(stats, n):
    return [{"size_kb": round(s.size / 1024, 1), "count": s.count,
             "where": " <- ".join(f"{f.filename.rsplit('/site-packages/', 1)[-1].replace(sys.prefix, '')}:{f.lineno}"
                                  for f in s.traceback[:3])} for s in stats[:n]]

def grew(diff, n):
    return [{"size_kb": round(d.size_diff / 1024, 1), "count": d.count_diff,
             "where": " <- ".join(f"{f.filename.rsplit('/site-packages/', 1)[-1]}:{f.lineno}" for f in d.traceback[:3])}
            for d in diff[:n] if d.size_diff > 0]

def after_ready(self):
    gc.collect()
    first = tracemalloc.take_snapshot()
    traced = tracemalloc.get_traced_memory()[0]
    for _ in range(reloads):
        self.reload()
    gc.collect()
    last = tracemalloc.take_snapshot()
    out = {"traced_ready_mb": traced / 2**20, "traced_reloaded_mb": tracemalloc.get_traced_memory()[0] / 2**20,
           "top": sites(first.statistics("traceback"), top),
           "by_file": sites(first.statistics("filename"), top),
           "grew": grew(last.compare_to(first, "traceback"), top)}
    print("TRACE " + json.dumps(out))

loop.Daemon.run_forever = after_ready
main.main(["--registry", sys.argv[1], "--db", sys.argv[2]])
"""


def bench_trace(n: int, reloads: int, work: Path, frames: int = 1, top: int = 20) -> dict:
    reg = work / f"trace-registry-{n}"
    reg.mkdir()
    make_registry(reg, n)
    r = subprocess.run(
        [sys.executable, "-c", TRACE, str(reg), str(work / f"trace-{n}.sqlite"), str(reloads), str(frames), str(top)],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        check=False,
    )
    for line in r.stdout.splitlines():
        if line.startswith("TRACE "):
            return {"jobs": n, **json.loads(line[6:])}
    return {"jobs": n, "error": r.stderr[-3000:]}


def report(res: dict) -> None:
    print()
    print(
        f"load average {res['load_before'][0]:.1f} before, {res.get('load_after', [float('nan')])[0]:.1f} after "
        f"({res['cpus']} CPUs); times are wall-clock under that load"
    )
    print(
        "| jobs | start-up s (CPU s) | RSS MB ready, settled | reload s (median, max) | reload CPU s (median) "
        "| max firing lag ms (reloads / all) | skipped during reloads (all) | RSS after each reload MB |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in res["real"]:
        rel, ts = r["rss_reloads_mb"], sorted(r["reload_s"])
        print(
            f"| {r['jobs']:,} | {r['ready_s']:.1f} ({r['cpu_to_ready_s']:.1f}) | {r['rss_ready_mb']:.0f}, "
            f"{r['rss_settled_mb']:.0f} "
            f"| {ts[len(ts) // 2] if ts else float('nan'):.2f}, {ts[-1] if ts else float('nan'):.2f} "
            f"| {sorted(r['reload_cpu_s'])[len(ts) // 2] if ts else float('nan'):.2f} "
            f"| {r.get('tick_lag_max_in_reloads_ms', float('nan')):.0f} / {r.get('tick_lag_max_ms', float('nan')):.0f} "
            f"| {r.get('tick_skipped_in_reloads', '-')} ({r.get('tick_skipped', '-')} of {r.get('tick_due', '-')}) "
            f"| {', '.join(f'{v:.0f}' for v in rel)} |"
        )
    print()
    print(
        f"{'jobs':>8} {'ready s':>8} {'CPU s':>7} {'RSS MB':>8} {'peak MB':>8} {'after reloads MB':>18} "
        f"{'growth':>7} {'reload s (median)':>18}"
    )
    for r in res["real"]:
        rel = r["rss_reloads_mb"]
        growth = (rel[-1] / r["rss_settled_mb"] - 1) * 100 if rel else 0.0
        med = sorted(r["reload_s"])[len(r["reload_s"]) // 2] if r["reload_s"] else float("nan")
        print(
            f"{r['jobs']:>8} {r['ready_s']:8.2f} {r['cpu_to_ready_s']:7.2f} {r['rss_ready_mb']:8.1f} "
            f"{r['hwm_mb']:8.1f} {rel[-1] if rel else float('nan'):18.1f} {growth:+6.1f}% {med:18.2f}"
        )
        print(f"{'':>8} RSS after each reload: {', '.join(f'{v:.0f}' for v in rel)}")
    restarted = [r for r in res["real"] if r.get("restarts")]
    if restarted:
        print(
            "\n| jobs | cold start: ready s (CPU s + workers' CPU s), RSS MB "
            "| warm restarts: ready s (CPU s), RSS MB, `@every 1s` from READY through two SIGHUPs |"
        )
        print("| --- | --- | --- |")
        for r in restarted:
            warm = "; ".join(
                f"{w['ready_s']:.2f} ({w['cpu_to_ready_s']:.2f}), {w['rss_ready_mb']:.0f}, lag {w['tick_lag_max_ms']:.0f} ms,"
                f" {w['tick_skipped']} of {w['tick_due']} skipped"
                for w in r["restarts"]
            )
            print(
                f"| {r['jobs']:,} | {r['ready_s']:.2f} ({r['cpu_to_ready_s']:.2f} + workers "
                f"{r.get('workers_cpu_to_ready_s', 0.0):.2f}), {r['rss_ready_mb']:.0f} | {warm} |"
            )
    for t in res.get("trace", []):
        print(f"\ntracemalloc, {t['jobs']} jobs", end="")
        if "error" in t:
            print(": failed\n" + t["error"])
            continue
        print(
            f": {t['traced_ready_mb']:.1f} MB traced after ready, {t['traced_reloaded_mb']:.1f} MB after "
            f"{res['trace_reloads']} reloads"
        )
        print("  largest allocation sites after ready:")
        for s in t["top"]:
            print(f"  {s['size_kb'] / 1024:8.2f} MB {s['count']:>9} blocks  {s['where']}")
        print("  by file:")
        for s in t["by_file"][:10]:
            print(f"  {s['size_kb'] / 1024:8.2f} MB {s['count']:>9} blocks  {s['where']}")
        if t["grew"]:
            print("  grew across the reloads:")
            for s in t["grew"][:10]:
                print(f"  {s['size_kb'] / 1024:+8.2f} MB {s['count']:>+9} blocks  {s['where']}")
    print("\nTargets:")
    for r in res["real"]:
        rel = r["rss_reloads_mb"]
        if r["jobs"] == 10_000:
            print(
                f"  RSS with 10,000 jobs {r['rss_ready_mb']:.1f} MB (< 120 MB): "
                f"{'met' if r['rss_ready_mb'] < 120 else 'MISSED'}"
            )
        if r["jobs"] == 100_000:
            print(
                f"  start-up with 100,000 jobs {r['ready_s']:.2f} s (< 10 s): {'met' if r['ready_s'] < 10 else 'MISSED'}"
                f"; RSS {r['rss_ready_mb']:.0f} MB (< 400 MB): {'met' if r['rss_ready_mb'] < 400 else 'MISSED'}"
            )
        if rel:
            flat = max(abs(v / r["rss_settled_mb"] - 1) for v in rel) <= 0.10
            print(
                f"  RSS across {len(rel)} reloads of {r['jobs']} jobs within 10 % of the settled daemon's: "
                f"{'met' if flat else 'MISSED'}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="10000,100000", help="comma-separated job counts")
    ap.add_argument("--reloads", type=int, default=8, help="SIGHUPs after ready")
    ap.add_argument("--restarts", type=int, default=2, help="warm restarts after the reloads (files unchanged)")
    ap.add_argument("--trace", default="", help="job counts to run again in-process under tracemalloc")
    ap.add_argument("--trace-reloads", type=int, default=2, help="reloads under tracemalloc (slow: minutes each)")
    ap.add_argument("--trace-frames", type=int, default=1, help="frames kept per allocation under tracemalloc")
    ap.add_argument("--settle-max", type=float, default=300.0, help="longest wait for the daemon to settle, s")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, databases)")
    args = ap.parse_args()
    res: dict = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
        "reloads": args.reloads,
        "trace_reloads": args.trace_reloads,
        "real": [],
        "trace": [],
    }
    work = Path(tempfile.mkdtemp(prefix="chrono-bench-startup-"))
    try:
        for n in [int(x) for x in args.jobs.split(",") if x]:
            print(f"{n} jobs: start-up and {args.reloads} reloads ...", flush=True)
            res["real"].append(bench_real(n, args.reloads, work, args.settle_max))
            if args.restarts:
                print(f"{n} jobs: {args.restarts} restarts, the job files unchanged ...", flush=True)
                res["real"][-1]["restarts"] = bench_restarts(n, args.restarts, work)
            print("  " + json.dumps(res["real"][-1]), flush=True)
        for n in [int(x) for x in args.trace.split(",") if x]:
            print(f"{n} jobs under tracemalloc ...", flush=True)
            res["trace"].append(bench_trace(n, args.trace_reloads, work, args.trace_frames))
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    res["load_after"] = os.getloadavg()
    report(res)
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    path = out_dir / f"startup-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(res, indent=2))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
