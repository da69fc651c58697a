"""The on-call questions against a real daemon and real runs: did it run, what was missed."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from chronoctl import common
from chronoctl.main import main
from chronod.store.api import open_store
from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, runs_json, wait_until, write_jobs


@pytest.mark.slow
def test_did_it_run_and_missed_answer_from_the_real_history(tmp_path, monkeypatch, capsys, request):
    reg, db = tmp_path / "jobs.d", str(tmp_path / "chrono.db")
    release = tmp_path / "release"
    request.addfinalizer(release.touch)  # no job left waiting if the test fails early
    reg.mkdir()
    write_jobs(
        reg / "a.yaml",
        jobs_file(
            job("ok", "@every 1s", "true"),
            job("bad", "@every 1s", "exit 3"),
            # runs until released, however slowly a loaded machine gets to the questions
            job("slow", "@every 1s", f"while [ ! -e {release} ]; do sleep 0.2; done", overlap="forbid"),
            job("nap", "@every 1s", "true"),
        ),
    )
    d = Chronod(reg, db, tmp_path / "chronod.log").start()
    wait_until(lambda: any(r["state"] == "skipped_overlap" for r in runs_json("slow", db)), what="an overlap")
    chronoctl("pause", "nap", "--reason", "disk full", db=db, check=True)
    wait_until(lambda: any(r["state"] == "skipped_paused" for r in runs_json("nap", db)), what="a paused skip")
    ok_runs = [r for r in runs_json("ok", db) if r["state"] == "succeeded"]
    assert len(ok_runs) >= 2
    gone = ok_runs[1]
    store = open_store(db)
    assert store.delete_run(gone["run_id"])  # as if the database were restored from an old copy
    store.close()

    def ask(name, *args):
        return chronoctl("did-it-run", name, *args, db=db)

    assert ask("ok", "--since", "1m").returncode == 0
    res = ask("bad", "--since", "1m")
    assert res.returncode == 1 and "exit code 3" in res.stdout + res.stderr
    slow = runs_json("slow", db)
    skipped = next(r for r in slow if r["state"] == "skipped_overlap")
    running = next(r for r in slow if r["state"] == "running")
    res = ask("slow", "--at", skipped["scheduled_at"])
    assert res.returncode == 1 and "overlap" in res.stdout + res.stderr
    res = ask("slow", "--at", running["scheduled_at"])
    assert res.returncode == 1 and "running" in res.stdout + res.stderr
    paused = next(r for r in runs_json("nap", db) if r["state"] == "skipped_paused")
    res = ask("nap", "--at", paused["scheduled_at"])
    assert res.returncode == 1 and "paus" in res.stdout + res.stderr
    res = ask("ok", "--at", gone["scheduled_at"], "--json")
    assert res.returncode == 1 and "no_record" in res.stdout, res.stdout
    assert ask("nobody", "--since", "1m").returncode == 2
    # `missed` counts an occurrence without a row once it is a minute past its fire time:
    # chronoctl runs in-process with its clock a minute and two seconds past that fire time
    # (the same command on the same history, without waiting the minute out).
    release.touch()
    d.stop()
    later = datetime.fromisoformat(gone["fire_at"]) + timedelta(seconds=62)
    monkeypatch.setattr(common, "now_utc", lambda: max(later, datetime.now(timezone.utc)))
    capsys.readouterr()
    assert main(["missed", "--since", "5m", "--json", "--db", db]) == 1
    text = json.dumps(json.loads(capsys.readouterr().out))
    assert gone["run_id"] in text, "missed did not find the occurrence with no row"
    assert "bad" in text and "skipped_overlap" in text
