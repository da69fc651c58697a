"""Files the daemon writes are never written through a link another user planted.

The repro: the database in a world-writable directory (as the README's demo in /tmp),
another user pre-creates `<db>.state` and plants `<run>.1.result.json.tmp` links to a
root-owned 0600 file. chronod refuses to start (exit 78) and names the directory's
owner; the victim file is untouched. Inside a directory chronod owns, a link found in
place of a file it writes is replaced, never followed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from chronod.runner import files
from tests.integration.daemon_helpers import BIN, job, jobs_file
from tests.integration.local_users import account, as_user

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("users")]

USER = "chr-users-7"
VICTIM_TEXT = b"root's own file, mode 0600\n"


@pytest.fixture
def shared_tmp():
    d = Path(tempfile.mkdtemp(prefix="chrono-shared-"))
    os.chmod(d, 0o1777)  # like /tmp
    victim = Path(tempfile.mkdtemp(prefix="chrono-victim-")) / "victim"
    victim.write_bytes(VICTIM_TEXT)
    os.chmod(victim, 0o600)
    yield d, victim
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(victim.parent, ignore_errors=True)


def chronod(reg: Path, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "chronod"), "--registry", str(reg), "--db", str(db)], capture_output=True, text=True, timeout=60
    )


def registry(d: Path) -> Path:
    reg = d / "jobs.d"
    reg.mkdir(mode=0o755)
    (reg / "tick.yaml").write_text(jobs_file(job("tick", "@every 1s", "true")))
    return reg


def test_chronod_refuses_a_state_directory_another_user_made_and_follows_none_of_its_links(shared_tmp):
    d, victim = shared_tmp
    db = d / "demo.db"
    state = Path(f"{db}.state")
    with account(USER):
        made = as_user(USER, "mkdir", "-m", "0777", str(state))
        assert made.returncode == 0, made
        for n in range(50):
            link = as_user(USER, "ln", "-s", str(victim), str(state / f"run{n}.1.result.json.tmp"))
            assert link.returncode == 0, link
        res = chronod(registry(d), db)
    assert res.returncode == 78, res
    assert f"state directory {state} belongs to {USER}" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert victim.read_bytes() == VICTIM_TEXT and (victim.stat().st_mode & 0o777) == 0o600


def test_chronod_refuses_a_database_file_another_user_made(shared_tmp):
    d, _ = shared_tmp
    db = d / "demo.db"
    with account(USER):
        assert as_user(USER, "touch", str(db)).returncode == 0
        res = chronod(registry(d), db)
    assert res.returncode == 78, res
    assert f"database file {db} belongs to {USER}" in res.stderr, res.stderr
    assert not Path(f"{db}.state").exists()


def test_chronod_refuses_a_state_directory_that_is_a_link(shared_tmp):
    d, victim = shared_tmp
    db = d / "demo.db"
    os.symlink(victim.parent, f"{db}.state")
    res = chronod(registry(d), db)
    assert res.returncode == 78, res
    assert "is a symbolic link" in res.stderr, res.stderr


@pytest.mark.parametrize("kind", [files.RESULT, files.STARTED])
def test_a_link_planted_in_place_of_a_temporary_file_is_replaced_not_followed(tmp_path, shared_tmp, kind):
    _, victim = shared_tmp
    path = files.path_of(tmp_path, "r1", 1, kind)
    os.symlink(victim, path + ".tmp")
    files.write_json(path, {"state": "succeeded"}, durable=True)
    assert victim.read_bytes() == VICTIM_TEXT
    assert files.read_json(path) == {"state": "succeeded"}
    os.unlink(path)
    os.symlink(victim, path)
    assert files.read_json(path) is None  # a link is never read as a result


def test_a_link_planted_in_place_of_a_live_output_file_is_replaced_not_followed(tmp_path, shared_tmp):
    _, victim = shared_tmp
    live = files.live_path(tmp_path, "r1", 1)
    os.symlink(victim, live)
    fd = files.open_new(live, os.O_APPEND)
    os.write(fd, b"output")
    os.close(fd)
    assert victim.read_bytes() == VICTIM_TEXT
    assert Path(live).read_bytes() == b"output" and not Path(live).is_symlink()


def test_a_link_planted_beside_the_database_is_refused_and_its_target_left_as_it_was(shared_tmp):
    d, victim = shared_tmp
    os.chmod(victim, 0o644)  # a file every user may read, such as /etc/passwd
    db = d / "demo.db"
    with account(USER):
        link = as_user(USER, "ln", "-s", str(victim), f"{db}-journal")
        assert link.returncode == 0, link
        res = refused(registry(d), db)
    assert f"database file {db}-journal is a symbolic link" in res.stderr, res.stderr
    assert (victim.stat().st_mode & 0o777) == 0o644  # not narrowed through the link
    assert victim.read_bytes() == VICTIM_TEXT


@pytest.mark.parametrize("what", ["database", "state directory"])
def test_chronod_refuses_a_database_or_state_directory_in_a_directory_another_user_owns(tmp_path, what):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    db, state = (
        (theirs / "demo.db", [])
        if what == "database"
        else (tmp_path / "demo.db", ["--state-dir", str(theirs / "state")])
    )
    with account(USER):
        os.chown(theirs, pwd_uid(USER), -1)
        res = refused(registry(tmp_path), db, *state)
    assert f"is in {theirs}, which belongs to {USER}" in res.stderr, res.stderr
    assert not (theirs / "demo.db").exists() and not (theirs / "state").exists()


def refused(reg: Path, db: Path, *extra: str) -> subprocess.CompletedProcess:
    """chronod's answer when it refuses to start (exit 78); a test failure when it starts."""
    try:
        res = subprocess.run(
            [str(BIN / "chronod"), "--registry", str(reg), "--db", str(db), *extra],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"chronod started on {db} {' '.join(extra)}")
    assert res.returncode == 78, res
    return res


def pwd_uid(name: str) -> int:
    import pwd

    return pwd.getpwnam(name).pw_uid
