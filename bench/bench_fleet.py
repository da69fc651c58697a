"""Fleet dispatch throughput and fire lag: 3 chronod nodes on one PostgreSQL database.

For each job count N (default 1,000 / 10,000 / 100,000) the benchmark writes N jobs on
`@every 10s` with a 9 s tolerance (so the fleet owes N/10 occurrences a second, spread by
jitter), starts 3 nodes on a fresh database, lets them run, and reads back from the
database: occurrences started per second, fire lag (started_at - fire_at) percentiles,
and how many occurrences the nodes had to skip (fell behind) or ran twice.

Each node may be given a start limit (`--max-starts N`, passed to chronod); the table at
the end is the curve owed/s -> started/s and fire lag, with the load average of the machine
before and after each point.

With `--launches simulated` the nodes are `bench/chronod_simulated.py`: the real daemon,
whose runs start no process and "exit" 0 after 0.1 s (the claim, the attempt row, the
ending and the notifier unchanged), so the figures are what the database and the nodes
can coordinate. `--launches real,simulated` runs each job count both ways, one after the
other, for a side-by-side in the same minutes.

Over the window the benchmark also reads PostgreSQL's own counters for the bench database
(`pg_stat_database`: transactions committed, rows inserted and updated; per table from
`pg_stat_user_tables`) and the WAL written (`pg_current_wal_lsn()`, server-wide: other
databases' traffic on the same server is included), and divides them by the attempts
started in the window. `pg_stat_statements` is read when the server has it loaded.

    .venv/bin/python bench/bench_fleet.py [--jobs 1000,10000] [--seconds 40] [--max-starts N] [--admin URL]
        [--launches real|simulated|real,simulated]
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
SIMULATED = Path(__file__).with_name("chronod_simulated.py")
ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def admin(url: str, sql: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with engine.connect() as c:
        c.execute(sa.text(sql))
    engine.dispose()


def registry(path: Path, n: int, notify_share: float = 0.0) -> None:
    """n jobs every 10 s, 5,000 a file (a file's size is capped); with `notify_share`, every
    1/notify_share-th one has a webhook route (bench_notifier.py)."""
    path.mkdir(parents=True)
    per_file = 5000
    every = round(1 / notify_share) if notify_share > 0 else 0
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
            if every and i % every == 0:
                lines += [
                    "    notify:",
                    '      - on: ["failed", "recovered", "silence"]',
                    '        webhook: "http://127.0.0.1:9/hook"',
                ]
        p = path / f"jobs{f // per_file:03d}.yaml"
        p.write_text("\n".join(lines) + "\n")
        os.chmod(p, 0o644)


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (its own, not its children's)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def profile(pid: int, seconds: float, out: Path) -> subprocess.Popen | None:
    """py-spy on one node's daemon for `seconds` (raw stacks to `out`), if py-spy is installed."""
    spy = shutil.which("py-spy", path=str(BIN)) or shutil.which("py-spy")
    if spy is None:
        print("bench_fleet: --profile needs py-spy (pip install py-spy)", file=sys.stderr)
        return None
    cmd = [spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "100", "-f", "raw", "-o", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def statements_extension(db: str) -> str | None:
    """Create pg_stat_statements in the bench database; None if its view can be read, else why not."""
    engine = sa.create_engine(db, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with engine.connect() as c:
            c.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
            c.execute(sa.text("SELECT count(*) FROM pg_stat_statements")).scalar_one()
        return None
    except sa.exc.DBAPIError as e:
        return str(e.orig).splitlines()[0]
    finally:
        engine.dispose()


def counters(c: sa.Connection, name: str, with_statements: bool) -> dict:
    """PostgreSQL's own counters for database `name`, the WAL position and the time, read together."""
    row = (
        c.execute(
            sa.text(
                "SELECT extract(epoch FROM clock_timestamp()) AS at, xact_commit, xact_rollback, tup_inserted, "
                "tup_updated, tup_deleted, tup_fetched, pg_current_wal_lsn()::text AS lsn "
                "FROM pg_stat_database WHERE datname = :d"
            ),
            {"d": name},
        )
        .mappings()
        .one()
    )
    out = dict(row)
    out["tables"] = {
        t: (ins, upd, hot)
        for t, ins, upd, hot in c.execute(
            sa.text("SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables")
        ).all()
    }
    if with_statements:
        out["statements"] = {
            q: calls
            for q, calls in c.execute(
                sa.text(
                    "SELECT query, calls FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
                    "WHERE d.datname = :d"
                ),
                {"d": name},
            ).all()
        }
    return out


def per_occurrence(c: sa.Connection, a: dict, b: dict) -> dict:
    """What the database did between two `counters` readings, per attempt started between them."""
    started = c.execute(
        sa.text("SELECT count(*) FROM attempts WHERE started_at >= to_timestamp(:a) AND started_at < to_timestamp(:b)"),
        {"a": float(a["at"]), "b": float(b["at"])},
    ).scalar_one()
    wal = c.execute(sa.text("SELECT pg_wal_lsn_diff(:b, :a)"), {"a": a["lsn"], "b": b["lsn"]}).scalar_one()
    seconds = float(b["at"]) - float(a["at"])
    per = max(started, 1)
    out = {
        "measured_s": round(seconds, 1),
        "attempts_started": started,
        "xacts_per_s": round((b["xact_commit"] - a["xact_commit"]) / seconds, 1),
        "xacts_per_started": round((b["xact_commit"] - a["xact_commit"]) / per, 3),
        "rollbacks": b["xact_rollback"] - a["xact_rollback"],
        "rows_inserted_per_started": round((b["tup_inserted"] - a["tup_inserted"]) / per, 2),
        "rows_updated_per_started": round((b["tup_updated"] - a["tup_updated"]) / per, 2),
        "rows_deleted_per_started": round((b["tup_deleted"] - a["tup_deleted"]) / per, 2),
        "rows_fetched_per_started": round((b["tup_fetched"] - a["tup_fetched"]) / per, 1),
        "wal_bytes_per_s": round(float(wal) / seconds),
        "wal_bytes_per_started": round(float(wal) / per),
        "tables_per_started": {
            t: [round((v[i] - a["tables"].get(t, (0, 0, 0))[i]) / per, 2) for i in range(3)]
            for t, v in sorted(b["tables"].items())
            if v != a["tables"].get(t)
        },
    }
    if "statements" in b:
        calls = {q: n - a["statements"].get(q, 0) for q, n in b["statements"].items()}
        top = sorted(((n, q) for q, n in calls.items() if n), reverse=True)[:15]
        out["statements_per_started"] = [(round(n / per, 3), " ".join(q.split())[:160]) for n, q in top]
    return out


def run_one(
    admin_url: str,
    n: int,
    seconds: float,
    nodes: int,
    keep: bool = False,
    max_starts: float | None = None,
    profile_to: Path | None = None,
    launches: str = "real",
) -> dict:
    name = f"chrono_bench_{uuid.uuid4().hex[:8]}"
    admin(admin_url, f'CREATE DATABASE "{name}"')
    db = sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    no_statements = statements_extension(db)
    tmp = Path(tempfile.mkdtemp(prefix="chrono-bench-fleet-"))
    procs = []
    try:
        load_before = loadavg()
        registry(tmp / "jobs.d", n)
        subprocess.run([str(BIN / "chronoctl"), "db", "upgrade", "--db", db], check=True, capture_output=True)
        t_start = time.time()
        for i in range(nodes):
            log = open(tmp / f"n{i}.log", "wb")
            procs.append(
                subprocess.Popen(
                    [
                        *([str(BIN / "chronod")] if launches == "real" else [sys.executable, str(SIMULATED)]),
                        "--registry",
                        str(tmp / "jobs.d"),
                        "--db",
                        db,
                        "--node",
                        f"n{i}",
                        "--state-dir",
                        str(tmp / f"state{i}"),
                        "--insecure-registry",
                        *(["--max-starts", str(max_starts)] if max_starts is not None else []),
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
        time.sleep(12)
        engine = sa.create_engine(db, poolclass=NullPool)
        cpu_before = [cpu_s(p.pid) for p in procs]
        with engine.connect() as c:
            before = counters(c, name, no_statements is None)
        spy = profile(procs[0].pid, seconds, profile_to / f"n0-{n}.txt") if profile_to else None
        time.sleep(seconds)
        if spy is not None:
            spy.wait(seconds + 120)  # py-spy writes its file after the window; slow on a loaded host
        t1 = time.time()
        with engine.connect() as c:
            after = counters(c, name, no_statements is None)
        engine.dispose()
        cpu = [cpu_s(p.pid) for p in procs]
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
            database = per_occurrence(c, before, after)
            database["stored_bytes_per_run"] = c.execute(
                sa.text(
                    "SELECT (pg_total_relation_size('runs') + pg_total_relation_size('attempts')) "
                    "/ greatest((SELECT count(*) FROM runs), 1)"
                )
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
        settled = sum(v for k, v in states.items() if k not in ("pending", "running"))
        return {
            "launches": launches,
            "at_utc": time.strftime("%H:%M:%S", time.gmtime(t0)),
            "jobs": n,
            "nodes": nodes,
            "ready_s": round(ready_s, 1),
            "window_s": round(window, 1),
            "owed_per_s": n / 10,
            "max_starts": max_starts,
            "started_per_s": round(started / window, 1),
            "skipped_per_s": round(states.get("skipped_outage", 0) / window, 1),
            "still_pending": states.get("pending", 0),
            "settled_share": round(settled / max(sum(states.values()), 1), 3),
            "fire_lag_p50_s": round(p50 or 0, 3),
            "fire_lag_p99_s": round(p99 or 0, 3),
            "fire_lag_max_s": round(worst or 0, 3),
            "states": states,
            "runs_with_2+_attempts": twice,
            "node_cpu_s": cpu,
            "node_cpu_window_s": [
                round(b - a, 2) if a is not None and b is not None else None for a, b in zip(cpu_before, cpu)
            ],
            "sigterm_exit_s": stop_s,
            "database": database,
            "pg_stat_statements": "read" if no_statements is None else f"not available: {no_statements}",
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
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
    ap.add_argument("--max-starts", type=float, default=None, help="each node's start limit (runs a second)")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy node 0 over the window, raw stacks to DIR")
    ap.add_argument(
        "--launches",
        default="real",
        help="real (fork and exec `true`), simulated (no process: bench/chronod_simulated.py), or both, comma-separated",
    )
    args = ap.parse_args()
    modes = args.launches.split(",")
    if not set(modes) <= {"real", "simulated"}:
        ap.error(f"--launches takes real, simulated or both, not {args.launches!r}")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in (int(x) for x in args.jobs.split(",")):
        for mode in modes:
            rows.append(
                run_one(args.admin, n, args.seconds, args.nodes, args.keep, args.max_starts, args.profile, mode)
            )
            print(json.dumps(rows[-1], default=float), flush=True)
    table(rows)


def table(rows: list[dict]) -> None:
    """The curve: owed/s -> started/s, skipped/s, fire lag, with the load it ran under."""
    print(
        "\n| launches | at (UTC) | limit/node | owed/s | started/s | skipped/s | still pending | lag p50 | p99 | max "
        "| xacts/started | rows ins+upd/started | WAL B/started | node CPU s | load avg |"
    )
    print("| --- " * 15 + "|")
    for r in rows:
        d = r["database"]
        rows_written = d["rows_inserted_per_started"] + d["rows_updated_per_started"]
        cpu = ", ".join(f"{x:.1f}" if x is not None else "?" for x in r["node_cpu_s"])
        print(
            f"| {r['launches']} | {r['at_utc']} | {r['max_starts'] or 'default'} | {r['owed_per_s']:g} "
            f"| {r['started_per_s']:g} | {r['skipped_per_s']:g} "
            f"| {r['still_pending']} | {r['fire_lag_p50_s']:.2f} s | {r['fire_lag_p99_s']:.2f} s "
            f"| {r['fire_lag_max_s']:.2f} s | {d['xacts_per_started']:.3f} | {rows_written:.2f} "
            f"| {d['wal_bytes_per_started']:,} | {cpu} | {r['loadavg_before']} -> {r['loadavg_after']} |"
        )


if __name__ == "__main__":
    main()
