"""The installed `chronoctl`, black-box: maintenance windows in `validate`, `explain` and
`forecast`.

America/New_York: 2027-03-14T07:00Z (02:00 EST -> 03:00 EDT).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.acceptance.test_cli_spec import chronoctl

REGISTRY = """\
blackouts:
  - name: sunday-patching
    reason: weekly patching
    cron: "0 1 * * sun"
    duration: 3h
    timezone: America/New_York
    tags: [db]
jobs:
  - id: backup
    owner: ops
    schedule: "30 1 * * *"
    timezone: America/New_York
    dst_gap: skip
    command: "true"
    idempotency_class: idempotent
    tolerance_s: 0
    tolerance_reason: exact times
    blackout: defer
    tags: [db]
  - id: report
    owner: ops
    schedule: "30 1 * * *"
    timezone: America/New_York
    dst_gap: skip
    command: "true"
    idempotency_class: idempotent
    tolerance_s: 0
    tolerance_reason: exact times
"""


def registry(tmp_path: Path, text: str = REGISTRY) -> Path:
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    (reg / "jobs.yaml").write_text(text)
    return reg


def test_explain_names_the_windows_and_marks_the_fire_they_hold(tmp_path):
    reg = registry(tmp_path)
    proc = chronoctl("explain", "backup", "--registry", str(reg), "--after", "2027-03-12T00:00:00Z", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["blackout"] == "defer"
    [w] = data["windows"]
    # the window opened at 01:00 EST lasts 3 h of real time: it closes at 05:00 EDT that day
    assert (w["name"], w["next"][0]) == (
        "sunday-patching",
        {"from": "2027-03-14T01:00:00-05:00", "to": "2027-03-14T05:00:00-04:00"},
    )
    held = {f["at"]: f["window"] for f in data["next"]}
    assert held["2027-03-14T01:30:00-05:00"] == "sunday-patching" and held["2027-03-13T01:30:00-05:00"] is None
    text = chronoctl("explain", "report", "--registry", str(reg)).stdout
    assert "maintenance windows: none hold this job" in text


def test_forecast_lists_each_window_with_the_fires_it_holds(tmp_path):
    reg = registry(tmp_path)
    proc = chronoctl(
        "forecast",
        "--registry",
        str(reg),
        "--from",
        "2027-03-13T00:00:00Z",
        "--window",
        "3d",
        "--bucket",
        "1h",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    [w] = json.loads(proc.stdout)["windows"]
    assert (w["name"], w["jobs"], w["fires_held"]) == ("sunday-patching", ["backup"], 1)
    assert (w["from"], w["to"]) == ("2027-03-14T06:00:00+00:00", "2027-03-14T09:00:00+00:00")


def test_validate_points_at_the_line_of_a_bad_window(tmp_path):
    bad = REGISTRY.replace("    duration: 3h\n", "    duration: 3 hours\n").replace(
        "  - name: sunday", "  - name: sunday"
    )
    reg = registry(tmp_path, bad)
    proc = chronoctl("validate", str(reg))
    assert proc.returncode == 1
    assert "jobs.yaml:5: error: blackouts[0].duration" in proc.stdout + proc.stderr


def test_pausing_a_tag_or_resource_no_job_could_ever_have_is_a_usage_error_naming_the_rule(tmp_path):
    db = str(tmp_path / "never-opened.db")
    for flag, value in (("--tag", "$(id)"), ("--resource", "../../etc"), ("--tag", "db\x1b[2J")):
        proc = chronoctl("pause", flag, value, "--reason", "x", "--db", db)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        kind = flag.lstrip("-")
        assert f"no job can have the {kind}" in proc.stderr and "letters, digits" in proc.stderr
        assert "\x1b" not in proc.stderr
    assert not (tmp_path / "never-opened.db").exists()
