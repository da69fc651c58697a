"""--flavor: busybox's crond (Alpine) and cronie read crontabs by rules of their own; the import
keeps what each did, guessed from the path when not said."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chronoctl.cmd_import import Source, flavor_of, run_import
from chronoctl.crontab import parse_busybox
from chronoctl.importer import ImportOptions
from chronod.core import busybox
from chronod.core.schedule import compile_schedule
from chronod.core.vixie import minutes_of

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)


def test_busybox_reads_fields_by_its_own_rules():
    assert [i for i, v in enumerate(busybox.parse_field("*/2", 32)) if v][:3] == [0, 2, 4]  # from index 0
    assert [i for i, v in enumerate(busybox.parse_field("22-2", 24)) if v] == [0, 1, 2, 22, 23]  # wraps
    assert busybox.chrono_schedule(busybox.parse_line("0 2 */2 * *".split())).split()[2].startswith("2,4,6")
    line = busybox.parse_line("0 0 */2 * mon".split())  # both day fields used: OR, as busybox does
    assert line.days and line.dows == frozenset({1})
    with pytest.raises(busybox.BusyboxParseError):
        busybox.parse_line("0 0 * * monday".split())


@pytest.mark.parametrize("expr", ["30 2 * * *", "*/20 1-2 * * *", "0 0,1,2 * * *", "0 2 */2 * mon", "15 22-2 * * 1-5"])
@pytest.mark.parametrize(("zone", "around"), [("America/New_York", "2027-03-14"), ("America/New_York", "2027-11-07")])
def test_the_imported_schedule_fires_when_busybox_would_across_clock_changes(expr, zone, around):
    line = busybox.parse_line(expr.split())
    start = datetime.fromisoformat(around).replace(tzinfo=UTC) - timedelta(days=3)
    end = start + timedelta(days=6)
    ours = compile_schedule(busybox.chrono_schedule(line), zone, "skip", "both").fires(start, end)
    assert minutes_of(ours) == busybox.simulate(line, zone, start, end)


def test_a_busybox_crontab_keeps_percent_cuts_at_hash_and_skips_other_settings():
    text = "FOO=bar\nSHELL=/bin/ash\n0 * * * * date +%F > /tmp/d # stamp\n@daily /bin/daily\n"
    parsed = parse_busybox(text, "/etc/crontabs/root", "root")
    assert [(e.command, e.stdin, dict(e.env)) for e in parsed.entries][0] == (
        "date +%F > /tmp/d",
        None,
        {"SHELL": "/bin/ash"},
    )
    assert parsed.entries[1].schedule == "0 0 * * *"
    assert any("FOO=bar" in n for n in parsed.notes)
    result = run_import(
        [Source("/etc/crontabs/root", text, "user", "root", "imported-crontab-root.yaml", flavor="busybox")],
        ImportOptions(host_timezone="America/New_York"),
        NOW,
    )
    hourly, daily = result.jobs
    assert (hourly["overlap"], "dst_gap" in hourly) == ("forbid", False)  # a wildcard job follows the wall clock
    assert (daily["overlap"], daily["dst_gap"], daily["dst_repeat"]) == ("forbid", "skip", "both")
    assert "stdin" not in hourly and result.differences == []


def test_cronie_honours_cron_tz_where_debian_does_not():
    text = "CRON_TZ=Asia/Tokyo\n0 9 * * * root /bin/report\n"
    opts = ImportOptions(host_timezone="Europe/London")
    debian = run_import([Source("/etc/cron.d/r", text, "system", None, "r.yaml")], opts, NOW)
    cronie = run_import([Source("/etc/cron.d/r", text, "system", None, "r.yaml", flavor="cronie")], opts, NOW)
    assert debian.differences and not cronie.differences
    assert not any("CRON_TZ" in n for n in cronie.jobs[0]["notes"])


def test_the_flavor_is_guessed_from_the_path_and_said():
    assert flavor_of(Path("/etc/crontabs/root"), None) == ("busybox", True)
    assert flavor_of(Path("/var/spool/cron/alice"), None) == ("cronie", True)
    assert flavor_of(Path("/var/spool/cron/crontabs/alice"), None) == ("debian", False)
    assert flavor_of(Path("/etc/crontabs/root"), "debian") == ("debian", False)
