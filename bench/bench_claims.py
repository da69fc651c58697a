"""A loaded node's batched writes on PostgreSQL: settles and claims, client and server CPU.

A node past its ceiling settles hundreds of shed runs and claims tens to start at each
wake-up (`Store.commit_wakeup`). This stores 60,000 pending runs in a new database, then
settles them in wake-up sized batches (250-349 a batch, the sizes varying as they do),
then claims others (60-99 a batch), and reports the CPU seconds of this process (the
client: SQLAlchemy, the driver) and of the database's server process for each phase.

    python bench/bench_claims.py [--admin URL] [--settles N] [--claims N]

Another checkout's code is measured by putting it first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chronod.core.model import RunState  # noqa: E402
from chronod.store.api import Run  # noqa: E402
from chronod.store.sql import SqlStore  # noqa: E402

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def server_cpu_s(db: str) -> float:
    """CPU seconds of the server processes connected to database `db` (their /proc stat)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if db not in Path(f"/proc/{pid}/cmdline").read_text():
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def measure(store: SqlStore, db: str, token: int, batches: list[tuple[str, list[str]]]) -> dict[str, float]:
    client, server = time.process_time(), server_cpu_s(db)
    for kind, ids in batches:
        if kind == "settle":
            store.commit_wakeup([], [(i, RunState.SKIPPED_OUTAGE, "shed") for i in ids], [], "n1", token)
        else:
            store.commit_wakeup([], [], ids, "n1", token)
    rows = sum(len(ids) for _, ids in batches)
    return {
        "batches": len(batches),
        "rows": rows,
        "client_cpu_s": round(time.process_time() - client, 3),
        "server_cpu_s": round(server_cpu_s(db) - server, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--admin", default=ADMIN, help="a database where this may CREATE DATABASE")
    ap.add_argument("--settles", type=int, default=100, help="settle batches")
    ap.add_argument("--claims", type=int, default=300, help="claim batches")
    args = ap.parse_args()
    name = f"chrono_bench_claims_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(args.admin, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        store = SqlStore(args.admin.rsplit("/", 1)[0] + "/" + name)
        store.upgrade()
        token = store.acquire_node("n1", pid=os.getpid(), hostname="bench", boot_id="bench", ttl_s=3600)
        now = datetime.now(timezone.utc) + timedelta(days=1)
        n = 60_000
        runs = [
            Run(
                run_id=f"{i:016x}",
                job_id=f"job{i % 5000}",
                job_key=f"job{i % 5000}",
                scheduled_at=now + timedelta(seconds=i),
                fire_at=now + timedelta(seconds=i),
            )
            for i in range(n)
        ]
        store.insert_runs(runs)
        ids = iter(r.run_id for r in runs)
        settles = [("settle", [next(ids) for _ in range(250 + k % 100)]) for k in range(args.settles)]
        claims = [("claim", [next(ids) for _ in range(60 + k % 40)]) for k in range(args.claims)]
        out = {"settles": measure(store, name, token, settles), "claims": measure(store, name, token, claims)}
        store.close()
        out["loadavg"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        print(json.dumps(out, indent=1))
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
