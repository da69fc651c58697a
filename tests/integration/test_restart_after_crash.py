"""A crashed chronod restarts (issue: "a crashed daemon stays down"): the previous
daemon is judged by pid + process start time + boot id, so neither its unreaped zombie
nor an unrelated process now on its pid makes the next start fail with "another chronod
... is using this database". Real daemons, a real zombie, a real stand-in process."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess

from chronod import fsutil
from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, wait_until, write_jobs


def _env(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "a.yaml", jobs_file(job("x", "@every 1h", "true")))
    return reg, str(tmp_path / "chrono.db"), tmp_path / "chronod.log"


def test_a_zombie_of_the_crashed_daemon_does_not_keep_the_next_one_down(tmp_path):
    reg, db, log = _env(tmp_path)
    first = Chronod(reg, db, log).start()
    assert first.proc is not None
    first.proc.send_signal(signal.SIGKILL)  # kill -9, and its parent (this test) does not reap it
    wait_until(lambda: fsutil.process_start(first.proc.pid) is None, what="chronod to die")
    assert fsutil.pid_alive(first.proc.pid), "not a zombie: the test would prove nothing"
    second = Chronod(reg, db, log).start()  # asserts it became ready
    assert "another chronod" not in second.log_since_start()
    status = json.loads(chronoctl("status", "--json", db=db, check=True).stdout)
    contained = [n.get("containment") for n in status["nodes"] if n["up"]]
    assert contained and contained[0].startswith(("cgroup v2 (", "subreaper")), status["nodes"]
    assert f"runs contained by {contained[0]}" in chronoctl("status", db=db, check=True).stdout
    second.stop()
    first.proc.wait()


def test_an_unrelated_process_on_the_recorded_pid_does_not_keep_the_next_one_down(tmp_path):
    reg, db, log = _env(tmp_path)
    first = Chronod(reg, db, log).start()
    first.kill9()
    stand_in = subprocess.Popen(["sleep", "600"])  # alive, on "chronod's" pid, started later
    try:
        with sqlite3.connect(db) as conn:
            assert conn.execute("UPDATE nodes SET pid = ?", (stand_in.pid,)).rowcount == 1
        assert fsutil.pid_alive(stand_in.pid)
        second = Chronod(reg, db, log).start()
        assert "another chronod" not in second.log_since_start()
        second.stop()
    finally:
        stand_in.kill()
        stand_in.wait()


def test_a_live_chronod_still_keeps_a_second_one_out(tmp_path):
    """The other side: the same check refuses a start while the first daemon runs."""
    reg, db, log = _env(tmp_path)
    first = Chronod(reg, db, log).start()
    second = Chronod(reg, db, log).start(wait_ready=False)
    assert second.proc is not None and second.proc.wait(30) == 78
    assert "another chronod" in second.log_since_start()
    first.stop()
