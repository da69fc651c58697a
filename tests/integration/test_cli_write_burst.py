"""chronoctl's writes wait for the database's lock instead of failing.

The repro: 150 `chronoctl pause` and `trigger` at once against a running daemon with 75
jobs firing every second. Before, about half ended `database is locked`, exit 3, and the
daemon's notifier logged `notify.step_failed ... database is locked`. Now every one
succeeds and the daemon logs no such failure. The test runs 40 writers beside 20 jobs:
150 cost a minute and a half of CPU on the suite's two (SQLAlchemy's import, 0.7 s a
command), and 40 already fail this way with the busy wait cut to 10 ms (checked).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from chronod.store.api import open_store
from tests.integration.daemon_helpers import BIN, Chronod, job, jobs_file

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("users")]

JOBS = 20


def test_40_concurrent_pauses_and_triggers_all_succeed_against_a_running_daemon(tmp_path: Path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    (reg / "many.yaml").write_text(jobs_file(*(job(f"j{i}", "@every 1s", "true") for i in range(JOBS))))
    db = str(tmp_path / "chrono.db")
    d = Chronod(reg, db, tmp_path / "chronod.log").start()
    ctl = str(BIN / "chronoctl")
    procs = []
    for i in range(JOBS):
        for argv in (["pause", f"j{i}", "--reason", "burst"], ["trigger", f"j{i}"]):
            procs.append(subprocess.Popen([ctl, *argv, "--db", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    ends = [(p.args, p.wait(900), p.stderr.read().decode()) for p in procs]  # type: ignore[union-attr]
    for p in procs:
        p.stdout.close()  # type: ignore[union-attr]
        p.stderr.close()  # type: ignore[union-attr]
    failed = [(args, code, err) for args, code, err in ends if code != 0]
    assert not failed, failed[:5]
    assert len(ends) == 2 * JOBS
    assert d.stop() == 0
    log = d.log_since_start()
    assert "database is locked" not in log, [ln for ln in log.splitlines() if "locked" in ln][:3]
    store = open_store(db)
    try:
        assert len(store.paused_jobs()) == JOBS
    finally:
        store.close()
