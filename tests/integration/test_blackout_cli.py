"""Maintenance windows and pauses through the real binaries: a window in a registry file
skips or defers a running daemon's jobs and the history names it; a pause of a tag ends by
itself and `status` says who paused what, why and until when."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from tests.integration.daemon_helpers import Chronod, chronoctl, job, jobs_file, runs_json, wait_until, write_jobs


@pytest.fixture
def env(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    return {"reg": reg, "db": str(tmp_path / "chrono.db"), "log": tmp_path / "chronod.log"}


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S+00:00")


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_a_window_skips_one_job_and_defers_the_other_to_its_end(env):
    jobs = jobs_file(
        job("skips", "@every 1s", "true", tags=["storage"]),
        job("defers", "@every 1s", "true", tags=["storage"], blackout="defer"),
        job("free", "@every 1s", "true"),
    )
    write_jobs(env["reg"] / "a.yaml", jobs)
    d = Chronod(env["reg"], env["db"], env["log"]).start()
    # the window arrives by a reload of the running daemon, and opens a moment later
    start = (datetime.now(timezone.utc) + timedelta(seconds=3)).replace(microsecond=0)
    end = start + timedelta(seconds=3)
    window = (
        "blackouts:\n"
        "  - name: swap-disks\n"
        "    reason: CHG-7 disk swap\n"
        f"    from: '{stamp(start)}'\n"
        f"    to: '{stamp(end)}'\n"
        "    tags: [storage]\n"
    )
    write_jobs(env["reg"] / "a.yaml", window + jobs)
    try:
        wait_until(
            lambda: any(
                parse(r["scheduled_at"]) >= end + timedelta(seconds=1) and r["state"] == "succeeded"
                for r in runs_json("defers", env["db"])
            ),
            timeout=20,
            what="the deferred job to run again after the window",
        )
    finally:
        d.stop()
    inside = lambda r: start <= parse(r["scheduled_at"]) < end  # noqa: E731
    skipped = [r for r in runs_json("skips", env["db"]) if inside(r)]
    assert skipped and {r["state"] for r in skipped} == {"skipped_blackout"}
    assert "swap-disks (CHG-7 disk swap)" in skipped[0]["error"]
    held = sorted((r for r in runs_json("defers", env["db"]) if inside(r)), key=lambda r: r["scheduled_at"])
    ran = [r for r in held if r["state"] == "succeeded"]
    # run once when the window ends (catch-up latest), or not at all when an occurrence was
    # due at that very second; never inside the window
    assert len(ran) <= 1 and all(parse(r["started_at"]) >= end for r in ran)
    assert {r["state"] for r in held} <= {"succeeded", "skipped_blackout"}
    assert not [r for r in runs_json("free", env["db"]) if r["state"] == "skipped_blackout"]
    did = chronoctl("did-it-run", "skips", "--at", skipped[0]["scheduled_at"], db=env["db"])
    assert "maintenance window swap-disks" in did.stdout and "missing" not in did.stdout


def test_a_tag_pause_ends_by_itself_and_status_says_who_why_and_until_when(env):
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("tagged", "@every 1s", "true", tags=["db"])))
    d = Chronod(env["reg"], env["db"], env["log"]).start()
    try:
        # long enough that `status` (a second CLI start on a loaded host) still finds it paused
        res = chronoctl("pause", "--tag", "db", "--reason", "INC-4 replica lag", "--for", "20s", "--json", db=env["db"])
        assert res.returncode == 0, res.stderr
        paused = json.loads(res.stdout)
        assert paused["jobs"] == ["tagged"] and paused["until"]
        status = json.loads(chronoctl("status", "tagged", "--json", db=env["db"], check=True).stdout)
        assert (status["paused"], status["paused_scope"], status["paused_reason"]) == (
            True,
            "tag db",
            "INC-4 replica lag",
        )
        assert status["paused_by"] and status["paused_until"]
        until = parse(paused["until"].replace("Z", "+00:00"))
        wait_until(
            lambda: any(
                r["state"] == "succeeded" and parse(r["scheduled_at"]) > until for r in runs_json("tagged", env["db"])
            ),
            timeout=60,
            what="a run after the pause ended by itself",
        )
    finally:
        d.stop()
    skipped = [r for r in runs_json("tagged", env["db"]) if r["state"] == "skipped_paused"]
    assert skipped and "(tag db)" in skipped[0]["error"] and "INC-4 replica lag" in skipped[0]["error"]
    assert not json.loads(chronoctl("status", "tagged", "--json", db=env["db"], check=True).stdout)["paused"]
