"""Environment lines against what Debian's real cron daemon gave its jobs (no cron needed).

tests/fixtures/cron_env/cases.json was recorded by tests/realcron/run_env_cases.py: every
case ran as its own /etc/cron.d file under Debian's cron, each job wrote the environment and
working directory it was started with. Here each case is read by the importer again: the
file must be refused exactly when cron ignored it, the environment cron gives each job
(chronoctl.importer.cron_environment) must be what the daemon gave, and the imported job
must get every variable from chronod too, except those chrono cannot carry, which the
check names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chronoctl.crontab import parse_crontab
from chronoctl.importer import (
    Account,
    ImportOptions,
    build_job,
    check_given,
    chrono_environment,
    cron_environment,
    cron_workdir,
    pam_environment,
)
from tests.realcron.env_cases import JOB, generate
from tests.realcron.run_env_cases import USER_ALL, case_file

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "cron_env" / "cases.json").read_text())
CASES = FIXTURE["cases"]
ROOT = Account("root", 0, FIXTURE["home"], "/bin/bash")
PAM = pam_environment(FIXTURE["pam_environment"], FIXTURE["pam_locale"])


def _exists(path: str) -> bool:
    return not path.startswith("/chrono-no-such")  # the one HOME the cases name that no host has


OPTIONS = ImportOptions(pam_env=PAM, account_of=lambda user: ROOT if user == "root" else None, dir_exists=_exists)


class _Case:
    def __init__(self, doc: dict):
        self.id, self.lines = doc["id"], tuple(doc["lines"])


def _parse(doc: dict):
    if doc["id"] == USER_ALL:  # root's spool crontab: no user field
        text = case_file(_Case(doc), Path("/out"), None)
        parsed = parse_crontab(text, "/var/spool/cron/crontabs/root", "user", "root")
        return parsed, list(parsed.entries[1:])
    text = case_file(_Case(doc), Path("/out"))  # the file exactly as cron read it, its first-line job included
    parsed = parse_crontab(text, f"/etc/cron.d/chronoenv-{doc['id']}", "system")
    return parsed, list(parsed.entries[1:])  # entries[0] is the job that shows cron read the file


def test_the_fixture_has_at_least_200_cases_and_the_generator_still_makes_them():
    assert len(CASES) >= 200
    recorded = {c["id"]: c["lines"] for c in CASES}
    for case in generate():
        assert recorded.get(case.id) == list(case.lines), f"{case.id}: regenerate the fixture"
    assert sum(1 for c in CASES if not c["file_read"]) >= 20  # refused lines are covered too


@pytest.mark.parametrize("doc", CASES, ids=[c["id"] for c in CASES])
def test_the_importer_gives_each_job_the_environment_debian_cron_gave_it(doc):
    parsed, entries = _parse(doc)
    assert (parsed.ignored_by_cron is None) == doc["file_read"], (doc["lines"], parsed.errors)
    if not doc["file_read"]:
        assert all(e.file_ignored for e in parsed.entries)
        return
    assert len(entries) == len(doc["jobs"]) == sum(1 for ln in doc["lines"] if ln == JOB)
    for entry, seen in zip(entries, doc["jobs"]):
        assert seen is not None, "cron read the file but did not start this job"
        cron = cron_environment(entry, ROOT, PAM)
        assert cron == seen["env"]
        assert cron_workdir(cron, _exists) == seen["cwd"]
        job = build_job(entry, "x", OPTIONS)
        chrono = chrono_environment(job, ROOT)
        differ = {name for name in seen["env"] if chrono.get(name) != seen["env"][name]}
        assert all(
            not (name.isidentifier() and name.isascii()) or name.upper().startswith("CHRONO_") for name in differ
        ), f"chrono could carry {differ}"
        given = check_given(entry, job, OPTIONS)
        assert len(given.environment) == len(differ), given.environment
        assert job.get("workdir") == seen["cwd"]
        assert given.command == () and given.stdin == ()


def test_the_bug_reports_file_imports_with_the_values_the_daemon_used():
    text = (
        "GREETING='  hello world  '\nDQ=\"  two  \"\nUNQ=abc   \nNOTE=daily run # not a comment\n"
        '* * * * * root echo "[$GREETING][$DQ][$UNQ][$NOTE]" >> /tmp/out\n'
    )
    job = build_job(parse_crontab(text, "/etc/cron.d/f", "system").entries[0], "x", OPTIONS)
    assert {k: job["env"][k] for k in ("GREETING", "DQ", "UNQ", "NOTE")} == {
        "GREETING": "  hello world",
        "DQ": "  two",
        "UNQ": "abc",
        "NOTE": "daily run # not a comment",
    }
    assert (
        next(c for c in CASES if c["what"] == "a file whose quoted values end in blanks")["jobs"][0]["env"]["GREETING"]
        == "  hello world"
    )


@pytest.mark.parametrize("case_id", ["all", USER_ALL])
def test_the_file_with_every_case_gives_its_one_job_what_the_daemon_gave(case_id):
    # the same lines as one /etc/cron.d file and as root's spool crontab
    doc = next(c for c in CASES if c["id"] == case_id)
    assert doc["file_read"] and len(doc["lines"]) > 200
    parsed, entries = _parse(doc)
    assert parsed.ignored_by_cron is None
    assert cron_environment(entries[-1], ROOT, PAM) == doc["jobs"][-1]["env"]


@pytest.mark.parametrize(
    "uid, name, shell", [(0, "root", "/bin/bash"), (1000, "alice", ""), (33, "www-data", "/usr/sbin/nologin")]
)
def test_the_importers_picture_of_chronods_environment_is_the_runners(uid, name, shell):
    import pwd
    from types import SimpleNamespace

    from chronod.runner.runner import job_environment

    passwd = pwd.struct_passwd((name, "x", uid, uid, "", f"/home/{name}", shell))
    job = {"env": {"SHELL": "/bin/sh", "PATH": "/usr/bin:/bin", "A": "1"}}
    runner = job_environment(passwd, SimpleNamespace(env=tuple(job["env"].items())), {})
    assert chrono_environment(job, Account(name, uid, f"/home/{name}", shell)) == runner
    assert chrono_environment({}, Account(name, uid, f"/home/{name}", shell)) == job_environment(
        passwd, SimpleNamespace(env=()), {}
    )


def test_the_check_names_what_chrono_cannot_carry_and_a_crlf_command():
    text = "A-B=x\n=nameless\nCHRONO_RUN_ID=mine\nLOGNAME=bob\n0 1 * * * root cat%a\r\n"
    entry = parse_crontab(text, "/etc/cron.d/f", "system").entries[0]
    job = build_job(entry, "x", OPTIONS)
    given = check_given(entry, job, OPTIONS)
    assert "LOGNAME" not in job["env"] and "A-B" not in job["env"] and "CHRONO_RUN_ID" not in job["env"]
    assert [w.split(":")[0] for w in given.environment] == [
        "cron gives A-B='x', chrono nothing",
        "cron gives a nameless variable ('nameless', from a line '=value')",
        "cron gives CHRONO_RUN_ID='mine', chrono nothing",
    ]
    assert given.command == () and "carriage return" in given.stdin[0]  # cron's input is "a\r\n"
    assert given.as_json()["environment"]["same"] is False and given.as_json()["stdin"]["same"] is False
    crlf = parse_crontab("0 1 * * * root true\r\n", "/etc/cron.d/f", "system").entries[0]
    assert "carriage return" in check_given(crlf, build_job(crlf, "x", OPTIONS), OPTIONS).command[0]


def test_adopting_defaults_says_which_of_crons_defaults_the_job_loses():
    entry = parse_crontab("0 1 * * * root true\n", "/etc/cron.d/f", "system").entries[0]
    adopted = ImportOptions(adopt_defaults=True, pam_env=PAM, account_of=OPTIONS.account_of, dir_exists=_exists)
    given = check_given(entry, build_job(entry, "x", adopted), adopted)
    lost = sorted(w.split("=")[0].removeprefix("cron gives ") for w in given.environment)
    assert lost == ["CHRONOENV_PAM", "CHRONOENV_PAMQ", "CHRONOENV_PAMX", "LANG", "PATH", "SHELL"]
    assert all("--adopt-defaults" in w for w in given.environment)
    same = check_given(entry, build_job(entry, "x", OPTIONS), OPTIONS)
    assert same.environment == () and same.chrono_adds[0] == "USER=root"


def test_debian_cron_schedules_in_the_hosts_zone_whatever_cron_tz_says_and_the_check_says_so():
    # the daemon ran the job due at the minute in the host's time, not the one due in CRON_TZ's (or TZ's)
    assert FIXTURE["zones"]["ran"] == {"CRON_TZ": ["host"], "TZ": ["host"]}
    from datetime import UTC, datetime

    from chronoctl.importer import compare_with_cron
    from chronod.core.schedule import compile_schedule

    entry = parse_crontab("CRON_TZ=Asia/Tokyo\n30 2 * * * root x\n", "f", "system").entries[0]
    now = datetime(2026, 1, 10, tzinfo=UTC)
    fires = compile_schedule(entry.schedule, "Asia/Tokyo").fires
    eq = compare_with_cron("root-x", entry, "Asia/Tokyo", now, fires, cron_tz="UTC")
    assert len(eq.differences) >= 400 and eq.differences[0].cron == ("2026-01-10T02:30Z (11:30 JST)",)
    assert compare_with_cron("root-x", entry, "Asia/Tokyo", now, fires, cron_tz="Asia/Tokyo").differences == []


def test_mailto_notes_say_what_cron_did_with_the_output():
    from chronoctl.importer import entry_notes

    def note(text: str) -> str:
        entry = parse_crontab(text + "0 1 * * * root true\n", "f", "system").entries[0]
        return next(n for n in entry_notes(entry, OPTIONS) if n.startswith("MAILTO"))

    assert "cron mailed nothing" in note('MAILTO=""\n')
    assert "mailed the job's output there" in note("MAILTO = ops@example.com \n") and "'ops@example.com'" in note(
        "MAILTO = ops@example.com \n"
    )


def test_a_user_without_a_passwd_entry_or_without_a_lookup_is_said_not_compared():
    entry = parse_crontab("0 1 * * * nobody-here true\n", "/etc/cron.d/f", "system").entries[0]
    job = build_job(entry, "x", OPTIONS)
    assert "not in this host's passwd" in check_given(entry, job, OPTIONS).environment[0]
    assert "not compared" in check_given(entry, job, ImportOptions()).environment[0]
