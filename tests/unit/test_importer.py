"""Entries become jobs that keep cron's behaviour, with stable ids and a check against cron."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from chronoctl.cmd_import import Source, run_import
from chronoctl.crontab import parse_crontab
from chronoctl.importer import (
    ImportOptions,
    assign_ids,
    build_job,
    command_name,
    compare_with_cron,
    entry_notes,
    registry_file_name,
    registry_yaml,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "crontabs"
NOW = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)
OPTIONS = ImportOptions(host_timezone="Europe/London")


def entries(name: str, fmt: str = "system", user: str | None = None):
    return parse_crontab((FIXTURES / name).read_text(), f"/etc/cron.d/{name}", fmt, user).entries


@pytest.mark.parametrize(
    "command, name",
    [
        ("cd / && run-parts --report /etc/cron.hourly", "run-parts-cron-hourly"),
        ("test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }", "run-parts-cron-daily"),
        ("/usr/bin/php /var/www/cron.php", "php-cron"),
        ("php -f /var/www/html/wp-cron.php > /dev/null 2>&1", "php-wp-cron"),
        (
            "[ -x /usr/lib/php/sessionclean ] && if [ ! -d /run/systemd/system ]; then /usr/lib/php/sessionclean; fi",
            "sessionclean",
        ),
        ("test -e /run/systemd/system || SERVICE_MODE=1 /sbin/e2scrub_all -A -r", "e2scrub_all"),
        ("flock -n /run/lock/x.lock nice -n 19 /usr/local/bin/pg-backup.sh --verify", "pg-backup"),
        ("cd /srv/app && ./bin/backup-db.sh >> /var/log/b.log 2>&1", "backup-db"),
        ("command -v debian-sa1 > /dev/null && debian-sa1 1 1", "debian-sa1"),
        ("/usr/sbin/invoke-rc.d anacron start", "invoke-rc.d-anacron"),
        # certbot's, mdadm's and geoipupdate's cron.d lines: inline perl, $( ) and grep -q are not the job
        (
            "test -x /usr/bin/certbot -a \\! -d /run/systemd/system && perl -e 'sleep int(rand(43200))' && certbot -q renew",
            "certbot",
        ),
        (
            "if [ -x /usr/share/mdadm/checkarray ] && [ $(date +%d) -le 7 ]; then /usr/share/mdadm/checkarray --cron; fi",
            "checkarray",
        ),
        (
            "test -x /usr/bin/geoipupdate && /usr/bin/grep -Eq '^AccountID' /etc/GeoIP.conf && /usr/bin/geoipupdate",
            "geoipupdate",
        ),
        ('d=$({ cat /etc/munin/munin.conf || true; } | tail -1); if [ -d "$d" ]; then find "$d/" -delete; fi', "find"),
        (
            "/bin/sh -lc 'cd /opt/app && bundle exec rake signatures:dedupe' >>/var/log/cron.log 2>&1",
            "rake-signatures:dedupe",
        ),
        ("sh -c '/usr/local/bin/backup.sh --full'", "backup"),
    ],
)
def test_job_names_come_from_the_meaningful_word_of_the_command(command, name):
    assert command_name(command) == name


def test_ids_are_user_and_command_slugified_and_unique_in_file_order():
    ids = assign_ids(entries("backup"))
    assert ids == ["postgres-pg-backup", "postgres-pg-backup-2", "root-pg-backup", "root-pg-backup-2"]


def test_ids_are_the_same_on_every_reimport_and_avoid_ids_taken_elsewhere():
    first = assign_ids(entries("kitchen-sink"))
    assert first == assign_ids(entries("kitchen-sink"))
    assert "root-backup-db" in first and "www-data-php-cron" in first
    again = assign_ids(entries("kitchen-sink"), taken={"root-backup-db"})
    assert again[0] == "root-backup-db-2"


def test_a_job_keeps_crons_behaviour_by_default():
    head = "".join((FIXTURES / "kitchen-sink").read_text().splitlines(keepends=True)[:14])  # before its bad lines
    entry = parse_crontab(head, "/etc/cron.d/kitchen-sink", "system").entries[-1]
    assert entry.line == 14
    job = build_job(entry, "root-mail", ImportOptions(host_timezone="Europe/London", owner="ops"))
    assert job == {
        "id": "root-mail",
        "owner": "ops",
        "schedule": "0 6 * * *",
        "timezone": "Europe/London",
        "command": 'mail -s "daily report" ops',
        "stdin": "Hello,\ntoday is fine.\nBye % done\n",
        "user": "root",
        "shell": "/bin/bash",
        # cron gives the job SHELL too: chrono would give the user's login shell
        "env": {
            "SHELL": "/bin/bash",
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "MAILTO": "ops@example.com",
            "GREETING": "hello world",
        },
        "idempotency_class": "unsafe",
        "tolerance_s": 0,
        "tolerance_reason": "imported from /etc/cron.d/kitchen-sink:14; cron fires on the minute",
        "overlap": "allow",
        "catchup": "none",
        "run_on": "each",
    }


def test_adopting_defaults_leaves_the_policy_keys_out_and_cron_path_is_only_added_to_preserve():
    entry = entries("user-alice", "user", "alice")[0]
    kept = build_job(entry, "alice-check-mail", OPTIONS)
    adopted = build_job(entry, "alice-check-mail", ImportOptions(host_timezone="UTC", adopt_defaults=True))
    assert kept["env"]["PATH"] == "/usr/bin:/bin" and kept["env"]["SHELL"] == "/bin/sh"
    assert not {"tolerance_s", "overlap", "catchup", "run_on", "tolerance_reason"} & set(adopted)
    assert "PATH" not in adopted["env"] and "SHELL" not in adopted["env"]


def test_the_zone_is_cron_tz_when_set_else_the_hosts():
    by_line = {e.line: build_job(e, "x", OPTIONS)["timezone"] for e in entries("kitchen-sink")}
    assert by_line[8] == "Europe/London" and by_line[21] == "America/New_York"


def test_registry_yaml_round_trips_and_points_at_each_source_line():
    es = entries("kitchen-sink")
    ids = assign_ids(es)
    jobs = [(e, build_job(e, i, OPTIONS)) for e, i in zip(es, ids)]
    text = registry_yaml("/etc/cron.d/kitchen-sink", jobs)
    assert yaml.safe_load(text) == {"jobs": [j for _, j in jobs]}
    assert "  # source: /etc/cron.d/kitchen-sink:14\n" in text
    assert "schedule: '@reboot'" in text


def test_strings_yaml_would_misread_are_quoted():
    entry = parse_crontab("NO=no\nOCT=0755\n0 5 * * * yes true\n", "f", "system").entries[0]
    text = registry_yaml("f", [(entry, build_job(entry, "yes-true", OPTIONS))])
    job = yaml.safe_load(text)["jobs"][0]
    assert (job["user"], job["env"]["NO"], job["env"]["OCT"], job["command"]) == ("yes", "no", "0755", "true")


@pytest.mark.parametrize(
    "source, user, name",
    [
        ("/etc/crontab", None, "imported-etc-crontab.yaml"),
        ("/etc/cron.d/php", None, "imported-cron.d-php.yaml"),
        ("/var/spool/cron/crontabs/alice", "alice", "imported-crontab-alice.yaml"),
        ("-", "bob", "imported-crontab-bob.yaml"),
    ],
)
def test_one_registry_file_per_source_file(source, user, name):
    assert registry_file_name(source, user) == name


def test_the_equivalence_check_agrees_with_cron_across_new_york_dst():
    entry = parse_crontab("CRON_TZ=America/New_York\n30 2 * * * root x\n", "f", "system").entries[0]
    from chronod.core.schedule import compile_schedule

    eq = compare_with_cron(
        "root-x", entry, "America/New_York", NOW, compile_schedule(entry.schedule, "America/New_York").fires
    )
    assert (eq.compared, eq.fires, eq.differences) == ("full", 400, [])


def test_the_equivalence_check_prints_the_dates_where_chrono_differs():
    entry = parse_crontab("30 2 * * * root x\n", "f", "system").entries[0]

    def one_hour_late(start, end):
        from datetime import timedelta

        from chronod.core.schedule import compile_schedule

        return [t + timedelta(hours=1) for t in compile_schedule("30 2 * * *", "UTC").fires(start, end)][:2]

    eq = compare_with_cron("root-x", entry, "UTC", NOW, one_hour_late)
    assert eq.differences[0].date == "2026-01-11"
    assert eq.differences[0].cron == ("2026-01-11T02:30Z (02:30 UTC)",)
    assert eq.differences[0].chrono == ("2026-01-11T03:30Z (03:30 UTC)",)
    assert "on 2026-01-11: cron only 2026-01-11T02:30Z" in eq.differences[0].message()


def test_the_jobs_of_a_file_cron_ignores_are_imported_disabled_and_say_why():
    text = "0 1 * * * root /usr/local/bin/good\n60 * * * * root /usr/local/bin/bad\n"
    entry = parse_crontab(text, "/etc/cron.d/f", "system").entries[0]
    job = build_job(entry, "root-good", OPTIONS)
    assert job["enabled"] is False
    note = next(n for n in entry_notes(entry, OPTIONS) if n.startswith("imported disabled"))
    assert "because of line 2" in note and "never ran under cron" in note
    assert compare_with_cron("root-good", entry, "UTC", NOW, lambda a, b: []).compared.startswith(
        "skipped (cron ignores"
    )
    assert "enabled" not in build_job(parse_crontab(text[:35], "f", "system").entries[0], "x", OPTIONS)


def test_importing_a_file_cron_ignores_starts_none_of_its_jobs():
    result = run_import(
        [Source("ks", (FIXTURES / "kitchen-sink").read_text(), "system", None, "imported-ks.yaml")], OPTIONS, NOW
    )
    assert len(result.jobs) == 14 and {j["enabled"] for j in result.jobs} == {False}
    assert [e["line"] for e in result.errors] == [25, 26, 27, 28, 31]
    assert all(yaml.safe_load(result.files["imported-ks.yaml"])["jobs"][i]["enabled"] is False for i in range(14))


def test_reboot_jobs_are_not_compared():
    entry = parse_crontab("@reboot root x\n", "f", "system").entries[0]
    assert compare_with_cron("root-x", entry, "UTC", NOW, lambda a, b: []).compared.startswith("skipped")


def test_a_whole_import_reports_jobs_errors_disabled_and_risky_dst_jobs():
    src = Source("dst", (FIXTURES / "dst").read_text(), "system", None, "imported-dst.yaml")
    result = run_import([src], OPTIONS, NOW)
    assert [j["id"] for j in result.jobs] == [
        "root-two-thirty",
        "root-one-thirty",
        "root-every-minute-of-two",
        "root-hourly",
        "root-lord-howe",
    ]
    assert result.errors == [
        {
            "file": "dst",
            "line": 9,
            "message": "unknown time zone 'Not/AZone' (CRON_TZ/TZ above this line)",
            "hint": "use an IANA name such as Europe/Paris",
        }
    ]
    assert {r["id"] for r in result.risky} == {"root-two-thirty", "root-one-thirty", "root-lord-howe"}
    # Debian's cron schedules these in the host's zone (Europe/London here), not CRON_TZ's:
    # only the hourly job starts at the same instants in both
    assert {d.job_id for d in result.differences} == {
        "root-two-thirty",
        "root-one-thirty",
        "root-every-minute-of-two",
        "root-lord-howe",
    }
    assert list(result.files) == ["imported-dst.yaml"]


def test_many_jobs_in_the_same_minute_are_flagged():
    text = "".join(f"0 3 * * * root /usr/local/bin/job{i}\n" for i in range(12))
    result = run_import([Source("f", text, "system", None, "imported-f.yaml")], OPTIONS, NOW)
    assert result.crowded == [("03:00", 12)]


# Real /etc/cron.d files from Debian 12 packages (tests/fixtures/crontabs/debian/README):
# (file, [(line, user, schedule)], disabled lines, what else must hold)
DEBIAN_FILES = [
    (
        "certbot",
        [(17, "root", "0 */12 * * *")],
        [],
        lambda jobs: "perl -e 'sleep int(rand(43200))'" in jobs[0]["command"] and jobs[0]["id"] == "root-certbot",
    ),
    (
        "mdadm",
        [(12, "root", "57 0 * * 0")],
        [],  # \% -> %
        lambda jobs: "$(date +%d) -le 7" in jobs[0]["command"] and jobs[0]["id"] == "root-checkarray",
    ),
    (
        "tiger",
        [(9, "root", "0 * * * *")],
        [],
        lambda jobs: (
            {k: jobs[0]["env"][k] for k in ("DEFAULT", "NICETIGER")}
            == {"DEFAULT": "/etc/default/tiger", "NICETIGER": "10"}
        ),
    ),
    ("cacti", [(2, "www-data", "*/5 * * * *")], [9], lambda jobs: jobs[0]["env"]["MAILTO"] == "root"),
    (
        "munin",
        [
            (7, "munin", "*/5 * * * *"),
            (8, "munin", "14 10 * * *"),
            (11, "munin", "27 03 * * *"),
            (12, "www-data", "32 03 * * *"),
        ],
        [],
        lambda jobs: jobs[2]["command"].startswith("htmldir=$({ cat "),
    ),
    (
        "sysstat",
        [(6, "root", "5-55/10 * * * *"), (9, "root", "59 23 * * *")],
        [],
        lambda jobs: jobs[0]["env"]["PATH"].startswith("/usr/lib/sysstat:"),
    ),
    ("anacron", [(6, "root", "30 7-23 * * *")], [], lambda jobs: jobs[0]["id"] == "root-invoke-rc.d-anacron"),
    (
        "e2scrub_all",
        [(1, "root", "30 3 * * 0"), (2, "root", "10 3 * * *")],
        [],
        lambda jobs: [j["id"] for j in jobs] == ["root-e2scrub-all-cron", "root-e2scrub-all"],
    ),
]


@pytest.mark.parametrize("name, expected, disabled, check", DEBIAN_FILES, ids=[d[0] for d in DEBIAN_FILES])
def test_debian_packaged_cron_d_files_import_as_cron_runs_them(name, expected, disabled, check):
    src = Source(
        f"/etc/cron.d/{name}", (FIXTURES / "debian" / name).read_text(), "system", None, f"imported-cron.d-{name}.yaml"
    )
    result = run_import([src], ImportOptions(host_timezone="Europe/Berlin"), NOW)
    assert result.errors == [] and result.differences == []
    assert [(j["source"]["line"], j["user"], j["schedule"]) for j in result.jobs] == expected
    assert all("enabled" not in j and j["timezone"] == "Europe/Berlin" for j in result.jobs)
    assert [d["line"] for d in result.disabled] == disabled
    assert check(result.jobs)


def test_a_line_for_a_user_this_host_lacks_says_cron_here_never_ran_it():
    # checked with Debian's cron daemon: a cron.d file naming an unknown user is ignored whole
    src = Source("/etc/cron.d/f", "0 1 * * * no-such-user-here /bin/true\n", "system", None, "imported-cron.d-f.yaml")
    job = run_import([src], OPTIONS, NOW).jobs[0]
    assert any("does not exist on this host" in n and "bad username" in n for n in job["notes"])


@pytest.mark.parametrize(
    "uid, mode, links, fragment",
    [
        (0, 0o100644, 1, None),
        (0, 0o100600, 1, None),
        (0, 0o100755, 1, None),
        (65534, 0o100644, 1, "WRONG FILE OWNER"),
        (0, 0o100664, 1, "INSECURE MODE"),
        (0, 0o100666, 1, "INSECURE MODE"),
        (0, 0o100644, 2, "HARD LINKS"),
    ],
)
def test_cron_refuses_a_system_file_by_its_owner_mode_and_links(uid, mode, links, fragment):
    # each case run under Debian's cron daemon: only the files with no problem ran
    import os

    from chronoctl.cmd_import import cron_file_problem

    st = os.stat_result((mode, 0, 0, links, uid, 0, 10, 0, 0, 0))
    problem = cron_file_problem(st)
    assert problem is None if fragment is None else fragment in problem


def test_a_file_cron_refuses_for_its_mode_is_imported_disabled_with_a_file_level_error():
    src = Source(
        "/etc/cron.d/f",
        "0 1 * * * root /bin/true\n",
        "system",
        None,
        "imported-cron.d-f.yaml",
        cron_ignores="it is group- or world-writable (cron logs INSECURE MODE)",
    )
    result = run_import([src], OPTIONS, NOW)
    assert [(e["line"], "INSECURE MODE" in e["message"]) for e in result.errors] == [(0, True)]
    assert result.jobs[0]["enabled"] is False
    assert any("INSECURE MODE" in n for n in result.jobs[0]["notes"])


def test_a_schedule_repeated_in_a_crontab_is_simulated_once(monkeypatch):
    from chronod.core import vixie
    from chronod.core.schedule import compile_schedule

    calls = []
    real = vixie.simulate
    monkeypatch.setattr(vixie, "simulate", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    text = "".join(f"17 5 * * 3 root /bin/task-{i}\n" for i in range(5)) + "17 5 * * 4 root /bin/other\n"
    results = [
        compare_with_cron(f"root-{e.line}", e, "Europe/Oslo", NOW, compile_schedule(e.schedule, "Europe/Oslo").fires)
        for e in parse_crontab(text, "f", "system").entries
    ]
    assert calls == ["17 5 * * 3", "17 5 * * 4"]
    assert [(r.compared, r.fires, r.differences) for r in results] == [("full", 57, [])] * 5 + [("full", 57, [])]


def test_jobs_a_clock_change_meets_say_crons_dst_behaviour_and_pass_strict_validation(tmp_path):
    from chronod.specfile import load_registry

    src = Source("dst", (FIXTURES / "dst").read_text(), "system", None, "imported-dst.yaml")
    result = run_import([src], OPTIONS, NOW)
    policy = {j["id"]: {k: j[k] for k in ("dst_gap", "dst_repeat") if k in j} for j in result.jobs}
    assert policy["root-two-thirty"] == {"dst_gap": "shift"}
    assert policy["root-one-thirty"] == {"dst_repeat": "first"}
    assert policy["root-every-minute-of-two"] == {} and policy["root-hourly"] == {}
    (tmp_path / "imported-dst.yaml").write_text(result.files["imported-dst.yaml"])
    loaded = load_registry(tmp_path, now=NOW, secure=False)
    assert [p.message for p in loaded.problems if "daylight" in p.message] == []
