"""chronoctl in a real terminal of 80 columns (a pty made by `script`): the tables of
`list`, `status`, `runs`, `missed` and `report` break no word, time or run id, and a run id
copied from any of them works in `logs`."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core.occurrence import run_id
from chronod.specfile import load_registry
from chronod.store.api import Run, open_store
from tests.integration.daemon_helpers import BIN, chronoctl, write_jobs

pytestmark = pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) from util-linux")

SPEC = """jobs:
  - id: nightly-backup-customers
    owner: storage-team
    schedule: "0 * * * *"
    command: /usr/local/bin/backup --all
    idempotency_class: idempotent
    tolerance_s: 0
    tolerance_reason: the test pins exact times
    max_silence_s: 600
  - id: hourly
    owner: sre
    schedule: "30 * * * 1-5"
    command: "true"
    idempotency_class: idempotent
    tolerance_s: 0
    tolerance_reason: the test pins exact times
"""
JOB = "nightly-backup-customers"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
STATES = ("failed", "succeeded", "skipped_paused", "timed_out")


def _hour(now: datetime, back: int) -> datetime:
    return now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=back)


def _runs(now: datetime) -> list[Run]:
    out = []
    for back, state in zip(range(1, 5), STATES):
        at = _hour(now, back)
        r = Run(
            run_id=run_id(JOB, at),
            job_id=JOB,
            job_key=JOB,
            scheduled_at=at,
            fire_at=at,
            state=state,
            attempts=2 if state == "failed" else 1,
            node="vm",
            finished_at=at + timedelta(seconds=75),
        )
        if state != "skipped_paused":
            r.started_at = at + timedelta(seconds=1)
            r.exit_code = 0 if state == "succeeded" else 3
            r.output_tail = f"output of the run at {at:%H:%M}\n"
            r.output_bytes = len(r.output_tail)
            r.error = None if state == "succeeded" else "exit code 3 after a very long and detailed explanation of it"
        else:
            r.attempts = 0
            r.error = "the job was paused when it fell due: disk full on the backup target volume"
        out.append(r)
    return out


@pytest.fixture
def demo(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    write_jobs(reg / "jobs.yaml", SPEC)
    db = str(tmp_path / "chrono.db")
    now = datetime.now(timezone.utc)
    store = open_store(db)
    store.upgrade()
    loaded = load_registry([reg], now=now - timedelta(hours=6), secure=False)
    store.sync_jobs("vm", loaded.jobs.values())
    runs = _runs(now)
    store.insert_runs(runs)
    store.close()
    return {"reg": reg, "db": db, "runs": runs, "now": now}


def in_terminal(*args: str, db: str, cols: int = 80, tz: str = "America/New_York") -> tuple[int, str]:
    """Run chronoctl in a pty `cols` wide; its exit code and what the terminal shows (colour stripped)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update(TERM="xterm-256color", TZ=tz, CHRONO_DB=db)
    argv = " ".join(shlex.quote(a) for a in [str(BIN / "chronoctl"), *args])
    inner = f"stty cols {cols} rows 500; {argv}"
    res = subprocess.run(
        ["script", "-qec", inner, "/dev/null"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    text = ANSI.sub("", res.stdout).replace("\r", "")
    return res.returncode, text


def _fits(text: str, cols: int = 80) -> None:
    wide = [line for line in text.splitlines() if len(line) > cols]
    assert not wide, f"lines wider than {cols} columns:\n" + "\n".join(wide)


def _prefixes(text: str, runs: list[Run]) -> list[str]:
    return [r.run_id[:8] for r in runs if re.search(rf"\b{r.run_id[:8]}\b", text)]


def test_tables_fit_80_columns_and_their_run_ids_work_in_logs(demo):
    db, runs = demo["db"], demo["runs"]
    shown = {}
    for args in (
        ("list", "--registry", str(demo["reg"])),
        ("status",),
        ("status", JOB),
        ("runs", JOB),
        ("missed", "--since", "6h"),
        ("report", JOB, "--from", _hour(demo["now"], 6).isoformat(), "--to", demo["now"].isoformat()),
    ):
        code, text = in_terminal(*args, db=db)
        assert "Traceback" not in text and "error" not in text.split("\n")[0], text
        _fits(text)
        shown[args[0] if args[0] != "status" or len(args) == 1 else "status JOB"] = text
    # every whole time and state word is on one line
    for r in runs:
        local = r.scheduled_at.astimezone(__import__("zoneinfo").ZoneInfo("America/New_York"))
        assert f"{local:%H:%M:%S}" in shown["runs"]
        assert re.search(rf"\b{r.state}\b", shown["runs"]), r.state
    assert "times in E" in shown["runs"]  # EST/EDT with its offset
    for name in ("runs", "status JOB", "missed", "report"):
        assert _prefixes(shown[name], runs), f"{name} shows no run id:\n{shown[name]}"
    failed = next(r for r in runs if r.state == "failed")
    assert failed.run_id[:8] in shown["status"], "status lists the failing run"
    for name, text in shown.items():
        for prefix in _prefixes(text, runs):
            res = chronoctl("logs", prefix, db=db)
            full = next(r for r in runs if r.run_id.startswith(prefix))
            assert res.returncode == 0, (name, prefix, res.stderr)
            assert res.stdout == (full.output_tail or ""), (name, prefix)
    # the overview: last run with its time, next fire, and the warning that no daemon runs
    listed = shown["list"]
    assert "hourly" in listed and "at :30" in listed or "30" in listed
    code, text = in_terminal("list", "--registry", str(demo["reg"]), db=db)
    assert "no live chronod" in text


def test_status_is_a_health_check_exit_3_without_a_live_daemon(demo):
    res = chronoctl("status", db=demo["db"])
    assert res.returncode == 3, res.stderr
    assert "no live chronod" in res.stderr
    assert chronoctl("status", "--json", db=demo["db"]).returncode == 3


def test_wide_and_json_show_whole_run_ids(demo):
    runs = demo["runs"]
    wide = chronoctl("runs", JOB, "--wide", db=demo["db"]).stdout
    assert all(r.run_id in wide for r in runs)
    narrow = chronoctl("runs", JOB, db=demo["db"]).stdout
    assert not any(r.run_id in narrow for r in runs) and all(r.run_id[:8] in narrow for r in runs)
    assert all(r.run_id in chronoctl("runs", JOB, "--json", db=demo["db"]).stdout for r in runs)


def test_fleet_columns_only_in_a_fleet(demo):
    narrow = chronoctl("runs", JOB, db=demo["db"]).stdout
    assert "NODE" not in narrow and "TOKEN" not in narrow
    store = open_store(demo["db"])
    for name in ("vm", "vm2"):
        token = store.acquire_node(name, pid=1, hostname=name, boot_id="b", ttl_s=30)
        store.release_node(name, token)
    store.close()
    fleet = chronoctl("runs", JOB, db=demo["db"]).stdout
    assert "NODE" in fleet


def test_an_ambiguous_prefix_lists_its_candidates_and_a_job_id_means_its_latest_run(demo):
    store = open_store(demo["db"])
    at = demo["now"] - timedelta(days=2)
    twins = [
        Run(
            run_id=f"abcd{i}" + "0" * 11,
            job_id="hourly",
            job_key="hourly",
            scheduled_at=at + timedelta(minutes=i),
            fire_at=at,
            state="succeeded",
            attempts=1,
        )
        for i in range(2)
    ]
    store.insert_runs(twins)
    store.close()
    res = chronoctl("logs", "abcd", db=demo["db"])
    assert res.returncode == 2
    assert twins[0].run_id in res.stderr and twins[1].run_id in res.stderr and "ambiguous" in res.stderr
    assert chronoctl("logs", "abcd1", db=demo["db"]).returncode == 0
    assert chronoctl("logs", "ffffffff", db=demo["db"]).returncode == 2
    latest = max((r for r in demo["runs"] if r.started_at), key=lambda r: r.scheduled_at)
    res = chronoctl("logs", JOB, db=demo["db"])
    assert res.returncode == 0 and res.stdout == latest.output_tail


def test_every_status_line_fits_80_columns_with_pauses_and_says_all_of_them(demo):
    """What is paused, by whom, why and until when: long lines wrap between words."""
    reason = "INC-3141: replica lag on the primary after the storage migration, do not resume"
    until = demo["now"] + timedelta(hours=3)
    store = open_store(demo["db"])
    store.set_group_pause("tag", "storage-and-backups-team", reason, by="alice.smith", until=until)
    store.set_paused(JOB, True, "disk full on the backup target volume, waiting for the vendor", by="bob")
    store.close()
    for args in (("status",), ("status", JOB)):
        code, text = in_terminal(*args, db=demo["db"])
        assert "Traceback" not in text, text
        _fits(text)
        words = " ".join(text.split())  # what the lines say, read across their breaks
        assert "disk full on the backup target volume, waiting for the vendor" in words
        assert "by bob" in words
    code, text = in_terminal("status", db=demo["db"])
    words = " ".join(text.split())
    assert f"paused {JOB} by bob since" in words
    assert "paused tag storage-and-backups-team (0 jobs) by alice.smith since" in words
    assert reason in words and "ends by itself" in words
