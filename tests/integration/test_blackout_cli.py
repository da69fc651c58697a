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


def swap_disks(start: datetime, end: datetime) -> str:
    """A registry file's window `swap-disks` over the jobs tagged storage, from `start` to `end`."""
    return (
        "blackouts:\n"
        "  - name: swap-disks\n"
        "    reason: CHG-7 disk swap\n"
        f"    from: '{stamp(start)}'\n"
        f"    to: '{stamp(end)}'\n"
        "    tags: [storage]\n"
    )


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
    window = swap_disks(start, end)
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
    after = chronoctl("status", "tagged", "--json", db=env["db"])
    assert after.returncode == 3 and not json.loads(after.stdout)["paused"]  # 3: chronod stopped


def test_did_it_run_says_an_occurrence_is_deferred_by_its_window_until_it_ends(env):
    jobs = jobs_file(job("defers", "@every 1s", "true", tags=["storage"], blackout="defer"))
    start = (datetime.now(timezone.utc) + timedelta(seconds=2)).replace(microsecond=0)
    end = start + timedelta(minutes=10)  # open for the whole test: the daemon stops inside it
    window = swap_disks(start, end)
    write_jobs(env["reg"] / "a.yaml", window + jobs)
    d = Chronod(env["reg"], env["db"], env["log"]).start()
    try:

        def answer():
            res = chronoctl("did-it-run", "defers", "--json", db=env["db"])
            data = json.loads(res.stdout)
            return (res, data) if data["state"] == "deferred" else None

        res, data = wait_until(answer, timeout=30, what="did-it-run to call the latest occurrence deferred")
    finally:
        d.stop()
    assert res.returncode == 1 and data["yes"] is False
    assert data["held"] == {
        "kind": "window",
        "name": "swap-disks",
        "reason": "CHG-7 disk swap",
        "by": None,
        "until": end.isoformat(),
    }
    # the same occurrence in words (the latest one may have fallen due after the stop)
    text = chronoctl("did-it-run", "defers", "--at", data["scheduled_at"], db=env["db"]).stdout
    assert f"deferred by maintenance window swap-disks (CHG-7 disk swap) until {end:%Y-%m-%dT%H:%M:%SZ}" in text
    assert "not started yet" not in text


def test_a_due_occurrence_of_a_paused_job_is_held_by_the_pause_not_late(env):
    write_jobs(env["reg"] / "a.yaml", jobs_file(job("nightly", "@every 2s", "true")))
    d = Chronod(env["reg"], env["db"], env["log"]).start()
    try:
        wait_until(lambda: runs_json("nightly", env["db"]), what="the next occurrence to be stored")
    finally:
        d.stop()  # the stored next occurrence stays pending: nothing settles it
    [waiting] = [r for r in runs_json("nightly", env["db"]) if r["state"] == "pending"]
    res = chronoctl("pause", "nightly", "--reason", "INC-9 disk full", db=env["db"])
    assert res.returncode == 0, res.stderr
    at = ("--at", waiting["scheduled_at"])

    def answer():
        data = json.loads(chronoctl("did-it-run", "nightly", *at, "--json", db=env["db"]).stdout)
        return data if data["state"] == "paused" else None

    data = wait_until(answer, timeout=20, what="the pending occurrence to fall due under the pause")
    assert data["held"]["kind"] == "pause" and data["held"]["name"] == "job"
    assert data["held"]["reason"] == "INC-9 disk full" and data["held"]["until"] is None
    text = chronoctl("did-it-run", "nightly", *at, db=env["db"]).stdout
    assert "held by a pause (job)" in text and "INC-9 disk full until resumed" in text
    assert "not started yet" not in text
