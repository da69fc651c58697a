"""The SQLite file deleted or replaced under a running daemon: noticed within seconds,
copied back from the file the daemon still holds open, nothing recorded lost."""

from __future__ import annotations

import os
import sqlite3
import time
from datetime import datetime
from pathlib import Path

from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, runs_json, wait_until, write_jobs


def _start(tmp_path: Path) -> tuple[Chronod, Path]:
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    db = tmp_path / "chrono.db"
    write_jobs(reg / "tick.yaml", jobs_file(job("tick", "@every 1s", "true")))
    d = Chronod(reg, str(db), tmp_path / "chronod.log").start()
    wait_until(
        lambda: len([r for r in runs_json("tick", str(db)) if r["state"] == "succeeded"]) >= 4,
        timeout=20,
        what="a few runs",
    )
    return d, db


def _seconds(db: Path) -> list[int]:
    runs = [r for r in runs_json("tick", str(db), since="1h") if r["state"] == "succeeded"]
    return sorted(int(datetime.fromisoformat(r["scheduled_at"]).timestamp()) for r in runs)


def test_a_deleted_database_is_restored_with_everything_written_before_and_after(tmp_path):
    d, db = _start(tmp_path)
    before = _seconds(db)
    for p in tmp_path.glob("chrono.db*"):
        if p.is_file():
            p.unlink()
    gone_at = time.monotonic()
    # noticed within seconds (a check every 2 s); how soon exactly is a loaded host's to say
    wait_until(lambda: "event=db.restored" in d.log_since_start(), timeout=30, what="the restore")
    noticed_s = time.monotonic() - gone_at
    wait_until(lambda: db.exists(), timeout=2, what="the file back")
    # each look is a chronoctl process: seconds apiece on a loaded host
    wait_until(lambda: _seconds(db)[-1] - before[-1] >= 5, timeout=40, what="runs after the restore")
    status = chronoctl("status", "--json", db=str(db))
    assert d.stop() == 0
    after = _seconds(db)
    log = d.log_since_start()
    print(f"\nFIGURE deleted database restored {noticed_s:.1f}s after the delete")
    assert "what=unlinked" in log and log.count("event=db.restored") == 1
    assert status.returncode == 0, status.stderr
    assert set(before) <= set(after)  # nothing written before the delete is lost
    assert after[-1] - before[-1] >= 5  # nor what the daemon wrote while the file was gone, nor after
    gaps = [b - a for a, b in zip(after, after[1:])]
    assert max(gaps) <= 2, gaps


def test_a_replaced_database_is_put_aside_and_the_daemons_own_copy_restored(tmp_path):
    d, db = _start(tmp_path)
    before = _seconds(db)
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()
    os.replace(other, db)
    wait_until(lambda: "event=db.restored" in d.log_since_start(), timeout=30, what="the restore")
    time.sleep(2)
    assert d.stop() == 0
    log = d.log_since_start()
    assert "what=replaced" in log and log.count("event=db.restored") == 1, log
    assert list(tmp_path.glob("chrono.db.replaced-*")), sorted(p.name for p in tmp_path.iterdir())
    after = _seconds(db)
    assert set(before) <= set(after) and len(after) > len(before)
