"""systemd timers -> chrono jobs: the unit file rules, each setting mapped, carried as a note,
counted as a difference, or refused with the reason."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chronoctl.cmd_import import ImportResult
from chronoctl.import_schedulers import import_timers
from chronoctl.import_timers import TimerSource, live_check
from chronoctl.importer import ImportOptions
from chronoctl.systemd_timer import UnitError, build_command, parse_unit, seconds, timer_job

NOW = datetime(2027, 3, 1, tzinfo=UTC)


def _units(timer: str, service: str, name: str = "x") -> tuple:
    return parse_unit(timer, f"{name}.timer", f"/u/{name}.timer"), parse_unit(service, f"{name}.service", "/u/s")


def _job(timer: str, service: str, env_files: dict | None = None):
    t, s = _units(timer, service)
    return timer_job(t, s, "x", "Europe/Berlin", env_files or {})


SERVICE = "[Service]\nType=oneshot\nExecStart=/usr/bin/report --all\n"


def test_several_on_calendar_lines_make_one_calendar_schedule_and_an_empty_one_resets():
    tj = _job(
        "[Timer]\nOnCalendar=hourly\nOnCalendar=\nOnCalendar=Mon *-*-* 09:00\nOnCalendar=*-*~1 \\\n 23:00\n", SERVICE
    )
    assert tj.job["schedule"] == "@calendar Mon *-*-* 09:00; *-*~1 23:00"
    assert tj.job["command"] == ["/usr/bin/report", "--all"]  # exec'd directly, as systemd does
    assert (tj.job["timezone"], tj.job["overlap"], tj.job["catchup"]) == ("Europe/Berlin", "forbid", "none")


def test_exec_prefixes_are_handled_or_refused_with_the_reason():
    cmd = build_command([("ExecStartPre", "-/bin/prepare"), ("ExecStart", "/bin/run ${A} $B 'x y'")])
    assert cmd.command == "{ /bin/prepare || true; } && /bin/run \"${A}\" $B 'x y'"
    plus = build_command([("ExecStartPre", "+/bin/mkdir -p /srv"), ("ExecStart", "/bin/dump")], "postgres")
    assert plus.as_root and plus.command == "/bin/mkdir -p /srv && runuser -u postgres -- /bin/dump"
    with pytest.raises(UnitError, match="argv"):
        build_command([("ExecStart", "@/bin/prog name")])
    assert build_command([("ExecStart", ":/bin/echo $HOME")]).command == "/bin/echo '$HOME'"


def test_environment_and_environment_file_are_read_and_a_missing_one_refused():
    service = (
        SERVICE + 'Environment="A=1 2" B=3\nEnvironmentFile=/etc/default/x\nEnvironmentFile=-/etc/none\nUser=app\n'
    )
    tj = _job("[Timer]\nOnCalendar=daily\n", service, {"/etc/default/x": "# c\nexport C='four'\n", "/etc/none": None})
    assert tj.job["env"] == {"C": "four", "A": "1 2", "B": "3"} and tj.job["user"] == "app"
    with pytest.raises(UnitError, match="does not exist"):
        _job("[Timer]\nOnCalendar=daily\n", SERVICE + "EnvironmentFile=/etc/gone\n", {"/etc/gone": None})


def test_random_delay_persistent_and_timeouts_map_to_chrono_settings():
    tj = _job(
        "[Timer]\nOnCalendar=daily\nRandomizedDelaySec=1h 30min\nPersistent=true\nAccuracySec=1us\n",
        SERVICE + "TimeoutStartSec=20min\n",
    )
    assert (tj.job["tolerance_s"], tj.job["catchup"], tj.job["timeout_s"]) == (5400, "latest", 1200)
    assert tj.differs == []  # a random delay is a window chrono fires in, not a difference


def test_monotonic_timers_take_the_nearest_chrono_form_and_say_what_differs():
    boot = _job("[Timer]\nOnBootSec=15min\n", SERVICE)
    assert boot.job["schedule"] == "@reboot" and boot.job["command"].startswith("sleep 900 && ")
    every = _job("[Timer]\nOnBootSec=15min\nOnUnitActiveSec=1d\n", SERVICE)
    assert every.job["schedule"] == "@every 86400s"
    assert any("another phase" in d for d in every.differs)
    with pytest.raises(UnitError, match="never elapses"):
        _job("[Timer]\nWakeSystem=true\n", SERVICE)


def test_what_chrono_cannot_honour_is_listed_and_conditions_count_as_differences():
    service = (
        "[Unit]\nConditionACPower=true\n[Service]\nType=oneshot\nExecStart=/bin/x\nProtectSystem=full\nCPUQuota=20%\n"
    )
    tj = _job("[Timer]\nOnCalendar=daily\nWakeSystem=true\n", service)
    assert "x.service: ProtectSystem=full" in tj.not_honoured and "x.service: CPUQuota=20%" in tj.not_honoured
    assert "[Timer] WakeSystem=true" in tj.not_honoured
    assert any("ConditionACPower=true" in d for d in tj.differs)


def test_daemons_and_units_without_a_command_are_refused():
    with pytest.raises(UnitError, match="Type=forking"):
        _job("[Timer]\nOnCalendar=daily\n", "[Service]\nType=forking\nExecStart=/usr/sbin/d\n")
    with pytest.raises(UnitError, match="no ExecStart"):
        _job("[Timer]\nOnCalendar=daily\n", "[Service]\nType=oneshot\n")


def test_time_spans_read_as_systemd_reads_them():
    assert [seconds(v) for v in ("90", "5min", "1h 30min", "2d", "1w", "infinity")] == [
        90,
        300,
        5400,
        172800,
        604800,
        None,
    ]
    with pytest.raises(UnitError):
        seconds("5 fortnights")


def _write(d: Path, name: str, text: str) -> Path:
    (d / name).write_text(text)
    return d / name


def test_a_template_instance_expands_its_specifiers_and_a_template_alone_is_refused(tmp_path):
    _write(tmp_path, "dump@.timer", "[Timer]\nOnCalendar=weekly\n")
    _write(tmp_path, "dump@.service", "[Service]\nType=oneshot\nExecStart=/bin/dump %i %I\n")
    result = ImportResult(scheduler="systemd")
    sources = [
        TimerSource(tmp_path / "dump@.timer", "dump@15-main.timer"),
        TimerSource(tmp_path / "dump@.timer", "dump@.timer"),
    ]
    import_timers(sources, ImportOptions(host_timezone="UTC"), NOW, set(), result)
    assert [j["command"] for j in result.jobs] == [["/bin/dump", "15-main", "15/main"]]
    assert "is a template" in result.errors[0]["message"]
    assert list(result.files) == ["imported-systemd-dump-15-main.yaml"]


HOST_TIMERS = sorted(Path("/lib/systemd/system").glob("*.timer"))


@pytest.mark.skipif(not HOST_TIMERS, reason="this host has no /lib/systemd/system timers")
def test_every_timer_of_this_host_imports_or_is_refused_with_a_reason():
    result = ImportResult(scheduler="systemd")
    import_timers([TimerSource(p, p.name) for p in HOST_TIMERS], ImportOptions(host_timezone="UTC"), NOW, set(), result)
    assert len(result.jobs) + len(result.errors) == len(HOST_TIMERS)
    assert all(e["message"] and e["hint"] for e in result.errors)
    for job in result.jobs:
        assert job["equivalence"]["compared"]  # each says against what its verdict was made


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_several_on_calendar_lines_are_compared_with_systemd_only_as_far_as_it_listed_each():
    """`systemd-analyze calendar` lists 40 elapses of each expression: a dense one's stop
    days before a sparse one's, and chrono's fires past that stop were "not systemd's"
    (every weekday 09:30 beside weekends 12:00: three false differences, exit 1)."""
    from chronod.core.schedule import compile_schedule

    calendar = ["Mon..Fri *-*-* 09:30:00", "Sat,Sun 12:00", "*:0/15"]
    for exprs in (calendar[:2], calendar[1:], calendar):
        sched = compile_schedule("@calendar " + "; ".join(exprs), "UTC")

        def fires(start: datetime, end: datetime, sched=sched) -> list[datetime]:
            out, at = [], sched.next_after(start)
            while at is not None and at <= end:
                out.append(at)
                at = sched.next_after(at)
            return out

        assert live_check(exprs, "UTC", NOW, fires) == [], exprs
    # and a real difference is still found: chrono one minute off
    sched = compile_schedule("@calendar Mon..Fri *-*-* 09:31:00; Sat,Sun 12:00", "UTC")
    wrong = live_check(calendar[:2], "UTC", NOW, lambda s, e: [t for t in _every(sched, s) if t <= e])
    assert wrong and "systemd elapses at" in wrong[0]


def _every(sched, start: datetime, n: int = 200) -> list[datetime]:
    out, at = [], start
    for _ in range(n):
        at = sched.next_after(at)
        if at is None:
            break
        out.append(at)
    return out
