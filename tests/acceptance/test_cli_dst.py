"""The installed `chronoctl`, black-box: a job's DST policy (dst_gap, dst_repeat) in `next`,
`explain` and `validate`.

America/New_York: 2026-11-01T06:00Z (02:00 EDT -> 01:00 EST), 2027-03-14T07:00Z (02:00 EST -> 03:00 EDT).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from tests.acceptance.test_cli_spec import chronoctl, job_yaml, run_id, write_registry

NY = "America/New_York"


def next_json(*args: str) -> list[dict]:
    proc = chronoctl("next", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_dst_gap_skip_does_not_run_on_the_spring_forward_day():
    fires = next_json(
        "--cron", "30 2 * * *", "--tz", NY, "--dst-gap", "skip", "--after", "2027-03-13T12:00:00Z", "--count", "1"
    )
    assert fires == [
        {
            "at": "2027-03-15T02:30:00-04:00",
            "scheduled_at": "2027-03-15T02:30:00-04:00",
            "run_id": run_id("30 2 * * *", "2027-03-15T06:30:00Z"),
        }
    ]


def test_dst_gap_shift_is_crons_behaviour_and_the_default():
    shifted = next_json(
        "--cron", "30 2 * * *", "--tz", NY, "--dst-gap", "shift", "--after", "2027-03-13T12:00:00Z", "--count", "1"
    )
    default = next_json("--cron", "30 2 * * *", "--tz", NY, "--after", "2027-03-13T12:00:00Z", "--count", "1")
    assert shifted == default and shifted[0]["at"] == "2027-03-14T03:00:00-04:00"


def test_dst_repeat_both_fires_twice_on_the_fall_back_day_an_hour_apart_with_two_run_ids():
    fires = next_json(
        "--cron", "30 1 * * *", "--tz", NY, "--dst-repeat", "both", "--after", "2026-11-01T00:00:00Z", "--count", "3"
    )
    assert [f["scheduled_at"] for f in fires] == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-02T01:30:00-05:00",
    ]
    first, second = (datetime.fromisoformat(f["at"]) for f in fires[:2])
    assert second - first == timedelta(hours=1)
    assert fires[0]["run_id"] == run_id("30 1 * * *", "2026-11-01T05:30:00Z")
    assert fires[1]["run_id"] == run_id("30 1 * * *", "2026-11-01T06:30:00Z")


def test_dst_repeat_last_fires_in_the_second_pass_only():
    fires = next_json(
        "--cron", "30 1 * * *", "--tz", NY, "--dst-repeat", "last", "--after", "2026-11-01T00:00:00Z", "--count", "2"
    )
    assert [f["at"] for f in fires] == ["2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"]


def test_a_wrong_policy_word_is_a_usage_error_and_a_job_takes_its_policy_from_its_file(tmp_path: Path):
    bad = chronoctl("next", "--cron", "30 1 * * *", "--tz", NY, "--dst-repeat", "twice")
    assert bad.returncode == 2 and "first, last, both" in bad.stderr
    reg = write_registry(tmp_path, job_yaml("late", "30 1 * * *", NY, extra="    dst_repeat: both\n"))
    with_flag = chronoctl("next", "late", "--registry", str(reg), "--dst-repeat", "last")
    assert with_flag.returncode == 2 and "dst_repeat" in with_flag.stderr


def test_next_for_a_job_follows_its_dst_policy(tmp_path: Path):
    reg = write_registry(
        tmp_path,
        job_yaml("late", "30 1 * * *", NY, extra="    dst_repeat: both\n"),
        job_yaml("early", "30 2 * * *", NY, extra="    dst_gap: skip\n"),
    )
    late = next_json("late", "--registry", str(reg), "--after", "2026-11-01T00:00:00Z", "--count", "2")
    assert [f["scheduled_at"] for f in late] == ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00"]
    assert late[1]["run_id"] == run_id("late", "2026-11-01T06:30:00Z")
    early = next_json("early", "--registry", str(reg), "--after", "2027-03-13T12:00:00Z", "--count", "1")
    assert early[0]["scheduled_at"] == "2027-03-15T02:30:00-04:00"


def test_explain_names_the_policy_and_the_dates_it_applies_to(tmp_path: Path):
    reg = write_registry(tmp_path, job_yaml("late", "30 1 * * *", NY, extra="    dst_repeat: both\n"))
    proc = chronoctl("explain", "late", "--registry", str(reg), "--after", "2026-06-01T00:00:00Z", "--json")
    doc = json.loads(proc.stdout)
    assert doc["dst_policy"] == {"dst_gap": "shift", "dst_repeat": "both", "as_cron": False}
    assert [(e["date"], e["change"]) for e in doc["dst_events"]] == [("2026-11-01", "fall-back")]
    assert "both passes" in doc["dst_events"][0]["effect"]
    text = chronoctl("explain", "late", "--registry", str(reg), "--after", "2026-06-01T00:00:00Z").stdout
    assert "dst_repeat: both" in text and "2026-11-01" in text
    skip = chronoctl(
        "explain", "--cron", "30 2 * * *", "--tz", NY, "--dst-gap", "skip", "--after", "2026-12-01T00:00:00Z", "--json"
    )
    (event,) = json.loads(skip.stdout)["dst_events"]
    assert event["date"] == "2027-03-14" and "skipped" in event["effect"]


def test_explain_of_a_wildcard_schedule_names_no_policy():
    doc = json.loads(chronoctl("explain", "--cron", "*/30 1 * * *", "--tz", NY, "--json").stdout)
    assert doc["class"] == "wildcard" and doc["dst_policy"] is None


def test_validate_warns_without_an_explicit_policy_and_strict_makes_it_an_error(tmp_path: Path):
    reg = write_registry(tmp_path, job_yaml("late", "30 1 * * *", NY))
    relaxed = chronoctl("validate", str(reg), "--format", "json")
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    problems = json.loads(relaxed.stdout)["problems"]
    assert [p["severity"] for p in problems] == ["warning"] and "dst_repeat" in problems[0]["hint"]
    strict = chronoctl("validate", str(reg), "--strict")
    assert strict.returncode == 1 and "dst_repeat" in strict.stdout + strict.stderr
    chosen = write_registry(
        tmp_path, job_yaml("late", "30 1 * * *", NY, extra="    dst_repeat: first\n"), name="jobs.yaml"
    )
    assert chronoctl("validate", str(chosen), "--strict").returncode == 0


def test_the_schema_describes_the_dst_policy_and_history_days():
    doc = json.loads(chronoctl("schema").stdout)
    text = json.dumps(doc)
    for name, values in (("dst_gap", ["shift", "skip"]), ("dst_repeat", ["first", "last", "both"])):
        assert f'"{name}"' in text
        assert json.dumps({"type": "string", "enum": values}).strip("{}") in text
    assert '"history_days"' in text
