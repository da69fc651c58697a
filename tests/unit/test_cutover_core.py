"""The pure part of `import --cutover` / `--rollback`: the switch window, backup names,
commenting lines out byte for byte, and deciding what a rollback still has to do."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from chronoctl import cutover as co
from chronoctl.crontab import parse_crontab
from chronoctl.errors import CliError

M = datetime(2026, 3, 8, 9, 41, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return M + timedelta(seconds=seconds)


@pytest.mark.parametrize("second", [5, 5.001, 20, 44.999])
def test_a_switch_inside_the_window_starts_at_once(second):
    assert co.switch_start(at(second)) == at(second)


@pytest.mark.parametrize("second", [0, 0.5, 4.999])
def test_a_switch_just_after_the_minute_waits_for_second_5_of_the_same_minute(second):
    assert co.switch_start(at(second)) == at(5)


@pytest.mark.parametrize("second", [45, 50, 59.999])
def test_a_switch_late_in_the_minute_waits_for_second_5_of_the_next_one(second):
    assert co.switch_start(at(second)) == at(65)


def test_the_deadline_leaves_five_seconds_before_cron_reads_its_files_again():
    assert co.switch_deadline(M) == at(55)
    assert co.switch_deadline(M) < M + timedelta(minutes=1)


def test_every_second_of_a_minute_gets_a_start_whose_deadline_is_in_the_same_minute():
    for tenth in range(600):
        start = co.switch_start(at(tenth / 10))
        minute = co.minute_of(start)
        assert start >= minute + timedelta(seconds=co.WINDOW_OPEN_S)
        assert co.switch_deadline(minute) - start >= timedelta(seconds=co.DEADLINE_S - co.WINDOW_CLOSE_S)


@pytest.mark.parametrize(
    "path, backup",
    [
        ("/etc/crontab", "/etc/crontab.chrono-backup"),
        ("/etc/cron.d/php", "/etc/cron.d/php.chrono-backup"),
        ("/var/spool/cron/crontabs/alice", "/var/spool/cron/crontabs/.alice.chrono-backup"),
    ],
)
def test_backups_sit_beside_the_crontab_under_names_cron_never_reads(path, backup):
    assert co.backup_path(Path(path)) == Path(backup)


def test_comment_out_marks_each_migrated_line_and_keeps_every_other_byte():
    data = b"SHELL=/bin/sh\n# keep me\n*/5 * * * * root /usr/bin/a \xff\n0 1 * * * root b\n"
    out = co.comment_out(data, {3: "root-a"})
    assert out == (
        b"SHELL=/bin/sh\n# keep me\n# chrono: migrated to root-a\n#*/5 * * * * root /usr/bin/a \xff\n0 1 * * * root b\n"
    )


def test_comment_out_keeps_crlf_endings_and_a_missing_final_newline():
    data = b"* * * * * root a\r\n0 1 * * * root b"
    out = co.comment_out(data, {1: "root-a", 2: "root-b"})
    assert (
        out == b"# chrono: migrated to root-a\r\n#* * * * * root a\r\n# chrono: migrated to root-b\n#0 1 * * * root b"
    )


def test_cron_reads_a_commented_out_crontab_as_disabled_lines_only():
    data = b"MAILTO=ops\n*/5 * * * * root a\n@reboot root b\n17 * * * * root c %line1%line2\n"
    out = co.comment_out(data, {2: "root-a", 3: "root-b", 4: "root-c"})
    parsed = parse_crontab(out.decode(), "/etc/cron.d/x", "system")
    assert parsed.entries == ()
    assert parsed.errors == ()
    assert [d.line for d in parsed.disabled] == [3, 5, 7]


def test_migrated_ids_come_back_in_file_order():
    out = co.comment_out(b"* * * * * root a\r\n1 * * * * root b\n", {2: "root-b", 1: "root-a"})
    assert co.migrated_ids(out) == ["root-a", "root-b"]
    assert co.migrated_ids(b"# chrono: migrated\n# nothing here\n") == []


# --- deciding a rollback -------------------------------------------------------------------------


def _imported(registry: Path, source: Path, ids: list[str]) -> Path:
    registry.mkdir(exist_ok=True)
    f = registry / "imported-x.yaml"
    jobs = "".join(f"  - id: {i}\n    schedule: '* * * * *'\n" for i in ids)
    f.write_text(co.registry_header(str(source)) + "\njobs:\n" + jobs)
    return f


def test_a_cut_over_crontab_plans_a_restore_and_the_removal_of_its_registry_file(tmp_path):
    ct = tmp_path / "ct"
    original = b"* * * * * root a\n"
    co.backup_path(ct).write_bytes(original)
    ct.write_bytes(co.comment_out(original, {1: "root-a"}))
    reg = _imported(tmp_path / "reg", ct, ["root-a"])
    plan = co.plan_rollback(ct, tmp_path / "reg")
    assert plan.restore == original
    assert plan.registry_files == [reg]
    assert plan.job_ids == ["root-a"]
    assert plan.drop_backup and not plan.nothing_to_do


def test_a_rollback_interrupted_after_the_restore_still_removes_the_jobs(tmp_path):
    ct = tmp_path / "ct"
    ct.write_bytes(b"* * * * * root a\n")
    co.backup_path(ct).write_bytes(b"* * * * * root a\n")
    reg = _imported(tmp_path / "reg", ct, ["root-a"])
    plan = co.plan_rollback(ct, tmp_path / "reg")
    assert plan.restore is None
    assert plan.registry_files == [reg]
    assert plan.drop_backup


def test_a_crontab_never_cut_over_has_nothing_to_roll_back(tmp_path):
    ct = tmp_path / "ct"
    ct.write_bytes(b"* * * * * root a\n")
    _imported(tmp_path / "reg", tmp_path / "other", ["root-a"])
    assert co.plan_rollback(ct, tmp_path / "reg").nothing_to_do


def test_migrated_lines_without_their_backup_are_refused_with_what_to_do(tmp_path):
    ct = tmp_path / "ct"
    ct.write_bytes(co.comment_out(b"* * * * * root a\n", {1: "root-a"}))
    with pytest.raises(CliError) as err:
        co.plan_rollback(ct, tmp_path / "reg")
    assert "backup" in err.value.message and "uncomment" in err.value.hint


def test_a_backup_that_differs_from_an_unmarked_crontab_is_left_for_the_operator(tmp_path):
    ct = tmp_path / "ct"
    ct.write_bytes(b"* * * * * root edited\n")
    co.backup_path(ct).write_bytes(b"* * * * * root a\n")
    with pytest.raises(CliError) as err:
        co.plan_rollback(ct, tmp_path / "reg")
    assert str(co.backup_path(ct)) in err.value.message
