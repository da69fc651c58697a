"""Delegation that cannot escalate, with real users and a real root daemon.

A job file not owned by root runs only as its owner, with the owner's primary group and
memberships; it cannot take an id or a resource a root-owned file defines, whatever the
names sort like; notify commands of `user:` jobs run with exactly the job's credentials.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from chronod.notify.deliver import run_command
from chronod.specfile import load_registry
from tests.integration.daemon_helpers import Chronod, job, jobs_file, runs_json, wait_until
from tests.integration.local_users import account

# "users": the tests that create system users run on one worker, one at a time.
pytestmark = [pytest.mark.root, pytest.mark.xdist_group("users")]

USER, EXTRA = "chrono-deleg", "chrono-dgrp"
NOW = datetime.now(timezone.utc)


@pytest.fixture(scope="module")
def owner():
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: delegation tests need root (they create a user and a group)")
    made_group = subprocess.run(["getent", "group", EXTRA], capture_output=True).returncode != 0
    if made_group:
        subprocess.run(["groupadd", "--system", EXTRA], check=True)
    made_user = subprocess.run(["getent", "passwd", USER], capture_output=True).returncode != 0
    if made_user:
        subprocess.run(["useradd", "--system", "--no-create-home", "-G", EXTRA, USER], check=True)
    yield pwd.getpwnam(USER)
    if made_user:
        subprocess.run(["userdel", USER], check=False)
    if made_group:
        subprocess.run(["groupdel", EXTRA], check=False)


@pytest.fixture
def world(tmp_path, owner):
    reg = tmp_path / "jobs.d"
    reg.mkdir(mode=0o755)
    out = Path(tempfile.mkdtemp(prefix="chrono-deleg-"))  # reachable by the user (tmp_path is not)
    os.chmod(out, 0o1777)
    yield {"reg": reg, "out": out, "db": str(tmp_path / "chrono.db"), "log": tmp_path / "chronod.log"}
    shutil.rmtree(out, ignore_errors=True)


def put(path: Path, text: str, uid: int = 0, gid: int = 0) -> None:
    path.write_text(text)
    os.chmod(path, 0o644)
    os.chown(path, uid, gid)


def ids_of(text: str) -> tuple[int, int, set[int]]:
    uid, gid, groups = text.split()[:3]
    return int(uid), int(gid), {int(g) for g in groups.split(",")}


ID = 'printf "%s %s %s\\n" "$(id -u)" "$(id -g)" "$(id -G | tr " " ,)"'


def test_a_delegated_file_cannot_choose_a_group(world, owner):
    for group in ("shadow", "root"):
        put(
            world["reg"] / "mine.yaml",
            jobs_file(job("mine", "@every 1s", f"{ID} > {world['out']}/mine", user=USER, group=group)),
            owner.pw_uid,
            owner.pw_gid,
        )
        result = load_registry([world["reg"]], now=NOW, secure=True)
        assert "mine" not in result.jobs
        problem = next(p for p in result.problems if p.path == "group")
        assert group in problem.message and USER in problem.message


def test_a_delegated_job_runs_as_its_owner_with_the_owners_groups_only(world, owner):
    put(
        world["reg"] / "mine.yaml",
        jobs_file(job("mine", "@every 1s", f"{ID} > {world['out']}/mine", user=USER)),
        owner.pw_uid,
        owner.pw_gid,
    )
    put(
        world["reg"] / "shadowy.yaml",
        jobs_file(job("shadowy", "@every 1s", f"{ID} > {world['out']}/shadowy", user=USER, group="shadow")),
        owner.pw_uid,
        owner.pw_gid,
    )
    put(world["reg"] / "root.yaml", jobs_file(job("rootjob", "@every 1s", "true")))
    d = Chronod(world["reg"], world["db"], world["log"]).start()
    wait_until(
        lambda: (world["out"] / "mine").exists() and (world["out"] / "mine").read_text().strip(),
        timeout=15,
        what="the delegated job to run",
    )
    time.sleep(0.5)
    d.stop()
    uid, gid, groups = ids_of((world["out"] / "mine").read_text())
    assert (uid, gid) == (owner.pw_uid, owner.pw_gid)
    assert groups == set(os.getgrouplist(USER, owner.pw_gid))
    assert grp.getgrnam(EXTRA).gr_gid in groups
    assert not groups & {0, grp.getgrnam("shadow").gr_gid}
    # the other file asked for another group: none of its jobs ran
    assert not (world["out"] / "shadowy").exists()


@pytest.mark.parametrize("evil_name", ["00-evil.yaml", "zz-evil.yaml"])
def test_a_delegated_file_cannot_take_over_a_root_job_or_resource_whatever_the_order(world, owner, evil_name):
    root_file = world["reg"] / "good.yaml"
    put(
        root_file,
        "resources:\n  db: {max_concurrency: 1}\n"
        + jobs_file(job("backup", "@every 1s", f"echo root > {world['out']}/backup", resource="db")),
    )
    evil = world["reg"] / evil_name
    put(
        evil,
        jobs_file(job("backup", "@every 1s", f"echo evil > {world['out']}/evil", user=USER)),
        owner.pw_uid,
        owner.pw_gid,
    )
    result = load_registry([world["reg"]], now=NOW, secure=True)
    assert result.jobs["backup"].source_file == str(root_file)
    problem = next(p for p in result.problems if p.file == str(evil))
    assert str(root_file) in problem.message and "refused" in problem.message

    put(
        evil,
        "resources:\n  db: {max_concurrency: 50}\n"
        + jobs_file(job("other", "@every 1s", "true", user=USER, resource="db")),
        owner.pw_uid,
        owner.pw_gid,
    )
    result = load_registry([world["reg"]], now=NOW, secure=True)
    assert result.resources["db"].max_concurrency == 1 and "other" not in result.jobs
    problem = next(p for p in result.problems if p.file == str(evil))
    assert str(root_file) in problem.message and "resource 'db'" in problem.message

    put(
        evil,
        jobs_file(job("backup", "@every 1s", f"echo evil > {world['out']}/evil", user=USER)),
        owner.pw_uid,
        owner.pw_gid,
    )
    d = Chronod(world["reg"], world["db"], world["log"]).start()
    # a run that ended, not two runs of any state: a pending one and one still going (its
    # `echo` not done when chronod stops) were two, and the file was not there yet
    wait_until(
        lambda: any(r["state"] == "succeeded" for r in runs_json("backup", world["db"])),
        timeout=15,
        what="root's backup to succeed",
    )
    d.stop()
    assert (world["out"] / "backup").read_text().strip() == "root"
    assert not (world["out"] / "evil").exists()


def test_a_notify_command_runs_with_exactly_the_jobs_credentials_and_environment(world, owner):
    out = world["out"] / "notify"
    route = {
        "command": f'{ID} > {out}; echo "$HOME $USER $LOGNAME" >> {out}; env | sort >> {out}',
        "user": USER,
        "group": None,
        "timeout_s": 10,
    }
    run_command(route, {"event": "failure", "job_id": "mine", "run_id": "r1", "owner": "team", "state": "failed"})
    first, who, *env = out.read_text().splitlines()
    uid, gid, groups = ids_of(first)
    assert (uid, gid) == (owner.pw_uid, owner.pw_gid)
    assert groups == set(os.getgrouplist(USER, owner.pw_gid)) and 0 not in groups
    assert who == f"{owner.pw_dir} {USER} {USER}"
    names = {line.split("=", 1)[0] for line in env}
    assert names <= {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "PWD", "SHLVL", "_", "OLDPWD"} | {
        n for n in names if n.startswith("CHRONO_")
    }


OTHER = "chrono-deleg2"


def two_users_files(world, owner, other, *, evil_first: bool) -> tuple[Path, Path]:
    """The other user's file (a job, its resource, its window) and, as the owner, a file
    that defines the same three names, made older than the other's when `evil_first`
    (its owner sets its mtime: `touch -d`)."""
    theirs, evil = world["reg"] / "alice.yaml", world["reg"] / "zz-evil.yaml"
    window = (
        "blackouts:\n  - name: {name}-maint\n    reason: patching\n    timezone: UTC\n"
        "    from: 2001-01-01 00:00\n    to: 2001-01-01 01:00\n    jobs: [backup]\n"
    )
    put(
        theirs,
        "resources:\n  db: {max_concurrency: 1}\n"
        + window.format(name="alice")
        + jobs_file(job("backup", "@every 1s", f"echo alice > {world['out']}/backup", user=OTHER, resource="db")),
        other.pw_uid,
        other.pw_gid,
    )
    put(
        evil,
        "resources:\n  db: {max_concurrency: 1}\n"
        + window.format(name="alice")
        + jobs_file(
            job("backup", "@every 1s", f"echo evil > {world['out']}/evil", user=USER),
            job("hog", "@every 1s", "true", user=USER, resource="db"),
        ),
        owner.pw_uid,
        owner.pw_gid,
    )
    older = time.time() - 86400 * 365
    os.utime(evil if evil_first else theirs, (older, older))
    return theirs, evil


def says(path: Path, text: str) -> bool:
    """`path` holds `text` (a line): not only there, as it is once the job's shell has opened
    it and before its `echo` has written."""
    try:
        return path.read_text().strip() == text
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("evil_first", [True, False])
def test_a_delegated_file_takes_no_job_id_resource_or_window_of_another_users_file(world, owner, evil_first):
    with account(OTHER) as other:
        theirs, evil = two_users_files(world, owner, other, evil_first=evil_first)
        result = load_registry([world["reg"]], now=NOW, secure=True)
    assert result.jobs.get("backup") is None or result.jobs["backup"].source_file != str(evil)
    assert "hog" not in result.jobs  # a job in the other user's resource group
    assert not any(w.source_file == str(evil) for w in result.blackouts)
    for mine, named in ((theirs, evil), (evil, theirs)):
        said = " | ".join(p.message for p in result.problems if p.file == str(mine) and p.severity == "error")
        for what in ("job id 'backup'", "resource 'db'", "window 'alice-maint'"):
            assert f"{what} is also defined by" in said and str(named) in said, said


def test_a_file_of_another_user_made_older_does_not_run_its_command_under_a_running_jobs_id(world, owner):
    """The hijack: the running job of one user keeps running its own command (its file's
    last good version) when another user's file with the same id appears, older."""
    with account(OTHER) as other:
        theirs, evil = two_users_files(world, owner, other, evil_first=True)
        evil_text = evil.read_text()
        evil.unlink()
        d = Chronod(world["reg"], world["db"], world["log"]).start()
        try:
            wait_until(lambda: says(world["out"] / "backup", "alice"), timeout=15, what="alice's backup to run")
            put(evil, evil_text, owner.pw_uid, owner.pw_gid)
            older = time.time() - 86400 * 365
            os.utime(evil, (older, older))
            wait_until(lambda: "registry.error" in d.log_since_start(), timeout=15, what="the reload")
            (world["out"] / "backup").unlink()
            wait_until(lambda: says(world["out"] / "backup", "alice"), timeout=15, what="alice's backup to run again")
        finally:
            d.stop()
    assert (world["out"] / "backup").read_text().strip() == "alice"
    assert not (world["out"] / "evil").exists()
