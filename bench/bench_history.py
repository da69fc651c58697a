"""How fast does chronoctl answer the on-call questions over a big history?

Fills 1,000,000 runs over 1,000 jobs (bulk insert, straight into the schema) in SQLite
and PostgreSQL, then times the installed `chronoctl` binary:

    chronoctl status JOB       chronoctl did-it-run JOB       chronoctl missed --since 24h

(best and median of several runs, wall time including interpreter start), and prints the
import-time breakdown of one command (`python -X importtime`). Target: < 500 ms each.

The rows are written in time order, as chronod writes them. The job mix is a fleet's: 50 jobs every 5 minutes, 450 hourly, 500 daily, 1,000 runs
each (the last ~3.5 days, ~42 days and ~2.7 years of history), ending now; about one run
in fifty failed and one occurrence in a thousand has no row at all.

    .venv/bin/python bench/bench_history.py [--sqlite PATH] [--pg URL] [--skip-pg] [--reuse] [--repeat N]
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

from chronod.core.model import JobSpec
from chronod.core.occurrence import run_id

RUNS_PER_JOB = 1000
MIX = [(50, "*/5 * * * *", 300), (450, "{m} * * * *", 3600), (500, "{m} {h} * * *", 86400)]
CHRONOCTL = str(Path(sys.executable).with_name("chronoctl"))


def specs() -> list[tuple[JobSpec, int]]:
    """The 1,000 jobs and their period in seconds."""
    out = []
    n = 0
    for count, expr, period in MIX:
        for _ in range(count):
            sched = expr.format(m=n % 60, h=n % 24)
            spec = JobSpec(
                id=f"job-{n:04d}",
                owner=f"team-{n % 20:02d}",
                schedule=sched,
                command="true",
                idempotency_class="idempotent",
                max_silence_s=3 * period,
            )
            out.append((spec, period))
            n += 1
    return out


def rows(spec: JobSpec, period: int, now: datetime) -> Iterator[dict]:
    """RUNS_PER_JOB runs of one job, newest first, the newest just before now, as schema rows."""
    from chronod.core.schedule import compile_schedule

    sched = compile_schedule(spec.schedule, spec.timezone)
    last = sched.prev_at_or_before(now - timedelta(seconds=120))
    t = last
    for _ in range(RUNS_PER_JOB):
        rid = run_id(spec.id, t)
        h = int(hashlib.sha256(rid.encode()).hexdigest()[:4], 16)
        if h % 1000 != 7:  # one occurrence in a thousand left without a row
            failed = h % 50 == 3
            yield dict(
                run_id=rid,
                job_id=spec.id,
                job_key=spec.id,
                scheduled_at=t,
                fire_at=t,
                state="failed" if failed else "succeeded",
                attempts=1,
                node="bench1",
                pid=None,
                supervisor_pid=None,
                started_at=t,
                finished_at=t + timedelta(seconds=3),
                exit_code=1 if failed else 0,
                signal=None,
                output_tail="ok\n",
                output_bytes=3,
                error=None,
                token=1,
                trigger="schedule",
                next_attempt_at=None,
                updated_at=t + timedelta(seconds=3),
            )
        t = t - timedelta(seconds=period) if period != 86400 else sched.prev_at_or_before(t - timedelta(seconds=1))


def _newest_first(row: dict) -> float:
    return -row["scheduled_at"].timestamp()


def fill(url: str) -> float:
    """Create the schema, register the jobs, bulk insert the runs; seconds taken."""
    import sqlalchemy as sa

    from chronod.store import schema
    from chronod.store.api import open_store

    started = time.perf_counter()
    store = open_store(url)
    store.upgrade()
    jobs = specs()
    store.sync_jobs("bench1", [s for s, _ in jobs])
    now = datetime.now(timezone.utc)
    engine = store.engine
    total = 0
    # In time order, as chronod writes them: the rows of one day sit together in the table,
    # as in a real ledger (job by job would scatter a day's rows over the whole table).
    merged = heapq.merge(*(rows(spec, period, now) for spec, period in jobs), key=_newest_first)
    with engine.begin() as conn:
        while batch := list(itertools.islice(merged, 20000)):
            conn.execute(schema.runs.insert(), batch)
            total += len(batch)
            if total % 100000 < 20000:
                print(f"  {total} runs, {time.perf_counter() - started:.0f}s", file=sys.stderr)
    # Jobs were synced before their history existed; date them back so missed expects it.
    with engine.begin() as conn:
        conn.execute(schema.jobs.update().values(updated_at=now - timedelta(days=1000)))
        conn.execute(schema.job_known.update().values(known_from=now - timedelta(days=1000)))
    if store.dialect == "postgresql":
        with engine.connect() as conn:
            conn.execute(sa.text("ANALYZE runs"))
            conn.commit()
    else:
        with engine.connect() as conn:
            conn.execute(sa.text("ANALYZE"))
            conn.commit()
    store.close()
    return time.perf_counter() - started


def timed(args: list[str], repeat: int) -> dict:
    """Wall times (ms) of the installed chronoctl with `args`."""
    times, cpu, codes = [], [], set()
    for _ in range(repeat):
        t = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run([CHRONOCTL, *args], capture_output=True, text=True, env=dict(os.environ, NO_COLOR="1"))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append((time.perf_counter() - t) * 1000)
        cpu.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
        codes.add(p.returncode)
        if p.returncode not in (0, 1):
            raise SystemExit(f"chronoctl {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return {
        "best_ms": round(min(times)),
        "median_ms": round(statistics.median(times)),
        "cpu_ms": round(min(cpu)),
        "exit": sorted(codes),
    }


def import_breakdown(args: list[str], top: int = 12) -> list[tuple[str, float]]:
    """Cumulative import time (ms) of the heaviest top-level-ish modules for one command."""
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "chronoctl.main", *args], capture_output=True, text=True
    )
    seen = []
    for line in p.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cum_us, name = line.split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        if depth <= 1:
            seen.append((name.strip(), int(cum_us) / 1000))
    return sorted(seen, key=lambda x: -x[1])[:top]


def bench(label: str, url: str, repeat: int) -> dict:
    cmds = {
        "status JOB": ["status", "job-0100", "--db", url],
        "did-it-run JOB": ["did-it-run", "job-0100", "--db", url],
        "did-it-run JOB --since 12h": ["did-it-run", "job-0100", "--since", "12h", "--db", url],
        "missed --since 24h": ["missed", "--since", "24h", "--db", url, "--json"],
        "--help (no database)": ["--help"],
    }
    results = {name: timed(args, repeat) for name, args in cmds.items()}
    p = subprocess.run([CHRONOCTL, "missed", "--since", "24h", "--db", url, "--json"], capture_output=True, text=True)
    results["missed_count"] = json.loads(p.stdout)["count"]
    results["imports(status JOB)"] = import_breakdown(cmds["status JOB"])
    print(f"\n== {label}: {url.split('@')[-1]}")
    for name, r in results.items():
        if isinstance(r, dict):
            print(
                f"  {name:<28} best {r['best_ms']:>5} ms   median {r['median_ms']:>5} ms   "
                f"CPU {r['cpu_ms']:>5} ms   exit {r['exit']}"
            )
    print(f"  missed --since 24h found {results['missed_count']} occurrences")
    print("  import time, cumulative (status JOB):")
    for name, ms in results["imports(status JOB)"]:
        print(f"    {ms:8.1f} ms  {name}")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sqlite", default="/tmp/chrono-bench/history.db")
    ap.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/chrono_bench")
    ap.add_argument("--skip-pg", action="store_true")
    ap.add_argument("--reuse", action="store_true", help="keep an existing filled database")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    _compile_bytecode()
    out = {}
    path = Path(a.sqlite)
    if not (a.reuse and path.exists()):
        path.parent.mkdir(parents=True, exist_ok=True)
        for p in path.parent.glob(path.name + "*"):
            p.unlink()
        print(f"filling {path} ...", file=sys.stderr)
        print(f"  filled SQLite in {fill(str(path)):.0f}s", file=sys.stderr)
    out["sqlite"] = bench("SQLite", str(path), a.repeat)
    if not a.skip_pg:
        if not a.reuse:
            _recreate_pg(a.pg)
            print(f"  filled PostgreSQL in {fill(a.pg):.0f}s", file=sys.stderr)
        out["postgresql"] = bench("PostgreSQL", a.pg, a.repeat)


def _compile_bytecode() -> None:
    """Byte-compile chrono and its libraries, as the package's postinst does on a host: with
    PYTHONDONTWRITEBYTECODE set (or a read-only tree) every chronoctl would compile its
    own modules from source first, about 60 ms that no installed chronoctl pays."""
    import chronoctl
    import chronod

    roots = [Path(m.__file__).parent for m in (chronod, chronoctl)]
    roots.append(Path(sys.executable).parents[1] / "lib")
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *map(str, roots)], check=False)


def _recreate_pg(url: str) -> None:
    import sqlalchemy as sa

    base, name = url.rsplit("/", 1)
    admin = sa.create_engine(base + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()


if __name__ == "__main__":
    main()
