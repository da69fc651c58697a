"""systemd timers -> chrono jobs (pure: unit texts in, jobs and reasons out).

A timer (`X.timer`) names when, its service (`X.service`, or `Unit=`) what. Each timer
becomes one job: its `OnCalendar=` lines one `@calendar` schedule (chronod.core.calendar
evaluates them as systemd does), its service's `ExecStart=` lines one command. What chrono
cannot honour is said per job, never dropped silently: conditions under which systemd skips
a run, sandboxing, resource limits. What makes a job fire at other instants than systemd's
(a random delay, a period counted from the last run) makes its verdict "not the same".

Unit files are read as systemd reads them: `[Section]` headers, `Key=value` lines, `#` and
`;` comments, a trailing backslash continues a line, an empty assignment (`OnCalendar=`)
resets a list, drop-ins (`X.timer.d/*.conf`) after the unit; `%i`, `%I`, `%n`, `%N`, `%p`,
`%P` and `%%` specifiers are expanded for template instances (`pg_dump@15-main.timer`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

# settings chrono carries (the rest of [Service] and [Unit] is listed per job as not honoured)
_SERVICE_KEYS = frozenset(
    {
        "Type",
        "ExecStart",
        "ExecStartPre",
        "ExecStartPost",
        "User",
        "Group",
        "WorkingDirectory",
        "Environment",
        "EnvironmentFile",
        "TimeoutStartSec",
        "TimeoutSec",
        "RuntimeMaxSec",
        "SyslogIdentifier",
        "StandardOutput",
        "StandardError",
        "RemainAfterExit",
    }
)
# [Unit] settings that change nothing for a timer's run, or only its place in the boot order
_UNIT_HARMLESS = frozenset(
    {
        "Description",
        "Documentation",
        "After",
        "Before",
        "Wants",
        "Requires",
        "BindsTo",
        "PartOf",
        "Conflicts",
        "DefaultDependencies",
        "RequiresMountsFor",
        "StopWhenUnneeded",
        "RefuseManualStart",
        "RefuseManualStop",
        "IgnoreOnIsolate",
        "OnFailure",
        "OnSuccess",
        "SourcePath",
    }
)
_TIMER_KEYS = frozenset(
    {
        "OnCalendar",
        "RandomizedDelaySec",
        "FixedRandomDelay",
        "AccuracySec",
        "Persistent",
        "OnBootSec",
        "OnStartupSec",
        "OnActiveSec",
        "OnUnitActiveSec",
        "OnUnitInactiveSec",
        "Unit",
    }
)
_INFINITY = ("infinity", "")


@dataclass
class Unit:
    """One unit file (with its drop-ins): {section: [(key, value), ...]} in file order."""

    name: str
    path: str
    sections: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def values(self, section: str, key: str) -> list[str]:
        """Every value of `key`, an empty assignment resetting the list, as systemd does."""
        out: list[str] = []
        for k, v in self.sections.get(section, []):
            if k == key:
                out = [] if v == "" else out + [v]
        return out

    def last(self, section: str, key: str) -> str | None:
        found = self.values(section, key)
        return found[-1] if found else None

    def keys(self, section: str) -> list[str]:
        return list(dict.fromkeys(k for k, _ in self.sections.get(section, [])))


def parse_unit(text: str, name: str, path: str, unit: Unit | None = None) -> Unit:
    """Add a unit file's (or a drop-in's) settings to `unit`."""
    unit = unit or Unit(name, path)
    section = ""
    pending = ""
    for raw in text.split("\n"):
        line = raw.strip()
        if pending:
            line = pending + " " + line
            pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            unit.sections.setdefault(section, [])
            continue
        key, eq, value = line.partition("=")
        if eq and section:
            unit.sections.setdefault(section, []).append((key.strip(), value.strip()))
    return unit


def instance_of(name: str) -> tuple[str, str | None]:
    """('pg_dump@.timer', '15-main') for 'pg_dump@15-main.timer'; (name, None) otherwise."""
    stem, dot, suffix = name.rpartition(".")
    prefix, at, instance = stem.partition("@")
    if at and instance:
        return f"{prefix}@.{suffix}", instance
    return name, None


def _unescape(text: str) -> str:
    """systemd-escape's `\\xNN` and `-` for `/` (the %I specifier)."""
    text = re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text.replace("-", "/"))
    return text


class UnitError(ValueError):
    """A unit chrono refuses to import, and why (a sentence for the operator)."""


def expand(value: str, unit_name: str) -> str:
    """%i %I %n %N %p %P %% of a unit name; other specifiers are refused."""
    stem = unit_name.rpartition(".")[0]
    prefix, _, instance = stem.partition("@")
    table = {
        "i": instance,
        "I": _unescape(instance),
        "n": unit_name,
        "N": stem,
        "p": prefix,
        "P": _unescape(prefix),
        "%": "%",
    }

    def one(m: re.Match[str]) -> str:
        spec = m.group(1)
        if spec not in table:
            raise UnitError(
                f"the specifier %{spec} in {value!r} depends on the running system (systemd.unit(5)); "
                "chrono expands only %i, %I, %n, %N, %p, %P and %%: write the value out in the unit or a drop-in"
            )
        return table[spec]

    return re.sub(r"%(.)", one, value)


def seconds(value: str) -> int | None:
    """A systemd time span (`5min`, `1h 30min`, `90`, `infinity`) in whole seconds."""
    text = value.strip().lower()
    if text in _INFINITY:
        return None
    units = {
        "us": 1e-6,
        "usec": 1e-6,
        "ms": 1e-3,
        "msec": 1e-3,
        "s": 1,
        "sec": 1,
        "second": 1,
        "seconds": 1,
        "m": 60,
        "min": 60,
        "minute": 60,
        "minutes": 60,
        "h": 3600,
        "hr": 3600,
        "hour": 3600,
        "hours": 3600,
        "d": 86400,
        "day": 86400,
        "days": 86400,
        "w": 604800,
        "week": 604800,
        "weeks": 604800,
        "month": 2629800,
        "months": 2629800,
        "M": 2629800,
        "y": 31557600,
        "year": 31557600,
        "years": 31557600,
    }
    total = 0.0
    for number, unit in re.findall(r"([0-9.]+)\s*([a-zA-Z]*)", value.strip()):
        if unit and unit not in units and unit.lower() not in units:
            raise UnitError(f"{value!r} is not a time span systemd reads (systemd.time(7))")
        total += float(number) * units.get(unit, units.get(unit.lower(), 1) if unit else 1)
    if not re.fullmatch(r"(\s*[0-9.]+\s*[a-zA-Z]*)+\s*", value):
        raise UnitError(f"{value!r} is not a time span systemd reads (systemd.time(7))")
    return int(total)


def _truth(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "yes", "y", "true", "t", "on")


# --- ExecStart= --------------------------------------------------------------------------------


def split_exec(value: str) -> tuple[str, list[str]]:
    """(prefixes, argv) of one ExecStart= line, quoted as systemd quotes it."""
    m = re.match(r"[-@:+!]*", value)
    prefixes = m.group(0) if m else ""
    try:
        argv = shlex.split(value[len(prefixes) :], posix=True)
    except ValueError as exc:
        raise UnitError(f"cannot read the command line {value!r}: {exc}") from None
    return prefixes, argv


def _shell_word(arg: str, expand_env: bool) -> str:
    """One argument as sh should see it: `${X}` stays one word, `$X` splits as systemd splits it."""
    if not expand_env or "$" not in arg:
        return shlex.quote(arg)
    out = []
    for part in re.split(r"(\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*)", arg):
        if not part:
            continue
        if part.startswith("${"):
            out.append(f'"{part}"')
        elif part.startswith("$"):
            out.append(part)  # systemd splits $X on blanks, as an unquoted sh expansion does
        else:
            out.append(shlex.quote(part))
    return "".join(out)


@dataclass
class Command:
    """What the job runs, and what systemd did that chrono does not."""

    command: str | list[str]
    as_root: bool = False  # a `+` line: systemd ran it with full privileges
    notes: list[str] = field(default_factory=list)


def build_command(lines: list[tuple[str, str]], user: str = "root") -> Command:
    """ExecStartPre=, ExecStart= and ExecStartPost= lines, in order, as one command: each line
    runs after the one before succeeded (a `-` line's failure is ignored), as systemd runs a
    oneshot service's lines."""
    parts: list[str] = []
    notes: list[str] = []
    as_root = False
    argvs: list[list[str]] = []
    for key, value in lines:
        prefixes, argv = split_exec(value)
        if not argv:
            raise UnitError(f"{key}={value!r} names no program")
        if "@" in prefixes:
            raise UnitError(
                f"{key}={value!r} uses '@' (a different argv[0]): a chrono command cannot set argv[0]; "
                "write the line without '@' in a drop-in if the program does not need it"
            )
        if "+" in prefixes and user != "root":
            as_root = True
            notes.append(
                f"{key}={value}: '+' runs this line with full privileges: the job runs as root, and its other "
                f"lines through runuser -u {user}, as systemd runs them"
            )
        if "!" in prefixes:
            notes.append(
                f"{key}={value}: '!' gives the line ambient capabilities without a user change; "
                "chrono runs it as the job's user without them"
            )
        words = " ".join(_shell_word(a, ":" not in prefixes) for a in argv)
        if user != "root" and "+" not in prefixes:
            words = f"runuser -u {shlex.quote(user)} -- {words}"
        parts.append(f"{{ {words} || true; }}" if "-" in prefixes else words)
        argvs.append(argv)
    first_prefixes = split_exec(lines[0][1])[0]
    if not as_root and len(argvs) == 1 and "-" not in first_prefixes and not any("$" in a for a in argvs[0]):
        return Command(argvs[0], as_root, notes)  # exec'd directly, as systemd does
    return Command(" && ".join(parts), as_root, notes)


# --- Environment= and EnvironmentFile= --------------------------------------------------------


def environment_assignments(value: str) -> list[tuple[str, str]]:
    """`Environment="A=1" B=2` -> [('A', '1'), ('B', '2')] (quotes as systemd reads them)."""
    out = []
    for word in shlex.split(value, posix=True):
        name, eq, val = word.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            out.append((name, val))
    return out


def environment_file(text: str) -> list[tuple[str, str]]:
    """An EnvironmentFile=: `NAME=value` lines (optionally `export`ed, quoted), `#`/`;` comments."""
    out = []
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        line = line.removeprefix("export ").strip()
        name, eq, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out.append((name, value))
    return out


# --- the timer as a job -------------------------------------------------------------------------


@dataclass
class TimerJob:
    """One imported timer: the job, what differs from systemd, and notes."""

    job: dict[str, Any]
    differs: list[str] = field(default_factory=list)  # why chrono would not fire it as systemd does
    notes: list[str] = field(default_factory=list)
    not_honoured: list[str] = field(default_factory=list)  # unit settings chrono cannot carry
    calendar: list[str] = field(default_factory=list)  # the OnCalendar= expressions


def _delay_job(job: dict[str, Any], delay: int | None, what: str) -> None:
    """An @reboot job that waits `delay` seconds first, as OnBootSec= does."""
    job["schedule"] = "@reboot"
    if delay:
        command = job["command"]
        text = " ".join(shlex.quote(a) for a in command) if isinstance(command, list) else command
        job["command"] = f"sleep {delay} && {text}"


def timer_job(
    timer: Unit,
    service: Unit,
    job_id: str,
    host_timezone: str,
    env_files: dict[str, str | None],
) -> TimerJob:
    """The job for a timer and its service. `env_files` maps each EnvironmentFile= path to its
    text (None: missing). Raises UnitError for a timer chrono refuses, with the reason."""
    tname = timer.name
    calendar = [expand(v, tname) for v in timer.values("Timer", "OnCalendar")]
    if any(";" in c for c in calendar):
        raise UnitError(f"{tname}: an OnCalendar= value holds ';', which chrono uses between expressions")
    boot = timer.last("Timer", "OnBootSec") or timer.last("Timer", "OnStartupSec")
    active = timer.last("Timer", "OnActiveSec")
    unit_active = timer.last("Timer", "OnUnitActiveSec")
    unit_inactive = timer.last("Timer", "OnUnitInactiveSec")
    lines = [
        (key, expand(v, service.name))
        for key in ("ExecStartPre", "ExecStart", "ExecStartPost")
        for v in service.values("Service", key)
    ]
    if not lines:
        raise UnitError(f"{service.name} has no ExecStart=: there is nothing to run")
    kind = service.last("Service", "Type") or "simple"
    if kind not in ("oneshot", "simple", "exec"):
        raise UnitError(
            f"{service.name} is Type={kind}: a timer's service that stays running or forks is a daemon, "
            "not a job; chrono runs jobs to completion"
        )
    user = expand(service.last("Service", "User") or "root", service.name)
    cmd = build_command(lines, user)
    if not cmd.as_root:
        cmd = build_command(lines)  # one user for every line: the job's user
    out = TimerJob(job={}, calendar=calendar, notes=list(cmd.notes))
    if cmd.as_root:
        user = "root"
    job: dict[str, Any] = {"id": job_id, "owner": user}
    if calendar:
        job["schedule"] = "@calendar " + "; ".join(calendar)
    job["timezone"] = host_timezone
    job["command"] = cmd.command
    job["user"] = user
    group = service.last("Service", "Group")
    if group:
        job["group"] = expand(group, service.name)
    if isinstance(cmd.command, str):
        job["shell"] = "/bin/sh"
    workdir = service.last("Service", "WorkingDirectory")
    if workdir:
        workdir = expand(workdir.lstrip("-"), service.name)
        if workdir == "~":
            out.notes.append("WorkingDirectory=~ is the user's home: chrono starts the job there")
        else:
            job["workdir"] = workdir
    else:
        job["workdir"] = "/"
    env: dict[str, str] = {}
    for value in service.values("Service", "EnvironmentFile"):
        path = expand(value, service.name)
        optional = path.startswith("-")
        path = path.lstrip("-")
        text = env_files.get(path)
        if text is None:
            if not optional:
                raise UnitError(f"EnvironmentFile={path} does not exist: systemd refuses to start {service.name}")
            out.notes.append(f"EnvironmentFile=-{path} does not exist (optional): nothing read from it")
            continue
        env.update(environment_file(text))
        out.notes.append(f"EnvironmentFile={path} read now; a later change to it does not reach the job")
    for value in service.values("Service", "Environment"):
        env.update(environment_assignments(expand(value, service.name)))
    if env:
        job["env"] = env
    timeout = service.last("Service", "RuntimeMaxSec") or service.last("Service", "TimeoutStartSec")
    timeout = timeout or service.last("Service", "TimeoutSec")
    if kind == "oneshot" and timeout is None:
        out.notes.append("Type=oneshot has no start timeout by default (TimeoutStartSec=infinity): nor has the job")
    elif timeout is not None and seconds(timeout):
        job["timeout_s"] = seconds(timeout)
    elif kind != "oneshot" and timeout is None:
        job["timeout_s"] = 90
        out.notes.append("TimeoutStartSec= defaults to 90 s for this service type: timeout_s 90")
    job["idempotency_class"] = "unsafe"
    delay_text = timer.last("Timer", "RandomizedDelaySec")
    delay = seconds(delay_text) if delay_text else 0
    accuracy_text = timer.last("Timer", "AccuracySec")
    accuracy = seconds(accuracy_text) if accuracy_text else 60
    if delay:
        job["tolerance_s"] = delay
        fixed = _truth(timer.last("Timer", "FixedRandomDelay"))
        job["tolerance_reason"] = f"RandomizedDelaySec={delay_text} of {tname}"
        out.notes.append(
            f"RandomizedDelaySec={delay_text}: systemd delays each elapse by a "
            + ("fixed random amount per host" if fixed else "new random amount")
            + f" of up to {delay} s; chrono by a fixed jitter of up to {delay} s (tolerance_s): an instant "
            "systemd could have chosen"
        )
    else:
        job["tolerance_s"] = 0
        job["tolerance_reason"] = f"imported from {tname}, which has no RandomizedDelaySec="
    if accuracy:
        out.notes.append(
            f"AccuracySec={accuracy_text or '1min (the default)'}: systemd may start the run up to {accuracy} s late "
            "to share a wake-up with other timers; chrono starts it on time"
        )
    job["overlap"] = "forbid"  # systemd never starts a service that is still running
    job["catchup"] = "latest" if _truth(timer.last("Timer", "Persistent")) else "none"
    job["run_on"] = "each"
    out.job = job
    if not calendar:
        _monotonic(out, boot, active, unit_active, unit_inactive, job)
    elif boot or active or unit_active or unit_inactive:
        extra = [f"{k}={v}" for k, v in (("OnBootSec", boot), ("OnActiveSec", active)) if v]
        extra += [f"{k}={v}" for k, v in (("OnUnitActiveSec", unit_active), ("OnUnitInactiveSec", unit_inactive)) if v]
        out.differs.append(
            f"{', '.join(extra)} beside OnCalendar=: chrono imports the calendar only; the other triggers "
            "are not carried (import them as a second job if they matter)"
        )
    _not_honoured(out, timer, service)
    return out


def _monotonic(
    out: TimerJob,
    boot: str | None,
    active: str | None,
    unit_active: str | None,
    unit_inactive: str | None,
    job: dict[str, Any],
) -> None:
    """A timer without OnCalendar=: counted from the boot or from its service's last run."""
    period_text = unit_active or unit_inactive
    if period_text:
        period = seconds(period_text)
        if not period:
            raise UnitError(f"{period_text!r} is not a period chrono can repeat")
        job["schedule"] = f"@every {period}s"
        which = "OnUnitActiveSec" if unit_active else "OnUnitInactiveSec"
        since = "the start of its last run" if unit_active else "the end of its last run"
        out.differs.append(
            f"{which}={period_text}: systemd runs it {period_text} after {since} (first "
            f"{boot or active or 'when the timer starts'} after boot); chrono's nearest form is @every {period}s, "
            "counted from the epoch: the same period, another phase"
        )
        if job.get("tolerance_s", 0) >= period:
            job["tolerance_s"] = period - 1
        return
    start = boot or active
    if start is None:
        raise UnitError(
            f"{job['id']}: the timer has no OnCalendar=, OnBootSec=, OnStartupSec=, OnActiveSec= or "
            "OnUnitActiveSec=: it never elapses"
        )
    delay = seconds(start) or 0
    _delay_job(job, delay, start)
    job.pop("tolerance_s", None)
    job.pop("tolerance_reason", None)
    job["catchup"] = "none"
    out.notes.append(
        f"{'OnBootSec' if boot else 'OnActiveSec'}={start}: an @reboot job that sleeps {delay} s first; "
        "chronod runs @reboot jobs once per boot, when it starts"
    )
    if delay:
        out.differs.append(
            f"{'OnBootSec' if boot else 'OnActiveSec'}={start} counts from the boot (or the timer's start); "
            f"chrono's @reboot counts from chronod's start, then the command sleeps {delay} s"
        )


def _not_honoured(out: TimerJob, timer: Unit, service: Unit) -> None:
    for key in timer.keys("Timer"):
        if key not in _TIMER_KEYS:
            out.not_honoured.append(f"[Timer] {key}={timer.last('Timer', key)}")
    for unit in (timer, service):
        for key in unit.keys("Unit"):
            if key in _UNIT_HARMLESS:
                continue
            value = unit.last("Unit", key)
            if key.startswith(("Condition", "Assert")):
                verb = "skips the run" if key.startswith("Condition") else "fails the run"
                out.differs.append(
                    f"{unit.name}: {key}={expand(value or '', unit.name)}: systemd {verb} when it does not hold; "
                    "chrono runs it "
                    "(add the test to the command if it matters)"
                )
            else:
                out.not_honoured.append(f"{unit.name}: [Unit] {key}={value}")
    for key in service.keys("Service"):
        if key not in _SERVICE_KEYS:
            out.not_honoured.append(f"{service.name}: {key}={service.last('Service', key)}")
    for section in service.sections:
        if section not in ("Unit", "Service", "Install"):
            out.not_honoured.append(f"{service.name}: the [{section}] section")
