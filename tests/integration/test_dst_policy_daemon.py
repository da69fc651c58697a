"""chronod across a clock change, in real time: each job's DST policy decides its runs.

No real zone changes its clocks during a test run, so the test compiles two zones of its
own with `zic` (found by chronod and chronoctl through PYTHONTZPATH): in `Test/Back` the
clock goes back 20 seconds at T, in `Test/Forward` it jumps forward 20 seconds at T.
A fixed-time job (hour, minute and second fixed) at a wall time inside the repeated or the
skipped 20 seconds then meets the clock change about 15 seconds after the daemon starts.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import Chronod, job, jobs_file, runs_json, wait_until, write_jobs

pytestmark = pytest.mark.skipif(shutil.which("zic") is None, reason="zic (tzdata's zone compiler) is not installed")

SHIFT = timedelta(seconds=20)


def _zic_until(t: datetime) -> str:
    return t.strftime("%Y %b %d %H:%M:%Su").replace(" 0", " ")


def compile_zones(tzdir: Path, change_at: datetime) -> None:
    """Test/Back: UTC, then 20 s behind it from `change_at`; Test/Forward: 20 s ahead of it."""
    source = tzdir / "test.zi"
    source.write_text(
        f"Zone Test/Back 0 - AAA {_zic_until(change_at)}\n"
        "\t-0:00:20 - BBB\n"
        f"Zone Test/Forward 0 - AAA {_zic_until(change_at)}\n"
        "\t0:00:20 - CCC\n"
    )
    subprocess.run(["zic", "-d", str(tzdir), str(source)], check=True, capture_output=True)


def wall_expr(wall: datetime) -> str:
    """A 6-field expression for one wall time of the day (fixed-time: minute and hour fixed)."""
    return f"{wall.second} {wall.minute} {wall.hour} * * *"


@pytest.fixture
def env(tmp_path, monkeypatch):
    tzdir = tmp_path / "zoneinfo"
    tzdir.mkdir()
    monkeypatch.setenv("PYTHONTZPATH", str(tzdir))
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    return {"reg": reg, "db": str(tmp_path / "chrono.db"), "log": tmp_path / "chronod.log", "tz": tzdir}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def test_the_daemon_runs_each_pass_or_skips_the_gap_as_each_job_asks(env):
    write_jobs(env["reg"] / "dst.yaml", jobs_file())
    daemon = Chronod(env["reg"], env["db"], env["log"], env={"PYTHONTZPATH": str(env["tz"])}).start()
    # the zones and the jobs arrive once the daemon is up: it reloads the registry it watches
    change = (datetime.now(timezone.utc) + timedelta(seconds=15)).replace(microsecond=0)
    compile_zones(env["tz"], change)
    naive = change.replace(tzinfo=None)
    repeated = wall_expr(naive - SHIFT / 2)  # happens at change - 10 s and again at change + 10 s
    skipped = wall_expr(naive + SHIFT / 2)  # never happens in Test/Forward
    write_jobs(
        env["reg"] / "dst.yaml",
        jobs_file(
            job("rep-first", repeated, "true", timezone="Test/Back"),
            job("rep-last", repeated, "true", timezone="Test/Back", dst_repeat="last"),
            job("rep-both", repeated, "true", timezone="Test/Back", dst_repeat="both"),
            job("gap-shift", skipped, "true", timezone="Test/Forward"),
            job("gap-skip", skipped, "true", timezone="Test/Forward", dst_gap="skip"),
        ),
    )
    wait_until(lambda: "jobs=5" in daemon.log_since_start(), timeout=10, what="the registry reload")
    time.sleep(max(0.0, (change + timedelta(seconds=14) - datetime.now(timezone.utc)).total_seconds()))

    def scheduled(job_id: str) -> list[datetime]:
        return sorted(
            utc(r["scheduled_at"]) for r in runs_json(job_id, env["db"], since="10m") if r["state"] == "succeeded"
        )

    first, second = change - SHIFT / 2, change + SHIFT / 2
    # every job's last pass (change + 10 s) may still be running on a loaded host
    wait_until(
        lambda: (
            len(scheduled("rep-both")) >= 2
            and scheduled("rep-first")
            and scheduled("rep-last")
            and scheduled("gap-shift")
        ),
        timeout=30,
        what="the passes of each job",
    )
    assert scheduled("rep-both") == [first, second]
    assert scheduled("rep-first") == [first]
    assert scheduled("rep-last") == [second]
    assert scheduled("gap-shift") == [change]  # once, at the instant the clock jumps
    both = [r for r in runs_json("rep-both", env["db"], since="10m") if r["state"] == "succeeded"]
    assert len({r["run_id"] for r in both}) == 2
    time.sleep(2)
    # only tomorrow's occurrence, waiting: nothing ran or was recorded for today
    tomorrow = change + SHIFT / 2 + timedelta(days=1) - SHIFT  # the wall time exists tomorrow (offset +20 s)
    assert [(r["state"], utc(r["scheduled_at"])) for r in runs_json("gap-skip", env["db"], since="10m")] in (
        [],
        [("pending", tomorrow)],
    )
    daemon.stop()
