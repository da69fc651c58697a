"""Tools that rewrite job files keep each file's owner and mode and apply the daemon's checks.

The repro: a file owned by a user holds `nb.report` (user: that user) and `nb.helper` (no
`user:`, which the daemon refuses in a delegated file: it would run as the daemon user).
Root edits nb.report's schedule. Before, the file became root's, 0644, and nb.helper ran
as uid 0. Now `edit` refuses to write what the daemon would refuse in a file of that
owner, the file keeps its owner and mode, and nb.helper never runs.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, runs_json, wait_until
from tests.integration.local_users import account

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("users")]

USER = "chr-users-2"


@pytest.fixture
def world():
    with account(USER) as pw:
        d = Path(tempfile.mkdtemp(prefix="chrono-edit-"))
        os.chmod(d, 0o755)
        reg = d / "jobs.d"
        reg.mkdir(mode=0o755)
        yield {"pw": pw, "d": d, "reg": reg, "db": str(d / "chrono.db")}
        shutil.rmtree(d, ignore_errors=True)


def owned(path: Path, pw, mode: int, text: str) -> None:
    path.write_text(text)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    os.chmod(path, mode)


def shape(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def edit(world, job_id: str, sed: str):
    env = {"EDITOR": f"sed -i {shlex.quote(sed)}", "VISUAL": ""}
    return chronoctl("edit", job_id, "--registry", str(world["reg"]), "--wait", "0", db=world["db"], env=env)


def report(uid_file: Path) -> str:
    return job("nb.report", "0 4 * * *", f"id -u > {uid_file}", user=USER)


def test_editing_a_delegated_file_keeps_its_owner_and_mode(world):
    pw, f = world["pw"], world["reg"] / "nb.yaml"
    owned(f, pw, 0o640, jobs_file(report(world["d"] / "report.uid")))
    res = edit(world, "nb.report", "s/0 4/0 5/")
    assert res.returncode == 0, res.stderr
    assert "0 5 * * *" in f.read_text()
    assert shape(f) == (pw.pw_uid, pw.pw_gid, 0o640)


def test_editing_a_job_beside_a_job_the_daemon_refuses_never_hands_that_job_to_root(world):
    pw, f = world["pw"], world["reg"] / "nb.yaml"
    helper_uid = world["d"] / "helper.uid"
    owned(
        f,
        pw,
        0o644,
        jobs_file(report(world["d"] / "report.uid"), job("nb.helper", "@every 1s", f"id -u > {helper_uid}")),
    )
    before = f.read_bytes()

    show = chronoctl("show", "nb.report", "--registry", str(world["reg"]), db=world["db"])
    assert "warning: chronod refuses" in show.stderr and "the daemon user" in show.stderr, show.stderr
    res = edit(world, "nb.report", "s/0 4/0 5/")
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "nb.helper" in res.stderr and "runs as the daemon user" in res.stderr, res.stderr
    assert f.read_bytes() == before and shape(f) == (pw.pw_uid, pw.pw_gid, 0o644)

    (world["reg"] / "witness.yaml").write_text(jobs_file(job("witness", "@every 1s", "true")))
    d = Chronod(world["reg"], world["db"], world["d"] / "chronod.log").start()
    wait_until(
        lambda: len([r for r in runs_json("witness", world["db"]) if r["state"] == "succeeded"]) >= 3,
        what="three runs of the witness",
    )
    d.stop()
    assert not helper_uid.exists(), helper_uid.read_text()


def test_register_keeps_the_owner_of_the_file_it_copies_and_refuses_what_would_run_as_root(world):
    pw, src = world["pw"], world["d"] / "mine.yaml"
    owned(src, pw, 0o600, jobs_file(job("mine.root", "@daily", "id", user="root")))
    res = chronoctl("register", str(src), "--registry", str(world["reg"]), "--wait", "0", db=world["db"])
    assert res.returncode == 1, res.stderr
    assert "runs as root" in res.stderr and not (world["reg"] / "mine.yaml").exists(), res.stderr

    owned(src, pw, 0o600, jobs_file(job("mine.own", "@daily", "id", user=USER)))
    res = chronoctl("register", str(src), "--registry", str(world["reg"]), "--wait", "0", db=world["db"])
    assert res.returncode == 0, res.stderr
    assert shape(world["reg"] / "mine.yaml") == (pw.pw_uid, pw.pw_gid, 0o600)


def test_unregister_rewrites_a_delegated_file_keeping_its_owner_and_mode(world):
    pw, f = world["pw"], world["reg"] / "two.yaml"
    owned(f, pw, 0o640, jobs_file(job("a", "@daily", "id", user=USER), job("b", "@daily", "id", user=USER)))
    res = chronoctl("unregister", "a", "--force", "--registry", str(world["reg"]), "--wait", "0", db=world["db"])
    assert res.returncode == 0, res.stderr
    assert "id: a\n" not in f.read_text() and shape(f) == (pw.pw_uid, pw.pw_gid, 0o640)


def test_no_tool_writes_through_a_link_in_the_registry(world):
    target = world["d"] / "elsewhere.yaml"
    target.write_text(jobs_file(job("linked", "@daily", "id")))
    os.symlink(target, world["reg"] / "linked.yaml")
    before = target.read_bytes()
    res = edit(world, "linked", "s/@daily/@hourly/")
    assert res.returncode == 1 and "not a regular file" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert target.read_bytes() == before


def test_register_gives_what_it_copies_the_owner_of_the_file_it_was_read_from(world, monkeypatch):
    """The file's owner replaces it by a link to a root-owned file once chronoctl has read
    it (a race they can win by watching the file): the copy stays theirs, so its job
    without `user:` is refused instead of running as root."""
    from tests import inprocess

    pw, src, decoy = world["pw"], world["d"] / "mine.yaml", world["d"] / "root.yaml"
    owned(src, pw, 0o644, jobs_file(job("mine.noone", "@daily", "id")))
    decoy.write_text(jobs_file(job("root.decoy", "@daily", "true")))
    real_stat = os.stat

    def stat_after_the_swap(path, *args, **kwargs):  # by path, `src` is now the link
        return real_stat(decoy if os.fspath(path) == str(src) else path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_after_the_swap)
    res = inprocess.chronoctl("register", str(src), "--registry", str(world["reg"]), "--wait", "0", "--db", world["db"])
    monkeypatch.undo()
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "runs as the daemon user" in res.stderr and not (world["reg"] / "mine.yaml").exists(), res.stderr
