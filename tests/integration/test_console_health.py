"""`chronoctl status` is a health check that cannot lie, and start-up trusts no bare pid:
after kill -9 the local chronod is judged by its pid, process start time and boot id, so
status says down at once (not when the 600 s SQLite lease ends), and a new chronod starts
beside the old one's zombie."""

from __future__ import annotations

import json
import os
import signal
import time

from chronod import fsutil
from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, wait_until, write_jobs


def test_kill_9_of_the_local_chronod_is_exit_3_at_once_and_its_zombie_does_not_block_a_new_start(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "a.yaml", jobs_file(job("tick", "@every 1h", "true")))
    db = str(tmp_path / "chrono.db")
    first = Chronod(reg, db, tmp_path / "first.log").start()
    healthy = chronoctl("status", "--json", db=db)
    assert healthy.returncode == 0, healthy.stderr
    assert json.loads(healthy.stdout)["health"]["verdict"] == "healthy"
    one = chronoctl("status", "tick", db=db)
    assert one.returncode == 0 and one.stdout.splitlines()[0].split() == ["health", "healthy", "(exit", "0)"], (
        one.stdout
    )

    pid = first.proc.pid
    os.kill(pid, signal.SIGKILL)  # not reaped: a zombie, which kill -0 still finds
    wait_until(lambda: fsutil.process_start(pid) is None, what="chronod to die")
    killed = time.monotonic()
    down = chronoctl("status", db=db)
    answered_s = time.monotonic() - killed
    assert down.returncode == 3, (down.stdout, down.stderr)
    assert f"died: process {pid} is gone" in " ".join(down.stdout.split()), down.stdout
    assert "its lease is held until" in " ".join(down.stdout.split())
    assert "no live chronod" in down.stderr
    print(f"status answered 3 {answered_s:.2f}s after the kill (lease 600 s)")
    gone = chronoctl("status", "tick", db=db)
    assert gone.returncode == 3 and gone.stdout.startswith("health ") and "DOWN (exit 3): " in gone.stdout, gone.stdout
    assert "down" in chronoctl("list", "--registry", str(reg), db=db).stderr

    second = Chronod(reg, db, tmp_path / "second.log").start()  # the zombie is still there
    assert fsutil.pid_alive(pid), "the old chronod must still be an unreaped zombie here"
    assert "another chronod" not in second.log_since_start()
    assert chronoctl("status", db=db).returncode == 0
    first.proc.wait(10)
    second.stop()
