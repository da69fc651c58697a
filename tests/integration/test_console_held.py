"""A pause of a tag holds its jobs in every view, and times read in the direction of their
flag: chronoctl in-process (through its error boundary) on a database written through the
store, no daemon. Issue cases: `pause --tag` left `list` saying the next fire and `paused:
false`, `status` calling the paused jobs silent and dropping a paused failing job from
failing; `pause --until tomorrow`, `+12h` and `02:00` were refused."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from chronoctl import common
from chronoctl import main as cli
from chronod.core.identity import run_id
from chronod.specfile import load_registry
from chronod.store.api import Run, open_store
from tests.integration.daemon_helpers import job, jobs_file, registered_since, write_jobs


@pytest.fixture
def ctl(capsys):
    def run(*args: str) -> tuple[int, str, str]:
        code = cli.main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def _fill(tmp_path, now: datetime) -> tuple[str, str]:
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(
        reg / "a.yaml",
        jobs_file(
            job("batch.load", "0 * * * *", "true", tags=["batch"], max_silence_s=1800),
            job("web.check", "0 * * * *", "true", max_silence_s=1800),
        ),
    )
    db = str(tmp_path / "c.db")
    store = open_store(db)
    store.upgrade()
    store.sync_jobs("vm", load_registry([reg], now=now - timedelta(hours=3), secure=False).jobs.values())
    registered_since(store, now - timedelta(hours=3))
    h = now.replace(minute=0, second=0, microsecond=0)
    at = h - timedelta(hours=2)
    failed = Run(run_id("batch.load", at), "batch.load", "batch.load", at, at, "failed", attempts=1, node="vm")
    failed.started_at, failed.finished_at, failed.exit_code = at, at + timedelta(seconds=1), 1
    at = h - timedelta(hours=1)
    held = Run(run_id("batch.load", at), "batch.load", "batch.load", at, at, "skipped_paused", attempts=0)
    held.error = "paused (tag batch): INC-9"
    store.insert_runs([failed, held])
    store.close()
    return str(reg), db


def test_a_tag_pause_holds_its_jobs_in_list_and_status_never_silent_and_still_failing(tmp_path, ctl):
    now = datetime.now(timezone.utc)
    reg, db = _fill(tmp_path, now)
    assert ctl("pause", "--tag", "batch", "--reason", "INC-9 load paused", "--db", db)[0] == 0

    code, out, _ = ctl("list", "--registry", reg, "--json", "--db", db)
    rows = {r["job_id"]: r for r in json.loads(out)["jobs"]}
    assert rows["batch.load"]["paused"] and rows["batch.load"]["held"]["name"] == "tag batch"
    assert not rows["web.check"]["paused"] and rows["web.check"]["held"] is None

    code, out, _ = ctl("status", "--json", "--db", db)
    data = json.loads(out)
    assert data["paused"] == ["batch.load"]
    # held, so never silent; failing still, a skip by its pause is not an outcome
    assert [q["job_id"] for q in data["silent"]] == ["web.check"]
    [failing] = data["failing"]
    assert (failing["job_id"], failing["state"], failing["held"]["name"]) == ("batch.load", "failed", "tag batch")

    code, out, _ = ctl("status", "batch.load", "--json", "--db", db)
    one = json.loads(out)
    assert one["paused"] and one["paused_scope"] == "tag batch" and not one["silent"]
    assert all(n["held"]["reason"] == "INC-9 load paused" for n in one["next"])


def test_until_reads_times_ahead_and_since_reads_them_back(tmp_path, ctl, monkeypatch):
    now = datetime.now(timezone.utc).replace(microsecond=0)
    monkeypatch.setattr(common, "now_utc", lambda: now)
    reg, db = _fill(tmp_path, now)
    day = now.replace(hour=0, minute=0, second=0)
    two = day.replace(hour=2) + (timedelta(days=1) if day.replace(hour=2) <= now else timedelta(0))
    for text, until in (
        ("02:00", two),  # the next 02:00, never "has passed"
        ("+12h", now + timedelta(hours=12)),
        ("in 2h", now + timedelta(hours=2)),
        ("tomorrow", day + timedelta(days=1)),
        ("tomorrow 08:00", day + timedelta(days=1, hours=8)),
    ):
        code, out, err = ctl("pause", "web.check", "--reason", "r", "--until", text, "--json", "--db", db)
        assert code == 0, (text, err)
        assert json.loads(out)["until"] == until.strftime("%Y-%m-%dT%H:%M:%SZ"), text
        assert ctl("resume", "web.check", "--db", db)[0] == 0
    code, _, err = ctl("pause", "web.check", "--reason", "r", "--until", "yesterday", "--db", db)
    assert code == 2 and "has passed" in err and "tomorrow 08:00" in err, err
    code, out, err = ctl("missed", "--since", "yesterday", "--json", "--db", db)
    assert code in (0, 1), err
    assert [q["job_id"] for g in json.loads(out)["owners"] for q in g["silent"]] == ["batch.load", "web.check"]
    code, _, err = ctl("missed", "--since", "tomorrow", "--db", db)
    assert code == 2 and "is in the future" in err, err
