"""`chronoctl show`, `chronoctl edit` (crontab -e for one job) and shell completion, through
the real binaries."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.integration.daemon_helpers import BIN, Chronod, chronoctl, job, jobs_file, runs_json, wait_until, write_jobs


def _editor(tmp_path, name: str, sed: str) -> str:
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\nsed -i '{sed}' \"$1\"\n")
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def reg(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(
        reg / "a.yaml", jobs_file(job("say", "@every 1s", "echo old-version"), job("other", "0 3 * * *", "true"))
    )
    return reg


def test_edit_with_an_invalid_result_leaves_the_file_unchanged_and_says_why(tmp_path, reg):
    before = (reg / "a.yaml").read_bytes()
    env = {"EDITOR": _editor(tmp_path, "bad.sh", "s/@every 1s/every 99/"), "VISUAL": ""}
    res = chronoctl("edit", "say", "--registry", str(reg), db=str(tmp_path / "c.db"), env=env)
    assert res.returncode == 1, res.stderr
    assert (reg / "a.yaml").read_bytes() == before
    assert "a.yaml:" in res.stderr and "every 99" in res.stderr and "left as it is" in res.stderr
    # no terminal to edit again at: the edited version is kept, private, and named
    kept = res.stderr.split("your version is in ", 1)[1].split(":", 1)[0]
    assert b"every 99" in open(kept, "rb").read() and os.stat(kept).st_mode & 0o777 == 0o600
    os.unlink(kept)


@pytest.mark.slow
def test_edit_with_a_valid_result_is_run_by_the_daemon(tmp_path, reg):
    db = str(tmp_path / "c.db")
    d = Chronod(reg, db, tmp_path / "chronod.log").start()
    try:
        wait_until(lambda: any(r["state"] == "succeeded" for r in runs_json("say", db)), what="a first run")
        env = {"EDITOR": _editor(tmp_path, "good.sh", "s/echo old-version/echo new-version/"), "VISUAL": ""}
        res = chronoctl("edit", "say", "--registry", str(reg), db=db, env=env)
        assert res.returncode == 0, res.stderr + res.stdout
        assert "edited say (" in res.stdout and "took it" in res.stdout  # only the job that changed
        assert b"new-version" in (reg / "a.yaml").read_bytes()

        def ran_new() -> bool:
            return chronoctl("logs", "say", db=db).stdout.strip() == "new-version"

        wait_until(ran_new, timeout=20, what="a run of the edited job")
    finally:
        d.stop()


def test_show_gives_the_effective_spec_its_file_line_and_jitter(tmp_path, reg):
    res = chronoctl("show", "say", "--registry", str(reg), "--json", db=str(tmp_path / "c.db"))
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["source"] == {"file": str(reg / "a.yaml"), "line": 2}
    assert data["spec"]["command"] == "echo old-version" and data["spec"]["timeout_s"] is None
    assert data["spec"]["retry"]["attempts"] == 1 and data["jitter"][0]["offset_s"] == 0
    text = chronoctl("show", "say", "--registry", str(reg), db=str(tmp_path / "c.db")).stdout
    assert "a.yaml:2" in text and "echo old-version" in text
    assert chronoctl("show", "nope", "--registry", str(reg), db=str(tmp_path / "c.db")).returncode == 2


def test_completion_of_did_it_run_offers_the_registry_job_ids(tmp_path, reg):
    env = {
        **os.environ,
        "_CHRONOCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": "chronoctl did-it-run ",
        "COMP_CWORD": "2",
        "CHRONO_REGISTRY": str(reg),
        "CHRONO_DB": str(tmp_path / "none.db"),
    }
    res = subprocess.run([str(BIN / "chronoctl")], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["other", "say"]
    env.update(COMP_WORDS="chronoctl runs say --state skipped_ove", COMP_CWORD="4")
    res = subprocess.run([str(BIN / "chronoctl")], capture_output=True, text=True, env=env, timeout=60)
    assert res.stdout.split() == ["skipped_overlap"]


def test_an_editor_that_fails_writes_nothing_and_says_what_to_do(tmp_path, reg):
    before = (reg / "a.yaml").read_bytes()
    res = chronoctl(
        "edit", "say", "--registry", str(reg), db=str(tmp_path / "c.db"), env={"EDITOR": "false", "VISUAL": ""}
    )
    assert res.returncode == 1 and "the editor 'false' exited with status 1; nothing was written" in res.stderr
    assert "hint: quit the editor normally" in res.stderr
    assert (reg / "a.yaml").read_bytes() == before


def test_a_zero_duration_says_what_a_duration_looks_like(tmp_path, reg):
    res = chronoctl("forecast", "--registry", str(reg), "--bucket", "0s")
    assert res.returncode == 2 and "--bucket must be longer than 0s" in res.stderr
    assert "hint: give a duration such as --bucket 15m" in res.stderr
