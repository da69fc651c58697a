"""The ledger is private: another local user reads neither root's output nor its `env:`.

The repro: a root job prints a secret and has an `env:` token, in a file of mode 0600;
the database sits in a directory everyone may enter. As another user, `chronoctl logs`
is refused with the fix named, and SQLite itself cannot open the database.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import Chronod, job, jobs_file, runs_json, wait_until
from tests.integration.local_users import account, chronoctl_as, python_as

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("users")]

USER = "chr-users-1"
SECRET, TOKEN = "TOPSECRET-root-output", "s3cr3t-token-value"


@pytest.fixture
def open_dir():
    d = Path(tempfile.mkdtemp(prefix="chrono-private-"))
    os.chmod(d, 0o755)  # anyone may enter: only the files' own modes keep them private
    yield d
    shutil.rmtree(d, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_another_user_reads_neither_the_output_nor_the_env_of_a_root_job(open_dir):
    reg = open_dir / "jobs.d"
    reg.mkdir(mode=0o700)
    (reg / "secret.yaml").write_text(
        jobs_file(job("rootsecret", "@every 1s", f"echo {SECRET}; echo $API_TOKEN", env={"API_TOKEN": TOKEN}))
    )
    os.chmod(reg / "secret.yaml", 0o600)
    db = open_dir / "chrono.db"
    d = Chronod(reg, str(db), open_dir / "chronod.log").start()
    wait_until(lambda: any(r["state"] == "succeeded" for r in runs_json("rootsecret", str(db))), what="a run")
    assert d.stop() == 0

    assert mode(db) == 0o600
    for side in ("-wal", "-shm"):
        if Path(f"{db}{side}").exists():
            assert mode(Path(f"{db}{side}")) == 0o600, side
    assert mode(Path(f"{db}.state")) == 0o700
    with account(USER):
        logs = chronoctl_as(USER, "logs", "rootsecret", "--db", str(db))
        assert logs.returncode == 3, logs
        assert "permission denied" in logs.stderr and "sudo chronoctl" in logs.stderr, logs.stderr
        assert "Traceback" not in logs.stderr and SECRET not in logs.stdout + logs.stderr
        peek = python_as(
            USER,
            "import sqlite3; print(sqlite3.connect(sys.argv[1]).execute('select spec_json from jobs').fetchall())",
            str(db),
        )
        assert peek.returncode != 0 and TOKEN not in peek.stdout, peek
        assert "unable to open database file" in peek.stderr, peek.stderr


def test_a_database_made_readable_before_is_narrowed_when_chronod_starts(open_dir):
    reg = open_dir / "jobs.d"
    reg.mkdir()
    db = open_dir / "old.db"
    Chronod(reg, str(db), open_dir / "chronod.log").start().stop()
    os.chmod(db, 0o644)  # as versions before this one created it
    os.chmod(f"{db}.state", 0o755)
    d = Chronod(reg, str(db), open_dir / "chronod.log").start()
    assert mode(db) == 0o600 and mode(Path(f"{db}.state")) == 0o700
    d.stop()


def test_a_user_who_can_open_the_database_still_sees_only_the_output_of_jobs_that_run_as_them(open_dir):
    with account(USER):
        reg = open_dir / "jobs.d"
        reg.mkdir(mode=0o700)
        (reg / "jobs.yaml").write_text(
            jobs_file(
                job("rootsecret", "@every 1s", f"echo {SECRET}"), job("mine", "@every 1s", "echo mine", user=USER)
            )
        )
        db = open_dir / "chrono.db"
        d = Chronod(reg, str(db), open_dir / "chronod.log").start()
        for job_id in ("rootsecret", "mine"):
            wait_until(lambda j=job_id: any(r["state"] == "succeeded" for r in runs_json(j, str(db))), what=job_id)
        assert d.stop() == 0
        # an operator opens the ledger to everyone (and lets SQLite make its -shm file)
        os.chmod(open_dir, 0o1777)
        for f in open_dir.glob("chrono.db*"):
            if f.is_file():
                os.chmod(f, 0o644)
        refused = chronoctl_as(USER, "logs", "rootsecret", "--db", str(db))
        assert refused.returncode == 3 and SECRET not in refused.stdout, refused
        assert "job 'rootsecret' runs as the user who runs chronod" in refused.stderr, refused.stderr
        mine = chronoctl_as(USER, "logs", "mine", "--db", str(db))
        assert mine.returncode == 0 and "mine" in mine.stdout, mine
