"""Job spec validation: every rule of DESIGN §3, each problem located by file, line and path."""

from __future__ import annotations

import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from chronod.core import occurrence
from chronod.core.model import RunOn
from chronod.core.validate import (
    ERROR,
    FIELDS,
    MAX_JOBS_PER_FILE,
    WARNING,
    Problem,
    SpecDocument,
    validate_document,
)
from chronod.specfile import parse_text

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
JOB = """\
jobs:
  - id: nightly
    owner: team
    schedule: "0 4 * * *"
    command: echo hi
    idempotency_class: idempotent
"""


def check(text: str):
    return validate_document(parse_text(textwrap.dedent(text), "jobs.yaml"), now=NOW)


def job(extra: str = "", base: str = JOB) -> str:
    """The minimal valid job plus `extra` lines (indented as job fields)."""
    lines = textwrap.dedent(extra).strip("\n")
    return base + "".join(f"    {line}\n" for line in lines.splitlines())


def errors(result) -> list[Problem]:
    return [p for p in result.problems if p.severity == ERROR]


def warnings(result) -> list[Problem]:
    return [p for p in result.problems if p.severity == WARNING]


def at(result, path: str, severity: str = ERROR) -> Problem:
    found = [p for p in result.problems if p.path == path and p.severity == severity]
    assert found, f"no {severity} at {path}: {[p.format() for p in result.problems]}"
    return found[0]


def the_job(text: str):
    result = check(text)
    assert not errors(result), [p.format() for p in result.problems]
    assert len(result.jobs) == 1
    return result.jobs[0]


def test_a_minimal_job_gets_every_documented_default():
    spec = the_job(JOB)
    assert spec.id == "nightly" and spec.command == "echo hi"
    assert (spec.timezone, spec.overlap, spec.catchup, spec.catchup_window_s) == ("UTC", "forbid", "latest", 86400)
    assert (spec.timeout_s, spec.kill_grace_s, spec.retry.attempts) == (None, 10, 1)
    assert (spec.workdir, spec.env, spec.shell, spec.stdin) == ("/", (), "/bin/sh", None)
    assert (spec.output_limit_kb, spec.description, spec.enabled, spec.tags) == (64, "", True, ())
    assert spec.run_on == RunOn("any") and spec.notify == () and spec.resource is None
    assert spec.source_file == "jobs.yaml" and spec.source_line == 2


def test_missing_required_fields_are_each_reported_on_the_job_line():
    result = check("jobs:\n  - id: bare\n    description: nothing else\n")
    messages = {p.message for p in errors(result)}
    assert messages == {f"{name} is required" for name in ("owner", "schedule", "command", "idempotency_class")}
    assert {p.line for p in errors(result)} == {2}
    assert all(p.job_id == "bare" and p.path == "jobs[0]" for p in errors(result))


def test_every_problem_in_a_file_is_reported_at_once_in_line_order():
    second = (
        JOB.replace("jobs:\n", "").replace("nightly", "Second").replace("echo hi", "[]").replace("idempotent", "maybe")
    )
    text = job("retry: {attempts: 0}\noverlap: sometimes") + second
    result = check(text)
    paths = [p.path for p in errors(result)]
    assert paths == [
        "jobs[0].retry.attempts",
        "jobs[0].overlap",
        "jobs[1].id",
        "jobs[1].command",
        "jobs[1].idempotency_class",
    ]
    assert [p.line for p in errors(result)] == [7, 8, 9, 12, 13]
    assert result.jobs == ()


def test_unknown_keys_are_errors_that_suggest_the_closest_field():
    result = check(job("schedul: '* * * * *'\ntz: UTC\nfrobnicate: 1"))
    assert at(result, "jobs[0].schedul").hint == "did you mean 'schedule'?"
    assert at(result, "jobs[0].tz").hint == "did you mean 'timezone'?"
    assert "known keys" in at(result, "jobs[0].frobnicate").hint
    top = check("job:\n  - id: x\n")
    assert at(top, "job").hint == "did you mean 'jobs'?"


def test_retry_and_notify_keys_are_checked_too():
    result = check(job("retry: {attemps: 2}\nnotify: [{on: [failed], comand: 'true'}]"))
    assert at(result, "jobs[0].retry.attemps").hint == "did you mean 'attempts'?"
    assert at(result, "jobs[0].notify[0].comand").hint == "did you mean 'command'?"


def test_an_id_outside_the_pattern_is_refused_with_a_fixed_suggestion():
    result = check(JOB.replace("id: nightly", "id: Nightly Backup"))
    problem = at(result, "jobs[0].id")
    assert problem.job_id is None and problem.line == 2
    assert problem.hint == "for example 'nightly-backup'"
    assert at(check(JOB.replace("id: nightly", "id: " + "a" * 64)), "jobs[0].id")
    assert not errors(check(JOB.replace("id: nightly", "id: " + "a" * 63)))


def test_duplicate_ids_in_one_file_name_the_first_line():
    result = check(JOB + JOB.replace("jobs:\n", ""))
    problem = at(result, "jobs[1].id")
    assert problem.line == 7 and "already used at line 2" in problem.message
    assert [s.id for s in result.jobs] == ["nightly"]


def test_a_bad_schedule_carries_the_schedule_engines_message_and_hint():
    result = check(JOB.replace('"0 4 * * *"', '"0 4 31 2 *"'))
    problem = at(result, "jobs[0].schedule")
    assert problem.line == 4 and problem.message
    result = check(JOB.replace('"0 4 * * *"', '"61 * * * *"'))
    assert at(result, "jobs[0].schedule").line == 4


def test_an_unknown_time_zone_is_an_error_with_a_suggestion():
    problem = at(check(job("timezone: America/New_Yrok")), "jobs[0].timezone")
    assert problem.message == "unknown time zone 'America/New_Yrok'"
    assert problem.hint == "did you mean 'America/New_York'?"
    assert at(check(job("timezone: localtime")), "jobs[0].timezone")


@pytest.mark.parametrize(
    "schedule, tolerance",
    [("0 4 * * *", 300), ("*/5 * * * *", 30), ("*/30 * * * * *", 3), ("@every 5s", 0), ("@reboot", 0)],
)
def test_tolerance_defaults_to_a_tenth_of_the_smallest_gap_capped_at_300(schedule, tolerance):
    assert the_job(JOB.replace('"0 4 * * *"', f'"{schedule}"')).tolerance_s == tolerance


def test_a_tolerance_not_smaller_than_the_gap_is_an_error_that_says_the_gap():
    result = check(job("tolerance_s: 300").replace('"0 4 * * *"', '"*/5 * * * *"'))
    problem = at(result, "jobs[0].tolerance_s")
    assert problem.line == 7 and "(300s)" in problem.message and "299" in problem.hint
    assert the_job(job("tolerance_s: 299").replace('"0 4 * * *"', '"*/5 * * * *"')).tolerance_s == 299


def test_a_zero_tolerance_without_a_reason_is_a_warning_not_an_error():
    result = check(job("tolerance_s: 0"))
    assert not errors(result) and len(result.jobs) == 1
    assert "tolerance_reason" in at(result, "jobs[0].tolerance_s", WARNING).message
    assert not warnings(check(job("tolerance_s: 0\ntolerance_reason: the bell rings at 09:30")))


def test_a_tolerance_that_defaults_to_zero_is_not_warned_about():
    assert not warnings(check(JOB.replace('"0 4 * * *"', '"@every 5s"')))


def test_unsafe_jobs_cannot_retry():
    result = check(job("retry: {attempts: 3}").replace("idempotent", "unsafe"))
    problem = at(result, "jobs[0].retry.attempts")
    assert problem.line == 7 and "keyed" in problem.hint
    assert the_job(job("retry: {attempts: 1}").replace("idempotent", "unsafe")).retry.attempts == 1
    assert the_job(job("retry: {attempts: 3}").replace("idempotent", "keyed")).retry.attempts == 3


def test_retry_attempts_must_be_at_least_one_and_backoff_within_its_bound():
    assert "≥ 1" in at(check(job("retry: {attempts: 0}")), "jobs[0].retry.attempts").message
    problem = at(check(job("retry: {attempts: 2, backoff_s: 600, max_backoff_s: 60}")), "jobs[0].retry.backoff_s")
    assert "max_backoff_s" in problem.message


def test_max_silence_defaults_to_twice_the_largest_gap_plus_tolerance():
    spec = the_job(JOB)
    assert spec.max_silence_s == 2 * 86400 + 300 and not spec.max_silence_explicit
    weekdays = the_job(JOB.replace('"0 4 * * *"', '"0 4 * * mon-fri"'))
    assert weekdays.max_silence_s == 2 * 3 * 86400 + 300
    assert the_job(JOB.replace('"0 4 * * *"', '"@reboot"')).max_silence_s is None


def test_a_max_silence_shorter_than_the_largest_gap_is_a_warning():
    result = check(job("max_silence_s: 3600"))
    assert not errors(result) and result.jobs[0].max_silence_explicit
    assert "86400s" in at(result, "jobs[0].max_silence_s", WARNING).message


def test_run_on_takes_any_each_or_node_globs():
    assert the_job(job("run_on: each")).run_on == RunOn("each")
    assert the_job(job("run_on: {nodes: ['web-*', db1]}")).run_on == RunOn("any", ("web-*", "db1"))
    assert "'every'" in at(check(job("run_on: every")), "jobs[0].run_on").message
    assert at(check(job("run_on: {nodes: []}")), "jobs[0].run_on.nodes")


def test_env_names_are_checked_and_chrono_variables_are_reserved():
    result = check(job("env: {GOOD: 'x', 1BAD: 'y', CHRONO_RUN_ID: 'z', PORT: 8080}"))
    assert at(result, "jobs[0].env.1BAD")
    assert "set by chrono" in at(result, "jobs[0].env.CHRONO_RUN_ID").message
    assert at(result, "jobs[0].env.PORT").hint == 'quote it: PORT: "8080"'
    assert the_job(job("env: {B: '2', A: '1'}")).env == (("A", "1"), ("B", "2"))


def test_env_entries_are_bounded():
    entries = ", ".join(f"V{i}: 'x'" for i in range(257))
    assert "limit is 256" in at(check(job(f"env: {{{entries}}}")), "jobs[0].env").message


def test_a_resource_must_be_declared_in_the_same_file():
    base = "resources:\n  db: {max_concurrency: 2}\n" + job("resource: db")
    assert the_job(base).resource == "db"
    problem = at(check(base.replace("resource: db", "resource: dbs")), "jobs[0].resource")
    assert problem.line == 9 and problem.hint == "did you mean 'db'?"
    assert at(check(base.replace("max_concurrency: 2", "max_concurrency: 0")), "resources.db.max_concurrency").line == 2


def test_notify_routes_need_exactly_one_of_command_or_webhook():
    ok = the_job(job("notify: [{on: [failed, lost], webhook: 'https://hooks.example.com/x'}]"))
    assert ok.notify[0].on == ("failed", "lost") and ok.notify[0].webhook == "https://hooks.example.com/x"
    both = check(job("notify: [{on: [failed], command: 'true', webhook: 'https://h.example.com'}]"))
    assert "both command and webhook" in at(both, "jobs[0].notify[0]").message
    neither = check(job("notify: [{on: [failed]}]"))
    assert "neither" in at(neither, "jobs[0].notify[0]").message


def test_notify_events_and_webhook_urls_are_checked():
    result = check(job("notify: [{on: [faild], webhook: 'ftp://x'}]"))
    assert at(result, "jobs[0].notify[0].on[0]").hint == "did you mean 'failed'?"
    assert "http(s)" in at(result, "jobs[0].notify[0].webhook").message


def test_a_compliance_job_needs_an_explicit_max_silence_and_a_notify():
    result = check(job("tags: [compliance]"))
    messages = [p.message for p in errors(result) if p.path == "jobs[0].tags"]
    assert messages == ["a compliance job needs an explicit max_silence_s", "a compliance job needs a notify route"]
    assert the_job(job("tags: [compliance]\nmax_silence_s: 172800\nnotify: [{on: [silence], command: 'true'}]"))


def test_defaults_apply_to_the_files_jobs_and_a_job_overrides_them():
    text = "defaults:\n  owner: ops\n  timezone: Europe/Paris\n  timeout_s: 60\njobs:\n"
    text += "  - {id: a, schedule: '0 1 * * *', command: 'true', idempotency_class: keyed}\n"
    text += "  - {id: b, schedule: '0 1 * * *', command: 'true', idempotency_class: keyed, timezone: UTC}\n"
    a, b = check(text).jobs
    assert (a.owner, a.timezone, a.timeout_s) == ("ops", "Europe/Paris", 60)
    assert (b.owner, b.timezone) == ("ops", "UTC")


def test_an_invalid_default_is_reported_once_at_its_own_line():
    text = "defaults:\n  overlap: sometimes\n" + JOB + JOB.replace("jobs:\n", "").replace("nightly", "other")
    result = check(text)
    assert [(p.path, p.line) for p in errors(result)] == [("defaults.overlap", 2)]
    assert result.jobs == ()


def test_an_id_cannot_have_a_default():
    assert at(check("defaults:\n  id: x\n" + JOB), "defaults.id").line == 2


@pytest.mark.parametrize(
    "line, path, read_as, hint",
    [
        ("schedule: 12:30", "schedule", "the base-60 number 750", 'quote it: schedule: "12:30"'),
        ("user: no", "user", "the boolean false", 'quote it: user: "no"'),
        ("owner: 2024-01-01", "owner", "the date 2024-01-01", 'quote it: owner: "2024-01-01"'),
        ("description: 1.5", "description", "the number 1.5", 'quote it: description: "1.5"'),
    ],
)
def test_string_fields_refuse_values_yaml_reads_as_something_else(line, path, read_as, hint):
    fields = {"id": "x", "owner": "team", "schedule": '"0 4 * * *"', "command": "'true'", "idempotency_class": "keyed"}
    fields.pop(path, None)
    text = "jobs:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in fields.items()) + f"\n    {line}\n"
    problem = at(check(text), f"jobs[0].{path}")
    assert read_as in problem.message and problem.hint == hint and problem.line == 2 + len(fields)


@pytest.mark.parametrize(
    "value, words",
    [
        ("'60'", "remove the quotes: 60"),
        ("15m", "write 900"),
        ("true", "not a boolean"),
        ("1.5", "whole number"),
        ("-1", "≥ 1"),
    ],
)
def test_integer_fields_refuse_strings_booleans_fractions_and_out_of_range(value, words):
    problem = at(check(job(f"timeout_s: {value}")), "jobs[0].timeout_s")
    assert words in problem.message + " " + problem.hint


def test_workdir_and_shell_must_be_absolute_paths():
    result = check(job("workdir: tmp\nshell: bash"))
    assert "absolute" in at(result, "jobs[0].workdir").message
    assert "absolute" in at(result, "jobs[0].shell").message


def test_a_list_command_is_exec_form_and_commands_are_bounded():
    assert the_job(JOB.replace("command: echo hi", "command: [/bin/echo, hi]")).command == ("/bin/echo", "hi")
    long = "x" * (64 * 1024 + 1)
    assert "limit is 65536" in at(check(JOB.replace("echo hi", long)), "jobs[0].command").message
    assert at(check(JOB.replace("echo hi", "[]")), "jobs[0].command")


def test_the_number_of_jobs_per_file_is_bounded():
    one = {"id": "x", "owner": "o", "schedule": "@daily", "command": "true", "idempotency_class": "keyed"}
    doc = SpecDocument("big.yaml", {"jobs": [one] * (MAX_JOBS_PER_FILE + 1)}, {"jobs": 1})
    result = validate_document(doc, now=NOW)
    assert [(p.path, p.line) for p in result.problems] == [("jobs", 1)]
    assert "10000" in result.problems[0].message


def test_an_enum_value_gets_a_did_you_mean():
    problem = at(check(job("overlap: forbidden")), "jobs[0].overlap")
    assert problem.hint == "did you mean 'forbid'?"


def test_the_top_level_must_be_a_mapping_with_jobs():
    assert "must be a mapping" in check("- id: x\n").problems[0].message
    assert "jobs: list" in check("defaults: {owner: x}\n").problems[0].message
    assert check("jobs: []\n").problems == ()


def test_a_fixed_time_job_in_the_hours_the_clocks_change_is_warned_about():
    result = check(job("timezone: America/New_York").replace('"0 4 * * *"', '"30 2 * * *"'))
    assert not errors(result)
    problem = at(result, "jobs[0].schedule", WARNING)
    assert "America/New_York" in problem.message and "2027-03-14" in problem.message
    assert not warnings(check(job("timezone: America/New_York")))  # 04:00 is never skipped or repeated
    wildcard = job("timezone: America/New_York").replace('"0 4 * * *"', '"*/10 * * * *"')
    assert not warnings(check(wildcard))


def test_a_problem_formats_as_file_line_severity_job_and_field():
    problem = at(check(job("retry: {attempts: 0}")), "jobs[0].retry.attempts")
    assert problem.format() == "jobs.yaml:7: error: job 'nightly': retry.attempts: must be ≥ 1, not 0"
    anonymous = Problem(ERROR, "f.yaml", 3, None, "jobs[1].id", "bad", "fix it")
    assert anonymous.format() == "f.yaml:3: error: jobs[1].id: bad (hint: fix it)"


def test_a_validated_job_is_placed_by_the_identity_formulas():
    any_job = the_job(JOB)
    each_job = the_job(job("run_on: each"))
    assert occurrence.placement(any_job, "web1").key == "nightly"
    assert occurrence.placement(each_job, "web1").key == "nightly@web1"
    assert occurrence.placement(each_job, "web1").offset_s == occurrence.jitter_offset("nightly@web1", 300)
    assert 0 <= occurrence.placement(any_job, None).offset_s < 300


def test_the_field_table_covers_the_job_spec():
    from dataclasses import fields

    from chronod.core.model import JobSpec

    internal = {"max_silence_explicit", "source_file", "source_line"}
    assert {f.name for f in FIELDS} == {f.name for f in fields(JobSpec)} - internal


@pytest.mark.parametrize(
    "schedule, zone",
    [
        ("30 2 * * *", "America/New_York"),
        ("30 1 * * *", "America/New_York"),
        ("0 3 * * *", "America/New_York"),
        ("15 2 * * sun", "Europe/Berlin"),
        ("0 2,3 * * *", "Europe/London"),
        ("0 0 30 12 *", "Pacific/Apia"),
        ("45 1 * * *", "Australia/Lord_Howe"),
        ("0 9 * * *", "Europe/Paris"),
    ],
)
def test_dst_warnings_are_exactly_the_schedules_own_dst_events(schedule, zone):
    from chronod.core.schedule import compile_schedule

    for now in (NOW, datetime(2011, 6, 1, tzinfo=timezone.utc)):
        text = job(f"timezone: {zone}").replace('"0 4 * * *"', f'"{schedule}"')
        found = [p.message for p in validate_document(parse_text(text, "j.yaml"), now=now).problems]
        events = compile_schedule(schedule, zone).dst_events(now, now + timedelta(days=366))
        assert len(found) == len(events) and all(e.effect in m for e, m in zip(events, found))


def test_a_fall_back_repeat_is_warned_about_too():
    result = check(job("timezone: America/New_York").replace('"0 4 * * *"', '"30 1 * * *"'))
    assert "fall-back" in at(result, "jobs[0].schedule", WARNING).message


# --- DST policy -------------------------------------------------------------------------------


def _dst_job(schedule: str, extra: str = "", zone: str = "America/New_York") -> str:
    return job(f"timezone: {zone}\n{extra}").replace('"0 4 * * *"', f'"{schedule}"')


def test_the_dst_policy_defaults_to_crons_behaviour():
    spec = the_job(_dst_job("30 2 * * *"))
    assert (spec.dst_gap, spec.dst_repeat) == ("shift", "first")


def test_a_dst_policy_is_kept_on_the_spec_and_survives_the_store_round_trip():
    from chronod.core.model import JobSpec

    spec = the_job(_dst_job("30 1 * * *", "dst_gap: skip\ndst_repeat: both"))
    assert (spec.dst_gap, spec.dst_repeat) == ("skip", "both")
    assert JobSpec.from_json_dict(spec.to_json_dict()) == spec


def test_a_spec_stored_before_the_dst_policy_existed_reads_with_the_defaults():
    from chronod.core.model import JobSpec

    d = the_job(JOB).to_json_dict()
    del d["dst_gap"], d["dst_repeat"]
    assert (JobSpec.from_json_dict(d).dst_gap, JobSpec.from_json_dict(d).dst_repeat) == ("shift", "first")


@pytest.mark.parametrize("field, value, hint", [("dst_gap", "skipp", "'skip'"), ("dst_repeat", "twice", "first")])
def test_an_unknown_dst_policy_is_an_error_naming_the_choices(field, value, hint):
    result = check(_dst_job("30 2 * * *", f"{field}: {value}"))
    problem = at(result, f"jobs[0].{field}")
    assert problem.line == 8 and hint in problem.hint + problem.message


def test_a_spring_forward_warning_names_dst_gap_and_an_explicit_dst_gap_silences_it():
    unset = at(check(_dst_job("30 2 * * *")), "jobs[0].schedule", WARNING)
    assert "spring-forward" in unset.message and "dst_gap" in unset.hint
    for value in ("shift", "skip"):
        assert warnings(check(_dst_job("30 2 * * *", f"dst_gap: {value}"))) == []
    # the other field does not answer this question
    assert warnings(check(_dst_job("30 2 * * *", "dst_repeat: both")))


def test_a_fall_back_warning_names_dst_repeat_and_an_explicit_dst_repeat_silences_it():
    unset = at(check(_dst_job("30 1 * * *")), "jobs[0].schedule", WARNING)
    assert "fall-back" in unset.message and "dst_repeat" in unset.hint
    for value in ("first", "last", "both"):
        assert warnings(check(_dst_job("30 1 * * *", f"dst_repeat: {value}"))) == []
    assert warnings(check(_dst_job("30 1 * * *", "dst_gap: skip")))


def test_a_dst_policy_in_the_file_defaults_counts_as_explicit():
    text = _dst_job("30 1 * * *").replace("jobs:\n", "defaults:\n  dst_repeat: last\njobs:\n", 1)
    result = check(text)
    assert warnings(result) == [] and the_job(text).dst_repeat == "last"


def test_the_warning_says_what_the_chosen_policy_does_not_what_cron_does():
    text = _dst_job("30 1 * * *", "dst_gap: skip")  # dst_repeat still unset: warned, with the default's effect
    assert "fires only the first time" in at(check(text), "jobs[0].schedule", WARNING).message


def test_a_clock_correction_is_named_whatever_the_policy():
    text = _dst_job("0 12 * * *", "dst_gap: skip\ndst_repeat: both", zone="Pacific/Apia")
    found = validate_document(parse_text(text, "j.yaml"), now=datetime(2011, 6, 1, tzinfo=timezone.utc))
    assert [p for p in found.problems if "clock-correction" in p.message]


@pytest.mark.parametrize("schedule", ["*/30 1 * * *", "@every 1h", "@reboot", "0 * * * *"])
def test_a_dst_policy_on_a_schedule_that_cannot_use_it_is_a_warning(schedule):
    result = check(_dst_job(schedule, "dst_repeat: both"))
    problem = at(result, "jobs[0].dst_repeat", WARNING)
    assert "no effect" in problem.message and problem.hint == "remove dst_repeat"
    assert not errors(result)


def test_a_dst_policy_in_defaults_is_not_warned_about_on_wildcard_jobs():
    text = _dst_job("*/30 1 * * *").replace("jobs:\n", "defaults:\n  dst_repeat: both\njobs:\n", 1)
    assert warnings(check(text)) == []


# --- retention ------------------------------------------------------------------------------


def test_history_days_defaults_to_400_and_a_files_defaults_set_it_for_every_job():
    assert the_job(JOB).history_days == 400
    text = JOB.replace("jobs:\n", "defaults:\n  history_days: 90\njobs:\n", 1)
    assert the_job(text).history_days == 90
    assert (
        the_job(
            text.replace(
                "    idempotency_class: idempotent\n", "    idempotency_class: idempotent\n    history_days: 7\n"
            )
        ).history_days
        == 7
    )


@pytest.mark.parametrize("value, words", [(0, "≥ 1"), (40000, "≤ 36600"), ('"30d"', "number")])
def test_history_days_out_of_bounds_is_an_error(value, words):
    problem = at(check(job(f"history_days: {value}")), "jobs[0].history_days")
    assert words in problem.message
