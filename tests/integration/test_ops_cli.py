"""The installed `chronoctl` against a real store filled with a realistic history.

The history is written straight through `open_store` (SQLite, and PostgreSQL when it is
reachable), relative to the real clock because chronoctl reads it: an hourly job whose
last twelve occurrences ended in every state there is, one occurrence with no row at all
(the database restored from an older copy), and a paused job.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core.model import JobSpec
from chronod.core.occurrence import run_id
from chronod.store.api import Run, open_store
from tests.inprocess import chronoctl
from tests.integration.daemon_helpers import registered_since

pytestmark = pytest.mark.xdist_group("ops_cli")  # one worker: the filled databases are built once per module

PG_ADMIN = os.environ.get("CHRONO_TEST_PG_DSN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")

HOURLY = JobSpec(
    id="billing-export",
    owner="finance",
    schedule="0 * * * *",
    command="true",
    idempotency_class="idempotent",
    max_silence_s=3 * 3600,
)
PAUSED = JobSpec(
    id="cleanup",
    owner="platform",
    schedule="30 * * * *",
    command="true",
    idempotency_class="idempotent",
    max_silence_s=3 * 3600,
)

# hours before the current hour -> what happened to that occurrence (None: no row at all)
HISTORY = {
    0: "succeeded",
    1: "succeeded",
    2: "failed",
    3: "skipped_overlap",
    4: "timed_out",
    5: None,
    6: "skipped_outage",
    7: "lost",
    8: "succeeded",
    9: "succeeded",
    10: "succeeded",
    11: "succeeded",
}


def _hour0() -> datetime:
    return datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)


def _run(spec: JobSpec, at: datetime, state: str, **kw) -> Run:
    done = state in ("succeeded", "failed", "timed_out")
    fields = dict(
        attempts=0 if state.startswith("skipped") else 1,
        node="web1",
        trigger="schedule",
        started_at=at + timedelta(seconds=1) if state not in ("pending",) and not state.startswith("skipped") else None,
        finished_at=at + timedelta(seconds=31) if done else None,
        exit_code={"succeeded": 0, "failed": 3}.get(state),
        output_bytes=0,
        error={"skipped_overlap": "previous run still going", "lost": "node web1 died"}.get(state),
    )
    fields.update(kw)
    return Run(
        run_id=run_id(spec.id, at), job_id=spec.id, job_key=spec.id, scheduled_at=at, fire_at=at, state=state, **fields
    )


def _fill(url: str) -> dict:
    store = open_store(url)
    try:
        store.upgrade()
        store.sync_jobs("web1", [HOURLY, PAUSED])
        h0 = _hour0()
        registered_since(store, h0 - timedelta(hours=12), HOURLY.id)
        runs = []
        for back, state in HISTORY.items():
            if state is not None:
                runs.append(_run(HOURLY, h0 - timedelta(hours=back), state))
        runs[0].output_tail = "exported 12 rows\n\x1b[2Jgone\n"
        runs[0].output_bytes = 5000
        store.set_paused(PAUSED.id, True, "INC-7: upstream down")
        half = h0 + timedelta(minutes=30)
        if half > datetime.now(timezone.utc) - timedelta(seconds=61):
            half -= timedelta(hours=1)  # cleanup's latest occurrence that is already due
        registered_since(store, half - timedelta(hours=2, seconds=1), PAUSED.id)
        for back in range(3):
            runs.append(_run(PAUSED, half - timedelta(hours=back), "skipped_paused" if back == 0 else "succeeded"))
        store.insert_runs(runs)
    finally:
        store.close()
    return {"h0": h0, "half": half}


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=[pytest.mark.postgres, pytest.mark.slow])]
)
def db(request, tmp_path_factory):
    if request.param == "sqlite":
        url = str(tmp_path_factory.mktemp("ops") / "chrono.db")
        yield url, _fill(url)
        return
    pytest.importorskip("psycopg")
    import sqlalchemy as sa

    name = f"chrono_ops_{uuid.uuid4().hex[:10]}"
    try:
        admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # no server here: the SQLite half still runs
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    try:
        yield url, _fill(url)
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def ctl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return chronoctl(*args, env=env)


def ctl_json(*args: str) -> tuple[int, object]:
    p = ctl(*args, "--json")
    assert p.stdout, p.stderr
    return p.returncode, json.loads(p.stdout)


def iso_at(h0: datetime, back: int) -> str:
    return (h0 - timedelta(hours=back)).isoformat()


# --- did-it-run -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "back, code, state, words",
    [
        (1, 0, "succeeded", "succeeded"),
        (2, 1, "failed", "exit code 3"),
        (3, 1, "skipped_overlap", "overlap policy"),
        (4, 1, "timed_out", "timed out"),
        (5, 1, "no_record", "no record"),
        (6, 1, "skipped_outage", "catch-up policy"),
        (7, 1, "lost", "lost"),
    ],
)
def test_did_it_run_answers_each_occurrence_as_the_history_records_it(db, back, code, state, words):
    url, info = db
    p = ctl("did-it-run", "billing-export", "--at", iso_at(info["h0"], back), "--db", url)
    assert p.returncode == code, p.stdout + p.stderr
    assert p.stdout.startswith("yes:" if code == 0 else "no:")
    assert words in p.stdout
    rc, data = ctl_json("did-it-run", "billing-export", "--at", iso_at(info["h0"], back), "--db", url)
    assert (rc, data["state"], data["yes"]) == (code, state, code == 0)
    assert data["run_id"] == run_id("billing-export", info["h0"] - timedelta(hours=back))
    assert data["scheduled_at"] == (info["h0"] - timedelta(hours=back)).isoformat()


def test_did_it_run_between_two_occurrences_asks_about_the_one_just_before(db):
    url, info = db
    at = info["h0"] - timedelta(hours=2) + timedelta(minutes=59)
    rc, data = ctl_json("did-it-run", "billing-export", "--at", at.isoformat(), "--db", url)
    assert (rc, data["state"]) == (1, "failed")


def test_did_it_run_is_yes_when_any_occurrence_in_the_window_succeeded(db):
    url, _ = db
    assert ctl("did-it-run", "billing-export", "--since", "12h", "--db", url).returncode == 0


def test_did_it_run_for_a_running_occurrence_says_still_running(db):
    url, info = db
    store = open_store(url)
    try:
        at = info["h0"] + timedelta(days=400)  # its own occurrence, far from the shared history
        store.insert_runs([_run(HOURLY, at, "running", node="web2")])
        p = ctl("did-it-run", "billing-export", "--at", at.isoformat(), "--db", url)
    finally:
        store.delete_run(run_id("billing-export", at))
        store.close()
    assert p.returncode == 1
    assert "still running on web2" in p.stdout


def test_did_it_run_for_a_future_occurrence_says_not_due_yet(db):
    url, info = db
    rc, data = ctl_json(
        "did-it-run", "billing-export", "--at", (info["h0"] + timedelta(days=2)).isoformat(), "--db", url
    )
    assert (rc, data["state"]) == (1, "not_due")


def test_did_it_run_for_a_paused_job_names_the_pause(db):
    url, info = db
    p = ctl("did-it-run", "cleanup", "--db", url)
    assert p.returncode == 1
    assert "paused" in p.stdout and "INC-7: upstream down" in p.stdout


def test_did_it_run_for_an_unknown_job_exits_2(db):
    url, _ = db
    p = ctl("did-it-run", "no-such-job", "--db", url)
    assert p.returncode == 2
    assert "no job 'no-such-job'" in p.stderr


# --- missed, runs, status, logs ------------------------------------------------------------------


def test_missed_finds_the_occurrence_that_has_no_row_and_every_failure(db):
    url, info = db
    rc, data = ctl_json("missed", "--since", "12h", "--db", url)
    assert rc == 1
    by_owner = {g["owner"]: g["missed"] for g in data["owners"]}
    # an occurrence that fell due after the history was written (a loaded host runs this
    # module's tests for minutes) has no row, no chronod running here: it is no_record
    finance, later = recorded_and_later(by_owner["finance"], info["h0"])
    got = {(m["scheduled_at"], m["state"]) for m in finance}
    want = {(iso_at(info["h0"], b), s or "no_record") for b, s in HISTORY.items() if s not in ("succeeded",) and b < 12}
    assert got == want
    paused, later_paused = recorded_and_later(by_owner["platform"], info["half"])
    assert [m["state"] for m in paused] == ["skipped_paused"]
    assert {m["state"] for m in later + later_paused} <= {"no_record"}


def recorded_and_later(missed: list, last: datetime) -> tuple[list, list]:
    """`missed` rows scheduled up to `last` (the history written), and those after it."""
    return (
        [m for m in missed if datetime.fromisoformat(m["scheduled_at"]) <= last],
        [m for m in missed if datetime.fromisoformat(m["scheduled_at"]) > last],
    )


def test_missed_in_a_window_with_only_successes_exits_0(db):
    url, info = db
    minutes = int((datetime.now(timezone.utc) - info["h0"]).total_seconds() // 60) + 50
    p = ctl("missed", "--since", f"{minutes}m", "--db", url)  # the current hour and cleanup's last half hour
    assert p.returncode in (0, 1)
    if p.returncode == 0:
        assert "nothing missed" in p.stdout


def test_runs_filters_by_state_and_window(db):
    url, info = db
    rc, data = ctl_json("runs", "billing-export", "--state", "failed", "--db", url)
    assert rc == 0
    assert [r["state"] for r in data] == ["failed"]
    keys = {
        "run_id",
        "job_id",
        "scheduled_at",
        "fire_at",
        "state",
        "attempts",
        "node",
        "started_at",
        "finished_at",
        "exit_code",
        "error",
        "signal",
        "output_bytes",
        "token",
        "trigger",
    }
    assert keys <= set(data[0])
    # a window that opens half an hour before h0 - 2h, midway between the runs it must list and
    # the next older one: chronoctl reads the clock later than this test does, by seconds on
    # a loaded host, so a window opening just before h0 - 2h lost that run when it was slow
    minutes = int((datetime.now(timezone.utc) - info["h0"]).total_seconds() // 60) + 150
    rc, data = ctl_json("runs", "billing-export", "--since", f"{minutes}m", "--db", url)
    assert [r["scheduled_at"] for r in data] == [iso_at(info["h0"], b) for b in (0, 1, 2)]


def test_status_of_a_job_shows_its_last_runs_streak_and_silence(db):
    url, info = db
    rc, data = ctl_json("status", "billing-export", "--db", url)
    assert rc == 3  # no chronod runs on this database: `status JOB` is a health check too
    assert data["owner"] == "finance" and data["success_streak"] == 2
    assert [r["run_id"] for r in data["runs"][:3]] == [
        run_id("billing-export", info["h0"] - timedelta(hours=b)) for b in (0, 1, 2)
    ]
    assert data["silent"] is False and data["max_silence_s"] == 3 * 3600
    rc, data = ctl_json("status", "cleanup", "--db", url)
    assert data["paused"] and data["paused_reason"] == "INC-7: upstream down"
    p = ctl("status", "billing-export", "--db", url)
    assert p.returncode == 3, p.stderr
    assert "streak 2" in p.stdout and "at minute 0 of every hour" in p.stdout
    assert run_id("billing-export", info["h0"] - timedelta(hours=2))[:8] in p.stdout  # tables show 8-character ids


def test_status_overview_lists_failing_jobs_and_paused_ones(db):
    url, _ = db
    rc, data = ctl_json("status", "--db", url)
    assert rc == 3  # no chronod runs on this database: the health check says so, after the overview
    assert data["jobs"] == 2 and data["paused"] == ["cleanup"]
    assert data["failing"] == []  # billing-export's latest terminal run succeeded


def test_logs_escapes_control_characters_and_unknown_runs_exit_2(db):
    url, info = db
    p = ctl("logs", run_id("billing-export", info["h0"]), "--db", url)
    assert p.returncode == 0
    assert "\x1b" not in p.stdout and "\\x1b[2Jgone" in p.stdout
    assert "of 5000 bytes" in p.stderr
    assert ctl("logs", "0000000000000000", "--db", url).returncode == 2


# --- pause, resume, trigger ---------------------------------------------------------------------


def test_pause_and_resume_change_what_status_reports(db):
    url, _ = db
    assert ctl("pause", "billing-export", "--reason", "maintenance", "--db", url).returncode == 0
    try:
        assert ctl_json("status", "billing-export", "--db", url)[1]["paused_reason"] == "maintenance"
    finally:
        assert ctl("resume", "billing-export", "--db", url).returncode == 0
    assert ctl_json("status", "billing-export", "--db", url)[1]["paused"] is False


def test_trigger_without_a_running_daemon_exits_3_and_queues_nothing(db):
    url, _ = db
    p = ctl("trigger", "billing-export", "--db", url)
    assert p.returncode == 3
    assert "no chronod is running" in p.stderr


# --- the database itself -------------------------------------------------------------------------


def test_an_unreachable_database_exits_3_without_showing_its_password():
    p = ctl("status", "--db", "postgresql+psycopg://chrono:s3cret@127.0.0.1:1/chrono")
    assert p.returncode == 3
    assert "s3cret" not in p.stderr + p.stdout
    assert "127.0.0.1:1" in p.stderr


def test_a_database_without_the_schema_names_db_upgrade(tmp_path):
    import sqlite3

    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    p = ctl("status", "--db", str(path))
    assert p.returncode == 3
    assert "chronoctl db upgrade" in p.stderr


# --- the registry ------------------------------------------------------------------------------

JOB_FILE = """\
jobs:
  - id: nightly-report
    owner: finance
    schedule: "0 2 * * *"
    command: ["echo", "report"]
    idempotency_class: idempotent
"""


def test_register_writes_the_file_atomically_and_says_no_daemon_is_running(tmp_path):
    db_url = str(tmp_path / "chrono.db")
    open_store(db_url).upgrade()
    src = tmp_path / "report.yaml"
    src.write_text(JOB_FILE)
    reg = tmp_path / "jobs.d"
    p = ctl("register", str(src), "--registry", str(reg), "--db", db_url)
    assert p.returncode == 0, p.stderr
    assert "no chronod is running" in p.stdout
    assert (reg / "report.yaml").read_text() == JOB_FILE
    assert oct((reg / "report.yaml").stat().st_mode & 0o777) == "0o644"
    assert [f.name for f in reg.iterdir()] == ["report.yaml"]
    listed = ctl_json("list", "--registry", str(reg), "--db", db_url)[1]["jobs"]
    assert [(j["job_id"], j["schedule_words"]) for j in listed] == [("nightly-report", "at 02:00 every day")]


def test_register_refuses_an_invalid_file_and_an_id_taken_by_another_file(tmp_path):
    reg = tmp_path / "jobs.d"
    bad = tmp_path / "bad.yaml"
    bad.write_text(JOB_FILE.replace("0 2 * * *", "0 25 * * *"))
    p = ctl("register", str(bad), "--registry", str(reg), "--db", str(tmp_path / "none.db"))
    assert p.returncode == 1 and "bad.yaml:4" in p.stderr
    assert not reg.exists()
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(JOB_FILE)
    second.write_text(JOB_FILE)
    assert ctl("register", str(first), "--registry", str(reg), "--db", str(tmp_path / "none.db")).returncode == 0
    p = ctl("register", str(second), "--registry", str(reg), "--db", str(tmp_path / "none.db"))
    assert p.returncode == 1 and "nightly-report in" in p.stderr
    p = ctl("register", str(second), "--replace", "--registry", str(reg), "--db", str(tmp_path / "none.db"))
    assert p.returncode == 0
    assert sorted(f.name for f in reg.iterdir()) == ["b.yaml"]


def test_unregister_removes_a_single_job_file_and_refuses_to_rewrite_a_shared_one(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    (reg / "one.yaml").write_text(JOB_FILE)
    two = JOB_FILE + JOB_FILE.split("jobs:\n", 1)[1].replace("nightly-report", "other")
    (reg / "two.yaml").write_text(two.replace("nightly-report", "first"))
    nodb = str(tmp_path / "none.db")
    assert ctl("unregister", "nightly-report", "--registry", str(reg), "--db", nodb).returncode == 0
    assert not (reg / "one.yaml").exists()
    p = ctl("unregister", "other", "--registry", str(reg), "--db", nodb)
    assert p.returncode == 1 and "--force" in p.stderr
    assert ctl("unregister", "other", "--force", "--registry", str(reg), "--db", nodb).returncode == 0
    assert "other" not in (reg / "two.yaml").read_text() and "first" in (reg / "two.yaml").read_text()
    assert ctl("unregister", "other", "--registry", str(reg), "--db", nodb).returncode == 2
