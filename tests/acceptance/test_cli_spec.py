"""The installed `chronoctl` binary, black-box: validate, next, explain, schema, forecast.

Every run is checked for a Python traceback on either stream: an operator must never see one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

BIN_DIR = Path(sys.executable).parent
CHRONOCTL = shutil.which("chronoctl", path=str(BIN_DIR)) or shutil.which("chronoctl")

pytestmark = pytest.mark.skipif(CHRONOCTL is None, reason="chronoctl is not installed (pip install -e .)")


def chronoctl(*args: str, timeout: float = 30, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the installed binary; fail the test on any traceback."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONO_")}
    full_env.update(env or {})
    proc = subprocess.run(
        [CHRONOCTL, *args], capture_output=True, text=True, timeout=timeout, env=full_env, stdin=subprocess.DEVNULL
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def run_id(key: str, scheduled_utc: str) -> str:
    """DESIGN §4, written out again so the test does not trust the code it checks."""
    return hashlib.sha256(f"{key}|{scheduled_utc}".encode()).hexdigest()[:16]


def offset(key: str, tolerance_s: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % tolerance_s if tolerance_s else 0


JOB = """\
  - id: {id}
    owner: team-a
    schedule: "{schedule}"
    timezone: {tz}
    command: ["/bin/true"]
    idempotency_class: idempotent
    tolerance_s: {tol}
{extra}"""


def job_yaml(id: str, schedule: str, tz: str = "UTC", tol: int = 0, extra: str = "") -> str:
    if tol == 0 and "tolerance_reason" not in extra:
        extra += "    tolerance_reason: exact time matters\n"
    return JOB.format(id=id, schedule=schedule, tz=tz, tol=tol, extra=extra)


def write_registry(tmp_path: Path, *jobs: str, name: str = "jobs.yaml") -> Path:
    reg = tmp_path / "jobs.d"
    reg.mkdir(exist_ok=True)
    (reg / name).write_text("jobs:\n" + "".join(jobs))
    return reg


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    return write_registry(
        tmp_path,
        job_yaml("billing-export", "0 2 * * *", "America/New_York", 300),
        job_yaml("late-night", "30 1 * * *", "America/New_York", 0),
        job_yaml("agent", "0 * * * *", "UTC", 120, "    run_on: each\n"),
    )


# --- validate ----------------------------------------------------------------------------


def test_validate_accepts_a_good_registry_and_exits_0(registry):
    proc = chronoctl("validate", str(registry))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 jobs, 0 errors" in proc.stdout


BAD = """\
jobs:
  - id: broken
    owner: team-a
    schedule: 12:30
    command: "true"
    idempotency_class: idempotent
    tolerence_s: 5
"""


def test_validate_names_the_file_line_and_field_of_each_error_and_exits_1(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    proc = chronoctl("validate", str(bad))
    assert proc.returncode == 1
    assert f"{bad}:4: error: job 'broken': jobs[0].schedule:" in proc.stdout
    assert f"{bad}:7: error:" in proc.stdout and "tolerance_s" in proc.stdout
    assert "2 errors" in proc.stdout


def test_validate_github_format_emits_workflow_annotations(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    proc = chronoctl("validate", "--format", "github", str(bad))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert any(l.startswith(f"::error file={bad},line=4,title=chrono::job 'broken': jobs[0].schedule") for l in lines)
    assert any(l.startswith(f"::error file={bad},line=7,title=chrono::") for l in lines)


def test_validate_json_format_lists_every_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    proc = chronoctl("validate", "--format", "json", str(bad))
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["jobs"] == 0
    paths = {(p["line"], p["path"], p["severity"]) for p in doc["problems"]}
    assert (4, "jobs[0].schedule", "error") in paths
    assert (7, "jobs[0].tolerence_s", "error") in paths
    assert all(p["file"] == str(bad) for p in doc["problems"])


def test_validate_strict_turns_a_warning_into_a_failure(tmp_path):
    warn_only = tmp_path / "w.yaml"
    warn_only.write_text(
        "jobs:\n"
        + job_yaml("tight", "*/5 * * * *", "UTC", 0, "    tolerance_reason: ''\n").replace(
            "    tolerance_reason: ''\n", ""
        )
    )
    relaxed = chronoctl("validate", "--format", "json", str(warn_only))
    assert relaxed.returncode == 0, relaxed.stdout
    assert json.loads(relaxed.stdout)["warnings"] >= 1
    strict = chronoctl("validate", "--strict", str(warn_only))
    assert strict.returncode == 1
    assert ": error:" in strict.stdout


def test_validate_missing_path_is_a_usage_error(tmp_path):
    proc = chronoctl("validate", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("chronoctl: error: ") and "does not exist" in proc.stderr


def test_a_python_tag_executes_nothing(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.yaml"
    evil.write_text(f'jobs: !!python/object/apply:os.system ["touch {marker}"]\n')
    proc = chronoctl("validate", str(evil))
    assert proc.returncode == 1
    assert not marker.exists()
    assert str(evil) in proc.stdout


def test_an_alias_bomb_is_refused_quickly(tmp_path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\njobs: *a9\n")
    proc = chronoctl("validate", str(bomb), timeout=10)
    assert proc.returncode == 1
    assert str(bomb) in proc.stdout


@pytest.mark.parametrize(
    "content",
    [
        b"jobs:\n  - id: x\n    owner: [unclosed\n",
        b"\x00\x01\x02\xff\xfe binary \x89PNG\r\n",
        b"jobs: {a: 1, a: 2}\n",
        b"- just\n- a list\n",
    ],
    ids=["malformed-yaml", "binary", "duplicate-key", "wrong-shape"],
)
def test_broken_files_get_a_clean_message_and_exit_1(tmp_path, content):
    f = tmp_path / "broken.yaml"
    f.write_bytes(content)
    proc = chronoctl("validate", str(f))
    assert proc.returncode == 1
    assert f"{f}:" in proc.stdout


def test_a_directory_without_job_files_is_a_warning_not_a_crash(tmp_path):
    (tmp_path / "README").write_text("nothing here")
    proc = chronoctl("validate", str(tmp_path))
    assert proc.returncode == 0
    assert "no jobs found" in proc.stdout
    assert chronoctl("validate", "--strict", str(tmp_path)).returncode == 1


def _as_nobody() -> list[str]:
    """Root reads every file: run as nobody (through setpriv) for the permission tests."""
    if os.geteuid() != 0:
        return []
    prefix = [shutil.which("setpriv") or "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    try:
        works = subprocess.run([*prefix, CHRONOCTL, "--version"], capture_output=True, timeout=30).returncode == 0
    except OSError:
        works = False
    if not works:
        pytest.skip("running as root and cannot run chronoctl as nobody: permission errors cannot be provoked")
    return prefix


@pytest.mark.parametrize("mode, what", [(0o000, "file"), (0o300, "directory")])
def test_unreadable_files_and_directories_get_a_clean_message(mode, what):
    import tempfile

    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        target = Path(top) / "jobs.d"
        target.mkdir()
        (target / "secret.yaml").write_text("jobs: []\n")
        (target / "secret.yaml" if what == "file" else target).chmod(mode)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONO_")}
        proc = subprocess.run(
            [*_as_nobody(), CHRONOCTL, "validate", str(target)], capture_output=True, text=True, timeout=30, env=env
        )
        target.chmod(0o755)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ermission denied" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_control_characters_in_a_file_never_reach_the_terminal(tmp_path):
    f = tmp_path / "esc.yaml"
    f.write_text('jobs:\n  - id: "x\\e[2J"\n    owner: a\n')
    proc = chronoctl("validate", str(f))
    assert proc.returncode == 1
    assert "\x1b" not in proc.stdout + proc.stderr


# --- next --------------------------------------------------------------------------------


def test_next_cron_fires_once_on_the_fall_back_day_with_exact_times():
    proc = chronoctl(
        "next",
        "--cron",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-11-01T00:00:00Z",
        "--count",
        "2",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [
        {
            "at": "2026-11-01T02:30:00-05:00",
            "scheduled_at": "2026-11-01T02:30:00-05:00",
            "run_id": run_id("30 2 * * *", "2026-11-01T07:30:00Z"),
        },
        {
            "at": "2026-11-02T02:30:00-05:00",
            "scheduled_at": "2026-11-02T02:30:00-05:00",
            "run_id": run_id("30 2 * * *", "2026-11-02T07:30:00Z"),
        },
    ]


def test_next_cron_on_the_2027_spring_forward_day_fires_at_three_edt():
    proc = chronoctl(
        "next",
        "--cron",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2027-03-13T12:00:00",
        "--count",
        "2",
        "--json",
    )
    fires = json.loads(proc.stdout)
    assert [f["at"] for f in fires] == ["2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"]


def test_next_job_adds_the_jitter_of_the_formula(registry):
    proc = chronoctl(
        "next",
        "billing-export",
        "--registry",
        str(registry),
        "--after",
        "2026-12-01T00:00:00Z",
        "--count",
        "3",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    fires = json.loads(proc.stdout)
    assert [f["scheduled_at"] for f in fires] == [
        "2026-12-01T02:00:00-05:00",
        "2026-12-02T02:00:00-05:00",
        "2026-12-03T02:00:00-05:00",
    ]
    jitter = offset("billing-export", 300)
    for f in fires:
        gap = datetime.fromisoformat(f["at"]) - datetime.fromisoformat(f["scheduled_at"])
        assert gap == timedelta(seconds=jitter)
        utc = datetime.fromisoformat(f["scheduled_at"]).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert f["run_id"] == run_id("billing-export", utc)


def test_next_for_a_job_on_each_node_keys_identity_on_the_node(registry):
    proc = chronoctl(
        "next",
        "agent",
        "--registry",
        str(registry),
        "--node",
        "web1",
        "--after",
        "2026-12-01T00:00:00Z",
        "--count",
        "1",
        "--json",
    )
    (fire,) = json.loads(proc.stdout)
    jitter = offset("agent@web1", 120)
    # the 00:00 occurrence still counts when its jitter puts its fire after --after
    hour = "00" if jitter else "01"
    assert fire["scheduled_at"] == f"2026-12-01T{hour}:00:00+00:00"
    assert fire["run_id"] == run_id("agent@web1", f"2026-12-01T{hour}:00:00Z")
    assert datetime.fromisoformat(fire["at"]) - datetime.fromisoformat(fire["scheduled_at"]) == timedelta(
        seconds=jitter
    )
    assert fire["run_id"] != run_id("agent@web2", f"2026-12-01T{hour}:00:00Z")


def test_next_counts_an_occurrence_jittered_past_after(registry):
    jitter = offset("billing-export", 300)
    assert jitter > 0
    proc = chronoctl(
        "next",
        "billing-export",
        "--registry",
        str(registry),
        "--after",
        "2026-12-01T02:00:00-05:00",
        "--count",
        "1",
        "--json",
    )
    (fire,) = json.loads(proc.stdout)
    assert fire["scheduled_at"] == "2026-12-01T02:00:00-05:00"


def test_next_registry_comes_from_chrono_registry_too(registry):
    proc = chronoctl("next", "late-night", "--count", "1", "--json", env={"CHRONO_REGISTRY": str(registry)})
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 1


def test_next_unknown_job_exits_2(registry):
    proc = chronoctl("next", "nope", "--registry", str(registry))
    assert proc.returncode == 2
    assert proc.stderr.startswith("chronoctl: error: no job 'nope'")


def test_next_takes_a_job_or_cron_not_both_and_neither_is_the_agenda(registry):
    assert chronoctl("next", "--registry", str(registry)).returncode == 0  # the agenda
    assert chronoctl("next", "agent", "--cron", "* * * * *", "--registry", str(registry)).returncode == 2
    assert chronoctl("next", "--window", "2h", "--cron", "* * * * *").returncode == 2


def test_next_with_a_bad_expression_or_time_explains_itself():
    bad_expr = chronoctl("next", "--cron", "61 * * * *")
    assert bad_expr.returncode == 1 and bad_expr.stderr.startswith("chronoctl: error: ")
    bad_time = chronoctl("next", "--cron", "* * * * *", "--after", "soon")
    assert (
        bad_time.returncode == 2 and "not a time chrono can read" in bad_time.stderr and "tomorrow" in bad_time.stderr
    )
    bad_zone = chronoctl("next", "--cron", "* * * * *", "--tz", "Mars/Olympus")
    assert bad_zone.returncode == 2


# --- explain -----------------------------------------------------------------------------


def test_explain_lists_the_dst_dates_of_a_fixed_time_new_york_job(registry):
    proc = chronoctl("explain", "late-night", "--registry", str(registry), "--after", "2026-12-01T00:00:00Z")
    assert proc.returncode == 0, proc.stderr
    assert "fixed-time" in proc.stdout
    assert "2027-11-07" in proc.stdout  # 01:30 happens twice; it fires only in the first pass
    spring = chronoctl("explain", "--cron", "30 2 * * *", "--tz", "America/New_York", "--after", "2026-12-01T00:00:00Z")
    assert "2027-03-14" in spring.stdout


def test_explain_json_shows_the_jitter_and_its_inputs(registry):
    proc = chronoctl(
        "explain", "billing-export", "--registry", str(registry), "--after", "2026-12-01T00:00:00Z", "--json"
    )
    doc = json.loads(proc.stdout)
    assert doc["job_key"] == "billing-export" and doc["tolerance_s"] == 300
    assert doc["jitter_offset_s"] == offset("billing-export", 300)
    assert doc["class"] == "fixed-time" and doc["timezone"] == "America/New_York"
    assert len(doc["next"]) == 5
    assert [e["date"] for e in doc["dst_events"]] == ["2027-03-14"]
    assert doc["run_id_example"]["run_id"] == run_id("billing-export", "2026-12-01T07:00:00Z")


# --- schema ------------------------------------------------------------------------------

SPEC_FIELDS = (
    "id owner schedule command idempotency_class timezone tolerance_s tolerance_reason overlap catchup "
    "catchup_window_s timeout_s retry max_silence_s run_on user group workdir env shell stdin resource "
    "notify tags output_limit_kb description enabled"
).split()


def _property_names(node) -> set[str]:
    names = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                names |= set(value)
            names |= _property_names(value)
    elif isinstance(node, list):
        for value in node:
            names |= _property_names(value)
    return names


def test_schema_is_json_with_every_spec_field():
    proc = chronoctl("schema")
    assert proc.returncode == 0
    names = _property_names(json.loads(proc.stdout))
    assert {"jobs", "defaults", "resources"} <= names
    assert [f for f in SPEC_FIELDS if f not in names] == []


# --- forecast ----------------------------------------------------------------------------

FORECAST_JOBS = [
    ("every-5", "*/5 * * * *", 120),
    ("hourly", "0 * * * *", 600),
    ("office", "*/15 9-17 * * *", 0),
    ("night", "30 2 * * *", 900),
]


def _matches(expr: str, t: datetime) -> bool:
    minute, hour = expr.split()[:2]

    def field(spec: str, value: int) -> bool:
        if spec == "*":
            return True
        if spec.startswith("*/"):
            return value % int(spec[2:]) == 0
        if "-" in spec:
            lo, hi = map(int, spec.split("-"))
            return lo <= value <= hi
        return value == int(spec)

    if minute.startswith("*/") and hour != "*" and "-" in hour:
        return field(minute, t.minute) and field(hour, t.hour)
    return field(minute, t.minute) and field(hour, t.hour)


def test_forecast_counts_equal_a_brute_force_count(tmp_path):
    reg = write_registry(tmp_path, *(job_yaml(i, e, "UTC", tol) for i, e, tol in FORECAST_JOBS))
    start = datetime(2026, 6, 1, 0, 0, tzinfo=timezone.utc)
    window, bucket = timedelta(hours=12), 300
    proc = chronoctl(
        "forecast",
        "--registry",
        str(reg),
        "--from",
        "2026-06-01T00:00:00Z",
        "--window",
        "12h",
        "--bucket",
        "5m",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    before, after = {}, {}
    t = start - timedelta(hours=1)
    while t < start + window:
        for job_id, expr, tol in FORECAST_JOBS:
            if not _matches(expr, t):
                continue
            if t >= start:
                i = int((t - start).total_seconds() // bucket)
                before[i] = before.get(i, 0) + 1
            fire = t + timedelta(seconds=offset(job_id, tol))
            if start <= fire < start + window:
                i = int((fire - start).total_seconds() // bucket)
                after[i] = after.get(i, 0) + 1
        t += timedelta(minutes=1)
    expected = [
        {
            "start": (start + timedelta(seconds=i * bucket)).isoformat(),
            "before": before.get(i, 0),
            "after": after.get(i, 0),
        }
        for i in sorted(set(before) | set(after))
    ]
    assert doc["buckets"] == expected
    assert doc["window_s"] == 12 * 3600 and doc["bucket_s"] == 300
    assert doc["fires_before"] == sum(before.values())
    top = max(after.values())
    assert doc["peaks"][0]["count"] == top
    assert set(doc["peaks"][0]["jobs"]) <= {j for j, _, _ in FORECAST_JOBS}


def test_forecast_text_draws_a_chart(tmp_path):
    reg = write_registry(tmp_path, *(job_yaml(i, e, "UTC", tol) for i, e, tol in FORECAST_JOBS))
    proc = chronoctl(
        "forecast", "--registry", str(reg), "--from", "2026-06-01T00:00:00Z", "--window", "6h", "--bucket", "1m"
    )
    assert proc.returncode == 0, proc.stderr
    assert "herd forecast: 4 jobs" in proc.stdout
    assert "#" in proc.stdout  # plain bars when stdout is not a terminal
    assert "busiest 1m buckets after jitter" in proc.stdout


def test_forecast_rejects_a_bad_duration(tmp_path):
    proc = chronoctl("forecast", "--registry", str(tmp_path), "--window", "forever")
    assert proc.returncode == 2 and "--window" in proc.stderr


# --- the error boundary --------------------------------------------------------------------


def test_unknown_command_is_a_usage_error_in_our_format():
    proc = chronoctl("frobnicate")
    assert proc.returncode == 2
    assert proc.stderr.startswith("chronoctl: error: ")


def test_help_lists_the_spec_commands():
    proc = chronoctl("--help")
    assert proc.returncode == 0
    for name in ("validate", "next", "explain", "schema", "forecast"):
        assert name in proc.stdout
