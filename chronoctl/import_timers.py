"""`chronoctl import X.timer` and `--all-timers`: the I/O edge of timer import.

Finds the timer's unit files (the unit search path, drop-ins, the service a timer starts),
reads them and the service's EnvironmentFile=s (each bounded), hands them to
chronoctl.systemd_timer, and checks each `@calendar` schedule against `systemd-analyze
calendar` when this host has it (else the engine's own proof, tests/fixtures/systemd_calendar,
stands): the next elapses from now, one by one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chronoctl.errors import UsageError
from chronoctl.limits import read_bounded
from chronoctl.systemd_timer import TimerJob, Unit, UnitError, instance_of, parse_unit, timer_job

UNIT_PATH = (
    Path("/etc/systemd/system"),
    Path("/run/systemd/system"),
    Path("/lib/systemd/system"),
    Path("/usr/lib/systemd/system"),
)
WANTS = Path("/etc/systemd/system/timers.target.wants")
LIVE_ELAPSES = 40  # elapses compared with systemd-analyze per expression


@dataclass
class TimerSource:
    """One timer to import: its path as given and its unit name."""

    path: Path
    name: str


def enabled_timers(wants: Path = WANTS) -> list[TimerSource]:
    """The timers enabled on this host (`systemctl enable` links them into timers.target.wants)."""
    if not wants.is_dir():
        return []
    out = []
    for link in sorted(wants.iterdir()):
        if link.name.endswith(".timer"):
            target = link.resolve() if link.is_symlink() else link
            if not target.exists():  # an instance links to the template file
                template, _ = instance_of(link.name)
                target = next((d / template for d in UNIT_PATH if (d / template).exists()), target)
            out.append(TimerSource(target, link.name))
    return out


def _find(name: str, near: Path, search: tuple[Path, ...]) -> Path | None:
    """A unit file by name: beside the timer first, then on the unit search path; an instance
    falls back to its template."""
    template, instance = instance_of(name)
    for d in (near, *search):
        for candidate in (name, template) if instance else (name,):
            if (d / candidate).is_file():
                return d / candidate
    return None


def load_unit(name: str, near: Path, search: tuple[Path, ...] = UNIT_PATH, first: Path | None = None) -> Unit:
    """A unit with its drop-ins (`NAME.d/*.conf`, for an instance also the template's)."""
    path = first or _find(name, near, search)
    if path is None:
        raise UnitError(f"{name} was not found beside {near} nor in {', '.join(map(str, search))}")
    unit = parse_unit(read_bounded(path, f"unit file {path}"), name, str(path))
    template, instance = instance_of(name)
    dirs = [f"{template}.d", f"{name}.d"] if instance else [f"{name}.d"]
    for d in (*reversed(search), near):
        for sub in dirs:
            folder = d / sub
            if folder.is_dir():
                for conf in sorted(folder.glob("*.conf")):
                    parse_unit(read_bounded(conf, f"drop-in {conf}"), name, str(path), unit)
    return unit


def timer_and_service(src: TimerSource, search: tuple[Path, ...] = UNIT_PATH) -> tuple[Unit, Unit]:
    _, instance = instance_of(src.name)
    if src.name.endswith("@.timer") or (instance is None and "@." in src.path.name and "@." in src.name):
        stem = src.name.split("@")[0]
        raise UnitError(
            f"{src.name} is a template: systemd runs only its instances; import an enabled instance "
            f"(such as {stem}@NAME.timer; `systemctl list-timers --all` names them)"
        )
    timer = load_unit(src.name, src.path.parent, search, src.path if src.path.name == src.name else None)
    service_name = timer.last("Timer", "Unit") or src.name.removesuffix(".timer") + ".service"
    service = load_unit(service_name, src.path.parent, search)
    return timer, service


def env_files(service: Unit) -> dict[str, str | None]:
    """Every EnvironmentFile= of a service, read (bounded) now, or None when missing."""
    from chronoctl.systemd_timer import expand

    out: dict[str, str | None] = {}
    for value in service.values("Service", "EnvironmentFile"):
        path = expand(value, service.name).lstrip("-")
        try:
            out[path] = read_bounded(Path(path), f"EnvironmentFile {path}")
        except FileNotFoundError:
            out[path] = None
    return out


def live_check(calendar: list[str], tz: str, now: datetime, fires: Any) -> list[str] | None:
    """Where `fires` (chrono's schedule) and `systemd-analyze calendar` differ over the next
    elapses of each expression; None when this host has no systemd-analyze."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return None
    theirs: set[datetime] = set()
    horizon: datetime | None = None  # where the first expression's listed elapses stop
    for expr in calendar:
        res = subprocess.run(
            [analyze, "calendar", f"--iterations={LIVE_ELAPSES}", f"--base-time=@{int(now.timestamp())}", expr],
            capture_output=True,
            text=True,
            env={**os.environ, "TZ": tz, "LC_ALL": "C", "SYSTEMD_COLORS": "0"},
            timeout=30,
            check=False,
        )
        if res.returncode != 0:
            return [f"systemd-analyze refuses OnCalendar={expr}: {res.stderr.strip()}"]
        elapses = _utc_lines(res.stdout)
        theirs |= set(elapses)
        if len(elapses) >= LIVE_ELAPSES:  # listed up to here, not beyond: compare no further
            horizon = max(elapses) if horizon is None else min(horizon, max(elapses))
    if not theirs:
        return []
    # with several OnCalendar= lines a dense one's elapses stop long before a sparse one's:
    # past the first stop, systemd's side is only missing from the listing, not the timer
    last = min(horizon, max(theirs)) if horizon is not None else max(theirs)
    theirs = {t for t in theirs if t <= last}
    ours = set(fires(now, last))
    wrong = []
    for t in sorted(theirs - ours)[:3]:
        wrong.append(f"systemd elapses at {t:%Y-%m-%d %H:%M:%S} UTC, chrono does not")
    for t in sorted(ours - theirs)[:3]:
        wrong.append(f"chrono fires at {t:%Y-%m-%d %H:%M:%S} UTC, systemd does not")
    return wrong


def _utc_lines(out: str) -> list[datetime]:
    found = []
    lines = out.split("\n")
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith(("Next elapse:", "Iter. #")) and "never" not in text:
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            words = (nxt if nxt.startswith("(in UTC):") else text).split()
            found.append(datetime.strptime(" ".join(words[-3:-1]), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC))
    return found


def sources_for(path: str | None, all_timers: bool) -> list[TimerSource]:
    if all_timers:
        found = enabled_timers()
        if not found:
            raise UsageError(
                f"no timer is enabled on this host ({WANTS} holds no .timer link)",
                "import one timer by its path: chronoctl import /lib/systemd/system/NAME.timer --dry-run",
            )
        return found
    assert path is not None
    p = Path(path)
    if not p.exists():
        _, instance = instance_of(p.name)
        template = p.with_name(instance_of(p.name)[0])
        if instance and template.exists():
            return [TimerSource(template, p.name)]
        raise UsageError(f"{path}: no such file", "give a .timer file, such as /lib/systemd/system/fstrim.timer")
    if p.is_dir():
        return [TimerSource(f, f.name) for f in sorted(p.glob("*.timer"))]
    return [TimerSource(p, p.name)]


def import_timer(src: TimerSource, job_id: str, host_tz: str) -> TimerJob:
    timer, service = timer_and_service(src)
    return timer_job(timer, service, job_id, host_tz, env_files(service))
