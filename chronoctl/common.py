"""What several chronoctl commands share: where the registry is, reading it, finding a job,
parsing the times and durations given on the command line, and the one clock read.

Everything here raises `chronoctl.errors` classes with a message and a hint, never a bare
exception, so the error boundary can print them as they are.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chronoctl.errors import InvalidInput, UnknownJob, UsageError

if TYPE_CHECKING:
    from chronod.core.model import JobSpec
    from chronod.core.occurrence import Placement
    from chronod.core.schedule import Schedule
    from chronod.specfile import RegistryResult


def now_utc() -> datetime:
    """The wall clock, read once per command at the edge (the core never reads it)."""
    from chronod.core.clock import Clock

    return Clock().now()


def asking_user() -> str | None:
    """Who is asking, as a pause or a backfill records it: the account of the process's
    user id (LOGNAME and USER are not asked: anyone can set them), or for root the user
    behind sudo."""
    import os
    import pwd

    if os.geteuid() == 0 and os.environ.get("SUDO_USER"):
        return os.environ["SUDO_USER"]
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def registry_dir(option: Path | None) -> Path:
    """`--registry DIR`, else `CHRONO_REGISTRY`, else the default for this user (docs/reference.md, Files and paths)."""
    if option is not None:
        return option
    from chronod.paths import default_registry

    return default_registry()


def check_paths_exist(paths: list[Path], what: str = "path") -> None:
    """Raise UsageError (exit 2) naming the first path that does not exist."""
    for p in paths:
        if not p.exists() and not p.is_symlink():
            raise UsageError(f"{what} {str(p)!r} does not exist", "give a job file or a directory of *.yaml files")


def load(paths: list[Path], now: datetime, secure: bool | None = False) -> "RegistryResult":
    """`chronod.specfile.load_registry` with I/O failures turned into operator errors."""
    from chronod.specfile import load_registry

    try:
        return load_registry(paths, now=now, secure=secure)
    except PermissionError as exc:
        raise InvalidInput(
            f"cannot read {exc.filename or paths[0]}: permission denied", "run as a user who can read the registry"
        ) from exc
    except OSError as exc:
        raise InvalidInput(f"cannot read {exc.filename or paths[0]}: {exc.strerror or exc}") from exc


def registry_hint(registry: Path) -> str:
    return f"registry is {registry} (set it with --registry DIR or CHRONO_REGISTRY)"


def find_job(registry: Path, job_id: str, now: datetime) -> "JobSpec":
    """The valid job `job_id` from `registry`; UnknownJob (exit 2) if there is none, and
    InvalidInput (exit 1) if it exists but does not validate."""
    return find_job_in(registry, job_id, now)[0]


def find_job_in(registry: Path, job_id: str, now: datetime) -> tuple["JobSpec", Any]:
    """`find_job`, with the whole registry it was read from (its windows, its other jobs)."""
    if not registry.exists():
        raise UsageError(f"registry {str(registry)!r} does not exist", registry_hint(registry))
    result = load([registry], now, secure=False)
    job = result.jobs.get(job_id)
    if job is not None:
        return job, result
    own = [p for p in result.problems if p.job_id == job_id and p.severity == "error"]
    if own:
        p = own[0]
        raise InvalidInput(
            f"job {job_id!r} in {p.file}:{p.line} is not valid: {p.message}",
            f"`chronoctl validate {registry}` lists every problem",
        )
    raise UnknownJob(job_id, f"registry {registry}", registry_hint(registry), known=result.jobs)


def compile_or_fail(expr: str, tz: str, dst_gap: str = "shift", dst_repeat: str = "first") -> "Schedule":
    """The compiled schedule, or InvalidInput (exit 1) with the schedule engine's hint."""
    from chronod.core.schedule import ScheduleError, compile_schedule

    try:
        return compile_schedule(expr, tz, dst_gap, dst_repeat)
    except ScheduleError as exc:
        raise InvalidInput(f"schedule {expr!r} (zone {tz}): {exc.message}", exc.hint or None) from exc


def schedule_of(spec: "JobSpec") -> "Schedule":
    """The compiled schedule of a job, with its DST policy."""
    return compile_or_fail(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)


def time_forms(direction: str = "past") -> str:
    """The time forms a flag of this direction takes (chronod.core.timeparse), for help and errors."""
    from chronod.core.timeparse import examples

    return examples(direction)


def parse_instant(
    text: str,
    tz: str,
    flag: str = "--after",
    now: datetime | None = None,
    direction: str = "past",
    strict: bool = False,
) -> datetime:
    """A time from the command line as aware UTC, read by `chronod.core.timeparse` in the
    flag's `direction` ("past": `02:00` is the latest 02:00, a bare duration is that long
    ago; "future": the next 02:00, that long from now). A value without an offset is wall
    time in zone `tz`. With `strict`, a past flag refuses a future time and the reverse."""
    from chronod.core.timeparse import WhenError, parse_when

    now = now or now_utc()
    try:
        value = parse_when(text, now=now, zone=tz, direction=direction, flag=flag, strict=strict)
    except WhenError as exc:
        raise UsageError(exc.message, exc.hint) from None
    return bounded_instant(value, text, flag)


def bounded_instant(value: datetime, text: str, flag: str) -> datetime:
    """`value` (aware) in UTC when chrono can compute with it; UsageError naming `flag` and
    the range otherwise (the one check every time flag goes through)."""
    from chronod.core import bounds

    try:
        utc = value.astimezone(timezone.utc)
    except OverflowError:
        utc = None
    if utc is None or not bounds.in_range(utc):
        raise UsageError(
            f"{flag} {text!r} is outside the times chrono can answer about", f"give a time from {bounds.range_text()}"
        )
    return utc


def parse_seconds(text: str, flag: str) -> int:
    """A duration flag (`90s`, `15m`, `24h`, `7d`) in seconds, > 0; UsageError otherwise."""
    from chronod.core.durations import DurationError, parse_duration

    try:
        seconds = parse_duration(text)
    except DurationError as exc:
        raise UsageError(f"{flag}: {exc}", f"durations look like 90s, 15m, 24h, 7d (at most {_max_span()})") from exc
    return bounded_seconds(seconds, flag)


def parse_since(text: str, now: datetime, tz: str = "UTC", flag: str = "--since") -> datetime:
    """The start of a `--since` window ending `now`: a duration back from now (`24h`, `7d`)
    or a time before now (`yesterday`, `02:00`, `monday`, `2026-12-01`; without an offset,
    zone `tz`)."""
    from chronod.core.durations import DurationError, parse_duration

    try:
        parse_duration(text)
        return now - timedelta(seconds=parse_seconds(text, flag))
    except DurationError:
        if re.fullmatch(r"(\s*\d+\s*[a-zA-Z]+)+\s*", text) and not text.strip().lower().endswith("ago"):
            parse_seconds(text, flag)  # a duration, wrong: say what is wrong with it
    start = parse_instant(text, tz, flag, now=now, direction="past", strict=True)
    if start >= now:
        raise UsageError(f"{flag} {text}: that is not in the past", "give a time before now, or a duration")
    bounded_seconds(int((now - start).total_seconds()), flag)
    return start


def bounded_seconds(seconds: int, flag: str) -> int:
    """`seconds` when it is a duration a flag may give (1s up to `bounds.MAX_SPAN_S`);
    UsageError naming `flag` and the range otherwise."""
    from chronod.core import bounds

    if seconds <= 0:
        raise UsageError(f"{flag} must be longer than 0s", f"give a duration such as {flag} 15m (s, m, h, d)")
    if seconds > bounds.MAX_SPAN_S:
        raise UsageError(
            f"{flag} is longer than {bounds.days_text(bounds.MAX_SPAN_S)}",
            f"give a duration from 1s to {bounds.days_text(bounds.MAX_SPAN_S)}",
        )
    return seconds


def _max_span() -> str:
    from chronod.core import bounds

    return bounds.days_text(bounds.MAX_SPAN_S)


def check_zone(tz: str) -> str:
    """`tz` if it names an IANA zone, else UsageError."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise UsageError(f"--tz {tz!r} is not a time zone", "use an IANA name such as UTC or America/New_York") from exc
    return tz


def node_or_here(node: str | None) -> str:
    """`--node NAME`, else this host's short name: the node a job that runs on each node is
    shown on."""
    if node:
        return node
    from chronod.paths import default_node

    return default_node()


def placement(job: "JobSpec", node: str | None) -> "Placement":
    """The job on `node` (`chronod.core.occurrence`): for a job that runs on each node,
    `node` defaults to this host's short name; other jobs ignore it."""
    from chronod.core import occurrence

    return occurrence.placement(job, node_or_here(node) if job.run_on.each else node)


def fleet_nodes(db: str | None) -> list[str]:
    """The node names the store knows (every chronod that ever used it), for showing the
    times of `run_on: each` jobs on each of them. With no `--db`, a missing or unreachable
    default database gives none; a database named with `--db` must be reachable."""
    from chronoctl import cmd_ops
    from chronoctl.errors import CliError
    from chronod.store.audit import node_names

    try:
        with cmd_ops.opened(db) as store:
            return sorted(node_names(store))
    except CliError:
        if db is not None:
            raise
        return []
