"""Fleet dispatch throughput and fire lag: 3 chronod nodes on one PostgreSQL database.

For each job count N (default 1,000 / 10,000 / 100,000) the benchmark writes N jobs on
`@every 10s` with a 9 s tolerance (so the fleet owes N/10 occurrences a second, spread by
jitter), starts 3 nodes on a fresh database, lets them run, and reads back from the
database: occurrences started per second, fire lag (started_at - fire_at) percentiles,
and how many occurrences the nodes had to skip (fell behind) or ran twice.

    .venv/bin/python bench/bench_fleet.py [--jobs 1000,10000] [--seconds 40] [--admin URL]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

BIN = Path(sys.executable).parent
ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def admin(url: str, sql: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with engine.connect() as c:
        c.execute(sa.text(sql))
    engine.dispose()


def registry(path: Path, n: int) -> None:
    path.mkdir(parents=True)
    per_file = 5000
    for f in range(0, n, per_file):
        lines = ["jobs:"]
        for i in range(f, min(n, f + per_file)):
            lines += [
                f"  - id: j{i:06d}",
                "    owner: bench",
                '    schedule: "@every 10s"',
                '    command: ["true"]',
                "    idempotency_class: idempotent",
                "    tolerance_s: 9",
                "    overlap: allow",
                "    output_limit_kb: 1",
            ]
        p = path / f"jobs{f // per_file:03d}.yaml"
        p.write_text("\n".join(lines) + "\n")
        os.chmod(p, 0o644)


def run_one(admin_url: str, n: int, seconds: float, nodes: int, keep: bool = False) -> dict:
    name = f"chrono_bench_{uuid.uuid4().hex[:8]}"
    admin(admin_url, f'CREATE DATABASE "{name}"')
    db = sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    tmp = Path(tempfile.mkdtemp(prefix="chrono-bench-fleet-"))
    procs = []
    try:
        registry(tmp / "jobs.d", n)
        subprocess.run([str(BIN / "chronoctl"), "db", "upgrade", "--db", db], check=True, capture_output=True)
        t_start = time.time()
        for i in range(nodes):
            log = open(tmp / f"n{i}.log", "wb")
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "chronod"),
                        "--registry",
                        str(tmp / "jobs.d"),
                        "--db",
                        db,
                        "--node",
                        f"n{i}",
                        "--state-dir",
                        str(tmp / f"state{i}"),
                        "--insecure-registry",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.time() + 600
        while time.time() < deadline:
            logs = [(tmp / f"n{i}.log").read_text(errors="replace") for i in range(nodes)]
            if all("event=daemon.ready" in l for l in logs):
                break
            if any(p.poll() is not None for p in procs):
                raise SystemExit("a node exited:\n" + "\n".join(logs))
            time.sleep(0.5)
        ready_s = time.time() - t_start
        t0 = time.time() + 12  # let every job reach its steady schedule
        time.sleep(seconds + 12)
        t1 = time.time()
        cpu = []
        for p in procs:
            try:
                with open(f"/proc/{p.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                cpu.append((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
            except OSError:
                cpu.append(None)
        engine = sa.create_engine(db, poolclass=NullPool)
        with engine.connect() as c:
            q = (
                "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), "
                "percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), max(lag) FROM ("
                "SELECT extract(epoch FROM started_at - fire_at) AS lag FROM runs "
                "WHERE fire_at >= to_timestamp(:a) AND fire_at < to_timestamp(:b) AND started_at IS NOT NULL "
                "AND trigger = 'schedule') x"
            )
            started, p50, p99, worst = c.execute(sa.text(q), {"a": t0, "b": t1 - 2}).one()
            states = dict(
                c.execute(
                    sa.text(
                        "SELECT state, count(*) FROM runs WHERE fire_at >= to_timestamp(:a) AND fire_at < to_timestamp(:b) "
                        "GROUP BY state"
                    ),
                    {"a": t0, "b": t1 - 2},
                ).all()
            )
            twice = c.execute(sa.text("SELECT count(*) FROM runs WHERE attempts > 1")).scalar_one()
            commits = c.execute(
                sa.text("SELECT xact_commit FROM pg_stat_database WHERE datname = :d"), {"d": name}
            ).scalar_one()
        engine.dispose()
        stop_at = time.time()
        for p in procs:
            p.send_signal(signal.SIGTERM)
        stop_s = []
        for p in procs:
            try:
                p.wait(60)
                stop_s.append(round(time.time() - stop_at, 1))
            except subprocess.TimeoutExpired:
                stop_s.append(None)
                p.kill()
        window = (t1 - 2) - t0
        return {
            "jobs": n,
            "nodes": nodes,
            "ready_s": round(ready_s, 1),
            "window_s": round(window, 1),
            "owed_per_s": n / 10,
            "started_per_s": round(started / window, 1),
            "fire_lag_p50_s": round(p50 or 0, 3),
            "fire_lag_p99_s": round(p99 or 0, 3),
            "fire_lag_max_s": round(worst or 0, 3),
            "states": states,
            "runs_with_2+_attempts": twice,
            "node_cpu_s": cpu,
            "sigterm_exit_s": stop_s,
            "db_commits": commits,
            "cpus": os.cpu_count(),
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if keep:
            print(f"kept: {tmp} and database {name}", file=sys.stderr)
        else:
            admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="1000,10000,100000")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the node logs and the database for a look")
    ap.add_argument("--admin", default=os.environ.get("CHRONO_BENCH_PG_ADMIN", ADMIN))
    args = ap.parse_args()
    for n in (int(x) for x in args.jobs.split(",")):
        print(json.dumps(run_one(args.admin, n, args.seconds, args.nodes, args.keep), default=float), flush=True)


if __name__ == "__main__":
    main()
