"""A database with a history worth looking at, for the web console's tests and bench:
a nightly job with a quarter of runs (some failed, one night with no record at all), a
job every 15 minutes, a paused job, a running run with live output, and hostile text
(`<script>`, quotes, control characters) in job ids, tags, reasons and output."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from chronod import fsutil
from chronod.core import history
from chronod.core.model import JobSpec
from chronod.core.schedule import compile_schedule
from chronod.store import schema
from chronod.store.api import Run
from chronod.store.sql import SqlStore

HOSTILE = "x<script>alert(1)</script>\"'\x1b[31m"
HOSTILE_JOB = 'evil.<script>alert("id")</script>'
NIGHTLY = "billing-export"
QUARTER = 92  # days of history the nightly job has


def spec(job_id: str, schedule: str, **kw) -> JobSpec:
    kw.setdefault("owner", "finance")
    return JobSpec(id=job_id, schedule=schedule, command="/usr/local/bin/run", idempotency_class="idempotent", **kw)


def failed_night(i: int) -> bool:
    """Which nights (days back from today) of the nightly job failed."""
    return i in (3, 17, 40, 41, 77)


MISSING_NIGHT = 25  # the nightly job has no row at all that night


def stand_in() -> subprocess.Popen:
    """A process standing in for the node's chronod: alive, and deaf to the SIGUSR1 an
    action sends to wake the daemon. The caller ends it."""
    code = "import signal, time; signal.signal(signal.SIGUSR1, signal.SIG_IGN); time.sleep(3600)"
    return subprocess.Popen([sys.executable, "-c", code])


def build(url: str, now: datetime, *, pid: int, node: str = "web-n1", live_dir: Path | None = None) -> dict[str, str]:
    """Fill the database at `url` (migrated here), its node's daemon being process `pid`
    (see `stand_in`); returns the ids the tests look for."""
    store = SqlStore(url)
    store.upgrade()
    try:
        store.acquire_node(
            node,
            pid=pid,
            hostname=socket.gethostname(),
            boot_id=fsutil.boot_id(),
            ttl_s=3600,
            pid_start=fsutil.process_start(pid),
        )
        if live_dir is not None:
            token = store.nodes()[0].token
            store.set_node_info(node, token, {"state_dir": str(live_dir)})
        specs = [
            spec(NIGHTLY, "0 2 * * *", tags=("billing", "compliance", "audit"), description="the nightly export"),
            spec("metrics.rollup", "*/15 * * * *", owner="platform", tags=("metrics",)),
            spec("reports.weekly", "0 6 * * 1", owner="platform", tags=("reports",)),
            spec(HOSTILE_JOB, "30 3 * * *", owner="mallory<b>", tags=("x<i>y", "audit"), description=HOSTILE),
        ]
        store.sync_jobs(node, specs)
        with store.engine.begin() as c:  # registered a quarter ago: a night with no row is missing
            c.execute(schema.job_known.update().values(known_from=now - timedelta(days=QUARTER + 1)))
        store.set_paused("reports.weekly", True, "INC-7 upstream down", by="alice")
        runs: list[Run] = []
        attempts: list[dict] = []
        ids: dict[str, str] = {}
        for s in specs:
            sched = compile_schedule(s.schedule, s.timezone, s.dst_gap, s.dst_repeat)
            days = QUARTER if s.id == NIGHTLY else (2 if s.id == "metrics.rollup" else 10)
            occs = history.occurrences(s, sched, now - timedelta(days=days), now)
            for o in occs:
                back = (now.date() - o.scheduled_at.date()).days
                if s.id == NIGHTLY and back == MISSING_NIGHT:
                    continue
                bad = s.id == NIGHTLY and failed_night(back)
                if s.id == HOSTILE_JOB:
                    bad = o is occs[-1]  # its latest run failed: the job is failing
                start = o.fire_at + timedelta(seconds=1)
                end = start + timedelta(seconds=42)
                out = f"exported {back} rows\n" if not bad else f"error: {HOSTILE}\n"
                runs.append(
                    Run(
                        run_id=o.run_id,
                        job_id=s.id,
                        job_key=o.job_key,
                        scheduled_at=o.scheduled_at,
                        fire_at=o.fire_at,
                        state="failed" if bad else "succeeded",
                        attempts=2 if bad else 1,
                        node=node,
                        started_at=start,
                        finished_at=end,
                        exit_code=3 if bad else 0,
                        output_tail=out,
                        output_bytes=len(out),
                        error=f"exit code 3: {HOSTILE}" if bad else None,
                        updated_at=end,
                    )
                )
                for n in range(1, (2 if bad else 1) + 1):
                    attempts.append(
                        dict(
                            run_id=o.run_id,
                            attempt=n,
                            node=node,
                            token=1,
                            state="failed" if bad else "succeeded",
                            started_at=start,
                            finished_at=end,
                            exit_code=3 if bad else 0,
                            error=f"exit code 3: {HOSTILE}" if bad else None,
                            output_tail=out,
                            output_bytes=len(out),
                        )
                    )
                if bad and s.id == NIGHTLY and "failed" not in ids:
                    ids["failed"] = o.run_id
                if bad and s.id == HOSTILE_JOB:
                    ids["hostile_run"] = o.run_id
        # one run going now, its live output in the state directory
        rid = "feedbeef00000001"
        runs.append(
            Run(
                run_id=rid,
                job_id="metrics.rollup",
                job_key="metrics.rollup",
                scheduled_at=now - timedelta(seconds=30),
                fire_at=now - timedelta(seconds=30),
                state="running",
                attempts=1,
                node=node,
                pid=pid,
                started_at=now - timedelta(seconds=29),
                trigger="manual",
                updated_at=now,
            )
        )
        attempts.append(dict(run_id=rid, attempt=1, node=node, token=1, state="running", started_at=now))
        ids["running"] = rid
        store.insert_runs(runs)
        keys = [c.name for c in schema.attempts.columns]
        with store.engine.begin() as c:
            c.execute(schema.attempts.insert(), [{k: a.get(k) for k in keys} for a in attempts])
        ids["hostile_job"] = HOSTILE_JOB
        return ids
    finally:
        store.close()


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=timezone.utc)
