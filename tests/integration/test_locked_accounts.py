"""A locked or expired account's jobs do not run, and say why (as cron's PAM check).

The repro: `usermod -L` and `usermod -e 1` on a real account whose job runs every
second under a real root chronod. Its runs end `skipped_account` naming the account and
the lock or the expiry date, and the command never runs; unlocked, it runs again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, runs_json, wait_until
from tests.integration.local_users import account

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("users")]

USER = "chr-users-8"
HASH = "$6$chrono$8kG0TQ8e2hAHq0b3kVv8m4r8iY8lq3mQ0mHk2b2R5c7m8yZpJc1w0m7bJvYtqG3y9bQdTQ0cM6u3p0lM1iK2x/"


def states(db: str) -> list[dict]:
    return runs_json("report", db)


def wait_for(db: str, state: str, after: int = 0) -> dict:
    def found():
        rs = [r for r in states(db) if r["state"] == state]
        return rs[-1] if len(rs) > after else None

    return wait_until(found, timeout=20, what=f"a run of {USER}'s job to end {state}")


def test_a_locked_or_expired_accounts_runs_end_skipped_account_and_never_start():
    d = Path(tempfile.mkdtemp(prefix="chrono-acct-"))
    os.chmod(d, 0o755)
    (d / "out").mkdir()
    os.chmod(d / "out", 0o1777)  # the job, as the account, writes its witness here
    witness = d / "out" / "ran"
    try:
        with account(USER):
            subprocess.run(["usermod", "-p", HASH, USER], check=True)
            subprocess.run(["usermod", "-L", USER], check=True)
            reg = d / "jobs.d"
            reg.mkdir()
            (reg / "report.yaml").write_text(jobs_file(job("report", "@every 1s", f"id -u >> {witness}", user=USER)))
            db = str(d / "chrono.db")
            daemon = Chronod(reg, db, d / "chronod.log").start()

            locked = wait_for(db, "skipped_account")
            assert locked["error"].startswith(f"account {USER} is locked (usermod -L)"), locked
            assert not witness.exists()

            subprocess.run(["usermod", "-U", "-e", "1", USER], check=True)
            expired = wait_until(
                lambda: [r for r in states(db) if "expired on 1970-01-02" in (r["error"] or "")],
                timeout=20,
                what="a run refused for the expiry",
            )[-1]
            assert expired["state"] == "skipped_account" and USER in expired["error"], expired
            assert not witness.exists()
            status = json.loads(chronoctl("status", "--json", db=db, check=True).stdout)
            assert [(f["job_id"], f["state"]) for f in status["failing"]] == [("report", "skipped_account")]

            subprocess.run(["usermod", "-e", "", USER], check=True)
            wait_for(db, "succeeded")
            assert daemon.stop() == 0
            assert (
                witness.read_text().split()[0]
                == subprocess.run(["id", "-u", USER], capture_output=True, text=True, check=True).stdout.strip()
            )
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_locked_accounts_notify_command_does_not_run_and_says_why():
    """A notify command runs as its job's account: locked, it runs nothing, as the job."""
    from chronod.notify.deliver import DeliveryError, run_command

    d = Path(tempfile.mkdtemp(prefix="chrono-acct-"))
    os.chmod(d, 0o1777)  # the command, as the account, writes its witness here
    witness = d / "ran"
    route = {"command": f"id -u > {witness}", "user": USER, "group": None, "timeout_s": 10}
    payload = {"event": "failed", "job_id": "report", "run_id": "r1", "owner": "team", "state": "failed"}
    try:
        with account(USER):
            subprocess.run(["usermod", "-p", HASH, USER], check=True)
            subprocess.run(["usermod", "-L", USER], check=True)
            with pytest.raises(DeliveryError, match=f"not run: account {USER} is locked"):
                run_command(route, payload)
            assert not witness.exists()
            subprocess.run(["usermod", "-U", USER], check=True)
            run_command(route, payload)
            uid = subprocess.run(["id", "-u", USER], capture_output=True, text=True, check=True).stdout.strip()
            assert witness.read_text().strip() == uid
    finally:
        shutil.rmtree(d, ignore_errors=True)
