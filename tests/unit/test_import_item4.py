"""What real crontabs showed the importer got wrong (a user field that can never be a user,
a bare %, Debian's crontab template, /etc/crontab with anacron installed), and what an
operator reads in a dry run (capped difference lines, folded notes, CRON_TZ on the host's
own zone under another name)."""

from __future__ import annotations

from datetime import datetime, timezone

from chronoctl.cmd_import import Source, fold_notes, run_import
from chronoctl.crontab import parse_crontab
from chronoctl.importer import Difference, ImportOptions, entry_notes, same_zone

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)
OPTIONS = ImportOptions(host_timezone="Etc/UTC")


def _import(text: str, name: str = "/etc/cron.d/app", options: ImportOptions = OPTIONS):
    return run_import([Source(name, text, "system", None, "imported-cron.d-app.yaml")], options, NOW)


def test_a_user_field_that_can_never_be_a_user_voids_the_file_as_debian_does():
    for user in (".", "..", ".hidden", "{", "*", "/usr/bin/env"):
        parsed = parse_crontab(f"0 5 * * * {user} /etc/environment && run\n0 6 * * * root true\n", "f", "system")
        assert parsed.ignored_by_cron, user
        assert "can never be a user name" in parsed.errors[0].message
    result = _import("0 5 * * * . /etc/environment && /usr/local/bin/report\n0 6 * * * root /bin/true\n")
    assert [j["enabled"] for j in result.jobs] == [False]  # the good line is imported, disabled


def test_a_bare_percent_is_said_per_job():
    entry = parse_crontab("0 * * * * root sleep $(( RANDOM % 600 ))m && /bin/report\n", "f", "system").entries[0]
    assert entry.command == "sleep $(( RANDOM" and entry.stdin is not None
    notes = entry_notes(entry, OPTIONS)
    assert any("cut at its first unescaped %" in n and "'sleep $(( RANDOM'" in n for n in notes)
    escaped = parse_crontab("0 * * * * root date +\\%F\n", "f", "system").entries[0]
    assert not any("unescaped %" in n for n in entry_notes(escaped, OPTIONS))


def test_the_crontab_e_template_example_is_not_a_disabled_job():
    template = (
        "# For example, you can run a backup of all your user accounts\n"
        "# at 5 a.m every week with:\n"
        "# 0 5 * * 1 tar -zcf /var/backups/home.tgz /home/\n"
        "#\n# m h  dom mon dow   command\n"
        "#0 4 * * * /usr/local/bin/old-backup\n"
    )
    parsed = parse_crontab(template, "crontabs/alice", "user", "alice")
    assert [d.text for d in parsed.disabled] == ["#0 4 * * * /usr/local/bin/old-backup"]


def test_debian_crontab_lines_name_what_anacron_runs_instead():
    line = "25 6 * * * root test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }\n"
    entry = parse_crontab(line, "/etc/crontab", "system").entries[0]
    with_anacron = ImportOptions(host_timezone="Etc/UTC", anacron_installed=True)
    assert any("anacron runs /etc/cron.daily instead" in n for n in entry_notes(entry, with_anacron))
    assert not any("anacron" in n for n in entry_notes(entry, OPTIONS))


def test_cron_tz_naming_the_hosts_zone_differently_is_no_difference():
    assert same_zone("UTC", "Etc/UTC") and same_zone("Asia/Calcutta", "Asia/Kolkata")
    assert not same_zone("UTC", "Europe/London") and not same_zone("UTC", "Nowhere/City")
    result = _import("CRON_TZ=UTC\n0 5 * * * root /bin/true\n")
    assert not any("CRON_TZ" in n for n in result.jobs[0]["notes"])
    assert result.differences == []


def test_a_difference_line_shows_its_first_instants_and_how_many_more():
    d = Difference("j", "f:1", "2026-01-11", tuple(f"2026-01-11T00:{m:02d}Z" for m in range(60)), ())
    line = d.message()
    assert "and 57 more" in line and len(line) < 200


def test_a_note_many_jobs_share_is_said_once():
    jobs = [{"id": f"root-job{i}", "notes": ["MAILTO='ops': cron mailed", f"own {i}"]} for i in range(5)]
    folded = fold_notes(jobs)
    assert folded.count("root-job0, root-job1, root-job2 and 2 more (5 jobs): MAILTO='ops': cron mailed") == 1
    assert "root-job4: own 4" in folded and len(folded) == 6


def test_every_input_is_read_up_to_one_mebibyte(tmp_path):
    import pytest

    from chronoctl.cmd_import import collect_sources
    from chronoctl.errors import UsageError
    from chronoctl.limits import LIMIT

    with pytest.raises(UsageError, match="larger than 1024 KiB"):
        collect_sources("/dev/zero", "system", None)
    big = tmp_path / "big"
    big.write_bytes(b"#" * (LIMIT + 1))
    with pytest.raises(UsageError, match="larger than"):
        collect_sources(str(big), "system", None)
    ok = tmp_path / "ok"
    ok.write_bytes(b"# " + b"x" * (LIMIT - 3) + b"\n")
    assert collect_sources(str(ok), "system", None)[0].text.startswith("# x")
