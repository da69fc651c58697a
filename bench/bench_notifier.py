"""The notifier's cost per ended run on PostgreSQL: the deciding node's rounds, measured alone.

The fleet's node that decides notifications reads, decides on and records every run that
ends anywhere in the fleet, sheds included (`bench_fleet.py` past the ceiling). This
bench puts N jobs like bench_fleet's (`@every 10s`, no notify route unless
`--notify-share` gives some a webhook) in a new database, stores batches of ended runs
(a share of them shed, `skipped_outage`, the rest `succeeded`) and runs one notifier round
(`NotifyService.step`) after each batch, as the daemon's thread does after a wake-up.

It prints the notifier thread's CPU seconds per 1,000 ended runs (`time.thread_time`
around each round), split by the outbox and store calls the round makes, the CPU of the
database's server processes for this database over the rounds (their /proc stat, the
server on this host), and the rows of `notify_state` written per ended run.

    .venv/bin/python bench/bench_notifier.py [--jobs 29000] [--ended 45000] [--batch 750]
        [--rate 1500] [--shed 0.75] [--notify-share 0] [--admin URL] [--profile FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa
from bench_fleet import admin, registry  # the fleet bench's jobs and database, so the two compare
from sqlalchemy.pool import NullPool

from chronod.core.occurrence import run_id
from chronod.store.api import Run

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def ended_run(job: str, at: datetime, shed: bool) -> Run:
    """An ended run of `job` due at `at`: a success, or one the node shed as overloaded."""
    return Run(
        run_id=run_id(job, at),
        job_id=job,
        job_key=job,
        scheduled_at=at,
        fire_at=at,
        state="skipped_outage" if shed else "succeeded",
        attempts=0 if shed else 1,
        exit_code=None if shed else 0,
        error="node n0 overloaded: started 1.2 s late" if shed else None,
        finished_at=None if shed else at + timedelta(milliseconds=5),
    )


def server_cpu_s(engine: sa.Engine, name: str) -> float:
    """CPU seconds so far of the server processes serving database `name` (this host's)."""
    with engine.connect() as c:
        pids = c.execute(
            sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": name}
        ).scalars()
        total = 0.0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Timed:
    """Wraps an object's methods: the calling thread's CPU seconds per method name."""

    def __init__(self, target: object, names: list[str], into: dict[str, float], prefix: str):
        for name in names:
            fn = getattr(target, name)

            def wrapped(*a, _fn=fn, _name=f"{prefix}.{name}", **k):
                t = time.thread_time()
                try:
                    return _fn(*a, **k)
                finally:
                    into[_name] += time.thread_time() - t

            setattr(target, name, wrapped)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=29000)
    ap.add_argument("--ended", type=int, default=45000, help="ended runs over the measured rounds")
    ap.add_argument("--batch", type=int, default=750, help="ended runs a round")
    ap.add_argument("--shed", type=float, default=0.75, help="share of the ended runs shed (skipped_outage)")
    ap.add_argument("--rate", type=float, default=1500, help="ended runs a second of wall time (0: as fast as it goes)")
    ap.add_argument("--notify-share", type=float, default=0.0, help="share of the jobs with a notify route")
    ap.add_argument("--admin", default=os.environ.get("CHRONO_BENCH_PG_ADMIN", ADMIN))
    ap.add_argument("--profile", type=Path, default=None, help="py-spy over the measured rounds, raw stacks to FILE")
    args = ap.parse_args()

    from chronod.core.clock import Clock
    from chronod.daemon.metrics import Metrics
    from chronod.notify.service import NotifyService
    from chronod.specfile import load_registry
    from chronod.store.sql import SqlStore

    name = f"chrono_bench_{uuid.uuid4().hex[:8]}"
    admin(args.admin, f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(args.admin).set(database=name).render_as_string(hide_password=False)
    tmp = Path(tempfile.mkdtemp(prefix="chrono-bench-notifier-"))
    store = None
    try:
        store = SqlStore(url)
        store.upgrade()
        registry(tmp / "jobs.d", args.jobs, args.notify_share)
        t0 = datetime.now(timezone.utc)
        loaded = load_registry([tmp / "jobs.d"], now=t0, secure=False)
        if loaded.problems:
            raise SystemExit(f"bench_notifier: the registry did not load: {loaded.problems[:3]}")
        specs = loaded.jobs
        store.sync_jobs("n0", specs.values())
        ids = sorted(specs)
        # each job: a success a few seconds ago (its silence clock) and its next occurrence
        base = t0.replace(microsecond=0) - timedelta(seconds=5)
        seed = []
        for j in ids:
            seed.append(ended_run(j, base, shed=False))
            nxt = base + timedelta(hours=1)
            seed.append(Run(run_id=run_id(j, nxt), job_id=j, job_key=j, scheduled_at=nxt, fire_at=nxt, state="pending"))
        store.insert_runs(seed)
        svc = NotifyService(
            store,
            Clock(),
            lambda *a, **k: None,
            "n0",
            metrics=Metrics(),
            send=lambda route, body: None,
            known_specs=lambda: specs,
        )
        svc.step(datetime.now(timezone.utc))  # the first round reads and decides on every job: not measured
        svc.step(datetime.now(timezone.utc))

        calls: dict[str, float] = defaultdict(float)
        Timed(
            svc.outbox,
            [
                "get_state",
                "get_states",
                "set_states",
                "changed_run_keys",
                "terminal_runs",
                "jobs_version",
                "claim",
                "add",
                "last_successes",
                "first_seen",
            ],
            calls,
            "outbox",
        )
        Timed(store, ["live_nodes", "pauses", "known_spans"], calls, "store")
        written = [0]
        set_states = svc.outbox.set_states

        def counting(states, now, _f=set_states):
            written[0] += sum(1 for k in states if k.startswith("job:"))
            return _f(states, now)

        svc.outbox.set_states = counting
        watch = sa.create_engine(url, poolclass=NullPool)
        spy = None
        if args.profile:
            exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
            cmd = [exe, "record", "-p", str(os.getpid()), "-r", "200", "-f", "raw", "-o", str(args.profile)]
            spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(2)
        rounds = args.ended // args.batch
        sheds = round(args.batch * args.shed)
        cpu = 0.0
        server = server_cpu_s(watch, name)
        wall = time.monotonic()
        k = 0
        for n in range(rounds):
            at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(milliseconds=10 * n)
            batch = []
            for i in range(args.batch):
                j = ids[k % len(ids)]
                k += 1
                batch.append(ended_run(j, at, shed=i < sheds))
            store.insert_runs(batch)
            t = time.thread_time()
            svc.step(datetime.now(timezone.utc))
            cpu += time.thread_time() - t
            if args.rate > 0:  # the rounds follow the endings as the daemon's do: a batch per batch/rate s
                time.sleep(max(0.0, (n + 1) * args.batch / args.rate - (time.monotonic() - wall)))
        wall = time.monotonic() - wall
        server = server_cpu_s(watch, name) - server
        watch.dispose()
        if spy is not None:
            spy.send_signal(2)
            spy.wait(120)
        ended = rounds * args.batch
        per = 1000 / ended
        out = {
            "jobs": args.jobs,
            "ended": ended,
            "batch": args.batch,
            "rate": args.rate,
            "shed_share": args.shed,
            "notify_share": args.notify_share,
            "notifier_cpu_s_per_1000": round(cpu * per, 4),
            "server_cpu_s_per_1000": round(server * per, 4),
            "state_rows_written_per_ended": round(written[0] / ended, 3),
            "calls_cpu_s_per_1000": {k: round(v * per, 4) for k, v in sorted(calls.items(), key=lambda x: -x[1])},
            "wall_s_rounds_and_inserts": round(wall, 1),
            "loadavg": " ".join(open("/proc/loadavg").read().split()[:3]),
        }
        print(json.dumps(out, indent=1))
        svc.stop(wait_s=1, drain_s=0)
    finally:
        if store is not None:
            store.close()
        admin(args.admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
