"""`chronoctl import X.timer --cutover` and `--rollback X.timer`: hand a systemd timer's runs to
chronod and back, so that each elapse runs under exactly one of them.

Cutover: wait until no elapse of the job falls in the next minute (one that does is left to
systemd, and the switch starts two seconds after it), write the registry file, confirm that
chronod carries the job with a first occurrence after now, then `systemctl disable --now`
the timer. Rollback, the other way round: `systemctl enable --now` first, then the registry
file goes and chronod confirms it dropped the job. The side that takes over goes first.

Where systemd is not PID 1 (a container, a chroot: no /run/systemd/system), `systemctl` can
only change the unit files: the timer is disabled (or enabled) for the next boot and the
output says so; nothing was running to stop. `CHRONO_SYSTEMD_ROOT` points systemctl at another
root directory (`systemctl --root=DIR`), as the tests do.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import typer

from chronoctl.errors import EXIT_NO, EXIT_OK, EXIT_UNREACHABLE, CliError, Unreachable, UsageError
from chronoctl.limits import read_privately

SWITCH_S = 50  # a switch must be done this long after it starts
_WAS_ENABLED = "# systemd: {unit} was enabled before the cutover; chronoctl import --rollback enables it again."


@dataclass
class Systemctl:
    """systemctl on this host's systemd, or on the unit files of `root` when it is not running."""

    root: str | None = None

    @property
    def live(self) -> bool:
        return self.root is None and Path("/run/systemd/system").is_dir()

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        base = ["systemctl"] + ([] if self.live else [f"--root={self.root or '/'}"])
        return subprocess.run(base + list(args), capture_output=True, text=True, timeout=60, check=False)

    def is_enabled(self, unit: str) -> bool:
        return self._run("is-enabled", unit).stdout.strip() == "enabled"

    def switch(self, action: str, unit: str) -> str:
        """`enable` or `disable` the unit (with --now where systemd runs); what was done, in words."""
        res = self._run(action, *(["--now"] if self.live else []), unit)
        if res.returncode != 0:
            raise CliError(
                f"systemctl {action} {unit} failed: {res.stderr.strip() or res.stdout.strip()}",
                f"run systemctl {action} {unit} by hand",
            )
        if self.live:
            return f"systemctl {action} --now {unit}"
        where = f" under {self.root}" if self.root else ""
        return (
            f"systemctl {action} {unit}{where}: systemd is not running here (PID 1 is not systemd), so the "
            f"timer is {action}d for the next boot; there was no running timer to {'stop' if action == 'disable' else 'start'}"
        )


def systemctl() -> Systemctl:
    return Systemctl(os.environ.get("CHRONO_SYSTEMD_ROOT") or None)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def quiet_start(next_fire: Callable[[datetime], datetime | None], now: datetime) -> datetime:
    """When a switch may start: now, unless the job fires within the next minute; then two
    seconds after that fire (systemd runs it, the switch follows)."""
    t = next_fire(now)
    if t is not None and t <= now + timedelta(seconds=60):
        return t + timedelta(seconds=2)
    return now


def timer_cutover_cmd(
    path: str | None, all_timers: bool, owner: str | None, reg: Path, db: str | None, dry_run: bool, json_out: bool
) -> None:
    from chronoctl import cmd_ops
    from chronoctl import cutover as co
    from chronoctl.cmd_import import ImportResult, as_json, import_options, print_human
    from chronoctl.import_schedulers import import_timers, registry_name
    from chronoctl.import_timers import sources_for
    from chronoctl.render import echo, escape_line, print_json

    if all_timers:
        raise UsageError(
            "--cutover takes one timer at a time", "chronoctl import /lib/systemd/system/X.timer --cutover"
        )
    sources = sources_for(path, False)
    options = import_options(owner, False)
    result = ImportResult(scheduler="systemd")
    import_timers(sources, options, _now().replace(microsecond=0), set(), result)
    if result.errors or not result.jobs:
        print_json(as_json(result, [], True)) if json_out else print_human(result, [], True)
        raise typer.Exit(EXIT_NO)
    src = sources[0]
    name = registry_name(src.name, "systemd")
    target = reg / name
    ctl = systemctl()
    enabled = ctl.is_enabled(src.name)
    text = result.files[name]
    if enabled:
        head, _, rest = text.partition("\n")
        text = f"{head}\n{_WAS_ENABLED.format(unit=src.name)}\n{rest}"
    if dry_run:
        print_json(as_json(result, [], True, [str(target)])) if json_out else print_human(result, [str(target)], True)
        echo(escape_line(f"cutover would register {result.jobs[0]['id']}, then systemctl disable --now {src.name}"))
        raise typer.Exit(EXIT_OK)
    specs = co.specs_of(text, str(target))
    try:
        with cmd_ops.opened(db) as store:
            daemon = co.find_daemon(store)
            if daemon is None:
                raise CliError(
                    f"no chronod is running on this host (database {store.url_safe}); the timer and the registry "
                    "were not changed",
                    "start chronod, then run the cutover again: the timer must not stop before chronod runs",
                    EXIT_UNREACHABLE,
                )
            co.ping(daemon)
            from chronod.core.schedule import compile_schedule

            schedule = compile_schedule(specs[0].schedule, specs[0].timezone)
            start = quiet_start(schedule.next_after, _now())
            while _now() < start:
                time.sleep(min(0.5, (start - _now()).total_seconds()))
            begun = _now()
            previous = target.read_bytes() if target.exists() else None
            co.write_registry_file(target, text.encode(), private=read_privately())
            daemon.ask_reload()
            deadline = begun + timedelta(seconds=SWITCH_S)
            firsts = co._wait_until(lambda: daemon.first_occurrences(specs), deadline, _now)
            if firsts is None or any(t <= begun for t in firsts.values()):
                _put_back(target, previous, daemon)
                raise CliError(
                    f"chronod did not confirm {specs[0].id} with a first run after {begun:%H:%M:%S} within "
                    f"{SWITCH_S} s; the registry file was put back and the timer was not changed",
                    "check chronod's log, then run the cutover again",
                    EXIT_NO,
                )
            try:
                done = ctl.switch("disable", src.name)
            except CliError:
                _put_back(target, previous, daemon)
                raise
    except Unreachable as exc:
        raise CliError(
            f"{exc.message}; the timer and the registry were not changed", "start chronod first", EXIT_UNREACHABLE
        ) from None
    report = {
        "timer": src.name,
        "was_enabled": enabled,
        "registry_file": str(target),
        "systemctl": done,
        "chrono_first": {k: v.isoformat() for k, v in firsts.items()},
        "switched_at": _now().isoformat(),
    }
    if json_out:
        print_json({**as_json(result, [str(target)], False), "cutover": report})
    else:
        print_human(result, [str(target)], False)
        echo(
            escape_line(f"{done}; chronod runs {specs[0].id} from {next(iter(firsts.values())):%Y-%m-%d %H:%M:%S} UTC")
        )
        echo(escape_line(f"undo with: chronoctl import --rollback {src.path.with_name(src.name)}"))
    raise typer.Exit(EXIT_OK)


def _put_back(target: Path, previous: bytes | None, daemon: Any) -> None:
    from chronoctl import cutover as co

    if previous is None:
        target.unlink(missing_ok=True)
    else:
        co.write_registry_file(target, previous, restore=True)
    daemon.ask_reload()


def timer_rollback_cmd(timer: Path, reg: Path, db: str | None, json_out: bool) -> None:
    """`--rollback X.timer`: enable the timer again (if it was enabled), then remove the registry
    file imported from it and confirm chronod dropped the job."""
    import yaml

    from chronoctl import cmd_ops
    from chronoctl import cutover as co
    from chronoctl.render import echo, escape_line, print_json

    files = co.imported_files(reg, str(timer))
    if not files:
        msg = f"{timer}: nothing to roll back (no registry file imported from it in {reg})"
        print_json({"timer": str(timer), "nothing_to_do": True}) if json_out else echo(escape_line(msg))
        raise typer.Exit(EXIT_OK)
    text = files[0].read_text()
    was_enabled = _WAS_ENABLED.format(unit=timer.name) in text
    ids = [j["id"] for j in (yaml.safe_load(text) or {}).get("jobs") or []]
    done = (
        systemctl().switch("enable", timer.name) if was_enabled else "the timer was not enabled before: left as it is"
    )
    dropped = None
    try:
        with cmd_ops.opened(db) as store:
            daemon = co.find_daemon(store)
            for f in files:
                f.unlink()
            if daemon is not None:
                daemon.ask_reload()
                ok = co._wait_until(lambda: daemon.dropped(ids), _now() + timedelta(seconds=SWITCH_S), _now)
                dropped = bool(ok)
    except Unreachable:
        for f in files:
            f.unlink(missing_ok=True)
    report = {
        "timer": str(timer),
        "systemctl": done,
        "removed": [str(f) for f in files],
        "jobs": ids,
        "dropped": dropped,
    }
    if json_out:
        print_json(report)
    else:
        echo(escape_line(done))
        for f in files:
            echo(escape_line(f"removed {f} ({', '.join(ids)})"))
        if dropped is False:
            echo("chronod has not confirmed it dropped the jobs yet: check chronoctl list")
    raise typer.Exit(EXIT_OK if dropped is not False else EXIT_NO)
