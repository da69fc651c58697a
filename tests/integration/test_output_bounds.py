"""A full database degrades the job whose output does not fit, not the host: a real chronod
on a real small filesystem (a tmpfs of 8 MB holding the SQLite database)."""

from __future__ import annotations

import os
import pwd
import subprocess

import pytest

from tests.integration.daemon_helpers import Chronod, job, jobs_file, runs_json, wait_until, write_jobs

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("users")]
USER = "chr-bounds-1"


@pytest.fixture
def delegate():
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: a delegated file needs root (the test creates a user)")
    made = subprocess.run(["getent", "passwd", USER], capture_output=True).returncode != 0
    if made:
        subprocess.run(["useradd", "--system", "--no-create-home", USER], check=True)
    try:
        yield pwd.getpwnam(USER)
    finally:
        if made:
            subprocess.run(["userdel", USER], check=False)


@pytest.fixture
def small_fs(tmp_path):
    if subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() != "0":
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "small"
    where.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.slow
def test_output_that_does_not_fit_the_database_is_dropped_with_a_note_and_roots_job_keeps_running(
    tmp_path, small_fs, delegate
):
    """A delegated job printing 7 MB a run (output_limit_kb 16384, the host's budget
    raised to 16M) against a database on 8 MB: each run is recorded, its output dropped
    with a note; root's every-second job goes on succeeding; nothing retries the big write."""
    reg = tmp_path / "jobs.d"
    reg.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    big = "head -c 7000000 /dev/zero | tr '\\0' x"
    write_jobs(reg / "root.yaml", jobs_file(job("tick", "@every 1s", "true")))
    theirs = reg / "theirs.yaml"
    write_jobs(theirs, jobs_file(job("big", "@every 2s", big, output_limit_kb=16384, user=USER)))
    os.chown(theirs, delegate.pw_uid, delegate.pw_gid)
    db = str(small_fs / "chrono.db")
    d = Chronod(
        reg,
        db,
        tmp_path / "chronod.log",
        env={"CHRONO_OUTPUT_BUDGET": "16M", "CHRONO_STATE_DIR": str(tmp_path / "state")},
    ).start()
    try:
        noted = wait_until(
            lambda: [r for r in runs_json("big", db) if "output dropped: database full" in (r.get("error") or "")],
            timeout=60,
            what="a run of big recorded with its output dropped",
        )
        assert noted[0]["state"] == "succeeded"
        seen = len([r for r in runs_json("tick", db) if r["state"] == "succeeded"])
        # the database stays writable: root's job goes on succeeding beside the big one
        wait_until(
            lambda: len([r for r in runs_json("tick", db) if r["state"] == "succeeded"]) >= seen + 5,
            timeout=60,
            what="five more successes of tick",
        )
        wait_until(
            lambda: len([r for r in runs_json("big", db) if "database full" in (r.get("error") or "")]) >= 2,
            timeout=60,
            what="a second run of big degraded the same way",
        )
        assert "store.unreachable" not in d.log_since_start()
        assert d.proc.poll() is None
    finally:
        d.stop()


@pytest.mark.slow
def test_a_database_volume_filled_to_the_last_byte_by_something_else_degrades_only_the_job_with_output(
    tmp_path, small_fs, delegate
):
    """Something else fills the volume to its last byte while a delegated job prints 7 MB
    a run: root's every-second job goes on being recorded while the volume is full and
    after the space returns, with nothing done to the daemon; each big run is recorded
    once, its output dropped with the note (no write is retried)."""
    reg = tmp_path / "jobs.d"
    reg.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    write_jobs(reg / "root.yaml", jobs_file(job("tick", "@every 1s", "true")))
    theirs = reg / "theirs.yaml"
    big = "head -c 7000000 /dev/zero | tr '\\0' x"
    write_jobs(theirs, jobs_file(job("big", "@every 2s", big, output_limit_kb=16384, user=USER)))
    os.chown(theirs, delegate.pw_uid, delegate.pw_gid)
    db = str(small_fs / "chrono.db")
    env = {"CHRONO_OUTPUT_BUDGET": "16M", "CHRONO_STATE_DIR": str(tmp_path / "state")}
    d = Chronod(reg, db, tmp_path / "chronod.log", env=env).start()
    filler = small_fs / "filler"

    def ticks() -> int:
        return len([r for r in runs_json("tick", db) if r["state"] == "succeeded"])

    try:
        wait_until(lambda: "event=store.full" in d.log_since_start(), timeout=60, what="a big run's output dropped")
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)  # until ENOSPC
        assert os.statvfs(small_fs).f_bavail == 0
        full = ticks()
        wait_until(lambda: ticks() >= full + 5, timeout=60, what="five more successes of tick on a full volume")
        filler.unlink()
        back = ticks()
        wait_until(lambda: ticks() >= back + 3, timeout=60, what="tick recorded after the space returned")
        assert d.proc.poll() is None
        d.stop()  # so that the runs and the log below describe the same moment
        big_runs = [r for r in runs_json("big", db) if r["state"] not in ("pending", "running")]
        dropped = [r for r in big_runs if "output dropped: database full" in (r.get("error") or "")]
        assert dropped and all(r["state"] == "succeeded" for r in big_runs)
        # one fallback per run that did not fit: no write is tried again and again
        assert d.log_since_start().count("event=store.full") == len(dropped)
    finally:
        d.stop()
        filler.unlink(missing_ok=True)


def test_the_hosts_output_budget_caps_what_a_run_stores_whatever_its_file_asks(tmp_path):
    """output_limit_kb 64, CHRONO_OUTPUT_BUDGET=1K: a run printing 20,000 bytes stores its
    last 1,024, counts all 20,000, and says that the host's budget cut it."""
    from chronod.store.api import open_store

    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(
        reg / "a.yaml",
        jobs_file(job("chatty", "@every 1s", "head -c 19996 /dev/zero | tr '\\0' x; echo END", output_limit_kb=64)),
    )
    db = str(tmp_path / "chrono.db")
    d = Chronod(reg, db, tmp_path / "chronod.log", env={"CHRONO_OUTPUT_BUDGET": "1K"}).start()
    try:
        run = wait_until(
            lambda: next((r for r in runs_json("chatty", db) if r["state"] == "succeeded"), None),
            timeout=30,
            what="a run of chatty",
        )
    finally:
        d.stop()
    stored = open_store(db).get_run(run["run_id"])
    assert stored.output_bytes == 20000
    assert len(stored.output_tail.encode()) == 1024 and stored.output_tail == "x" * 1020 + "END\n"
    assert "host's output budget (1024 bytes a run, CHRONO_OUTPUT_BUDGET)" in stored.error
