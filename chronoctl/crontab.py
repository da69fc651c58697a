"""Crontab text -> entries, exactly as Debian cron 3.0 reads it (pure: text in, data out).

Two formats: `system` (`/etc/crontab`, `/etc/cron.d/*`: five time fields, a user, the
command) and `user` (spool files and `crontab -l`: no user field). Every line is
accounted for: an entry, an environment setting, a comment, a commented-out entry
(reported as disabled), or an error with its line number and a hint. One bad line never
stops the lines after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from chronod.core.vixie import Entry, VixieParseError, parse_entry

FORMATS = ("system", "user")
MACROS = ("@reboot", "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELD_LIMITS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ENV_LINE = re.compile(r"""^[ \t]*(?:"([^"]*)"|'([^']*)'|([^\s="']+))[ \t]*=[ \t]*(.*)$""")
_USER_NAME = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.@-]*\$?$")
_REVERSED = re.compile(r"(?:^|,)(\w+)-(\w+)(?:/\d+)?(?=,|$)")
_UNESCAPED_PERCENT = re.compile(r"(?<!\\)%")  # a `%` that ends the command or a stdin line
_DOC_EXAMPLE = "command to be executed"


@dataclass(frozen=True)
class CronEntry:
    """One crontab line cron would run. `schedule` is what chrono should be given (the
    written fields, rewritten only where chrono's parser reads them differently);
    `cron_schedule` is the line's time part exactly as cron reads it."""

    file: str
    line: int
    schedule: str
    cron_schedule: str
    user: str
    command: str
    stdin: str | None
    env: tuple[tuple[str, str], ...]
    timezone: str | None  # CRON_TZ (or TZ) in force above this line
    text: str  # the line as written (without its line ending)
    notes: tuple[str, ...] = ()

    @property
    def is_reboot(self) -> bool:
        return self.schedule == "@reboot"


@dataclass(frozen=True)
class DisabledEntry:
    """A commented-out line that would be a valid entry: reported, not imported."""

    file: str
    line: int
    text: str


@dataclass(frozen=True)
class CrontabProblem:
    """A line cron refuses, or accepts but can never run: file, line, what, what to do."""

    file: str
    line: int
    message: str
    hint: str = ""


@dataclass(frozen=True)
class ParsedCrontab:
    """Everything read from one crontab file."""

    file: str
    format: str
    entries: tuple[CronEntry, ...] = ()
    disabled: tuple[DisabledEntry, ...] = ()
    errors: tuple[CrontabProblem, ...] = ()
    notes: tuple[str, ...] = ()  # about the whole file (CRLF, missing final newline)


def parse_env_line(line: str) -> tuple[str, str] | None:
    """`NAME=value` as cron's env.c reads it (spaces around `=`, one pair of matching
    quotes removed, trailing blanks dropped), or None when the line is not a setting."""
    m = _ENV_LINE.match(line)
    if not m:
        return None
    name = next(g for g in m.groups()[:3] if g is not None)
    value = m.group(4).rstrip(" \t")
    if value[:1] in ("'", '"'):
        quote = value[0]
        if len(value) < 2 or value[-1] != quote or quote in value[1:-1]:
            return None  # an unterminated quote: cron reads the line as an entry
        value = value[1:-1]
    return name, value


def split_percent(command: str) -> tuple[str, str | None]:
    """cron's `%` rule: an unescaped `%` ends the command; the rest is standard input
    with every further `%` a newline. `\\%` is a literal `%` in both parts."""
    command, *stdin_lines = (part.replace("\\%", "%") for part in _UNESCAPED_PERCENT.split(command))
    return command, "\n".join(stdin_lines) if stdin_lines else None


def _split_fields(text: str, count: int) -> tuple[list[str], str] | None:
    """The first `count` blank-separated words and the rest of the line (None if short)."""
    parts = text.lstrip(" \t").split(None, count)
    if len(parts) <= count:
        return None
    words, _ = parts[:count], parts[count]
    rest = text.lstrip(" \t")
    for word in words:
        rest = rest[len(word) :].lstrip(" \t")
    return words, rest


@dataclass
class _Reader:
    file: str
    fmt: str
    env: list[tuple[str, str]] = field(default_factory=list)
    tz: str | None = None
    entries: list[CronEntry] = field(default_factory=list)
    disabled: list[DisabledEntry] = field(default_factory=list)
    errors: list[CrontabProblem] = field(default_factory=list)
    line_notes: tuple[str, ...] = ()

    def error(self, line: int, message: str, hint: str = "") -> None:
        self.errors.append(CrontabProblem(self.file, line, message, hint))

    def set_env(self, name: str, value: str) -> None:
        self.env = [(k, v) for k, v in self.env if k != name] + [(name, value)]
        if name == "CRON_TZ" or (name == "TZ" and not any(k == "CRON_TZ" for k, _ in self.env)):
            self.tz = value or None


def parse_crontab(text: str, file: str, fmt: str, user: str | None = None) -> ParsedCrontab:
    """Read one crontab. `fmt` is "system" or "user"; a user crontab needs `user`.

    Environment lines apply to the entries below them; `CRON_TZ` (else `TZ`) sets the
    zone of the entries below it."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, not {fmt!r}")
    if fmt == "user" and not user:
        raise ValueError("a user crontab needs the user it belongs to")
    reader = _Reader(file, fmt)
    file_notes: list[str] = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        file_notes.append(
            f"{file}:{len(lines)} has no newline at the end: Debian's crontab refuses such a file and "
            "cron may skip its last line; it is imported, check that it really ran under cron"
        )
    if any(ln.endswith("\r") for ln in lines):
        file_notes.append(
            f"{file} has CRLF line endings: cron passes the carriage return to the shell as part of each "
            "command (usually breaking it); chrono strips it"
        )
    for number, raw in enumerate(lines, start=1):
        _read_line(reader, number, raw.removesuffix("\r"), user)
    return ParsedCrontab(
        file=file,
        format=fmt,
        entries=tuple(reader.entries),
        disabled=tuple(reader.disabled),
        errors=tuple(reader.errors),
        notes=tuple(file_notes),
    )


def _read_line(reader: _Reader, number: int, line: str, user: str | None) -> None:
    stripped = line.strip(" \t")
    if not stripped:
        return
    if stripped.startswith("#"):
        if _looks_like_entry(stripped.lstrip("#").strip(" \t"), reader.fmt):
            reader.disabled.append(DisabledEntry(reader.file, number, line))
        return
    env = parse_env_line(line)
    if env is not None:
        reader.set_env(*env)
        return
    _read_entry(reader, number, line, user)


def _looks_like_entry(text: str, fmt: str) -> bool:
    if not text or text.endswith(_DOC_EXAMPLE):
        return False
    probe = _Reader("", fmt)
    _read_entry(probe, 0, text, "nobody")
    return bool(probe.entries) and not probe.errors


def _read_entry(reader: _Reader, number: int, line: str, user: str | None) -> None:
    head = line.lstrip(" \t")
    count = 1 if head.startswith("@") else 5
    if reader.fmt == "system":
        count += 1
    split = _split_fields(line, count)
    if split is None:
        _short_line(reader, number, line, count)
        return
    words, command = split
    time_words = words[:1] if head.startswith("@") else words[:5]
    if reader.fmt == "system":
        entry_user = words[-1]
        if not _USER_NAME.match(entry_user):
            reader.error(
                number,
                f"the user field {entry_user!r} is not a user name",
                "/etc/crontab and /etc/cron.d files need a user between the time fields and the command "
                "(such as `root`); a crontab without one is a user crontab: import it with --format user --user NAME",
            )
            return
    else:
        entry_user = user or ""
    cron_schedule = " ".join(time_words)
    checked = _check_schedule(reader, number, cron_schedule)
    if checked is None:
        return
    schedule, notes = checked
    command, stdin = split_percent(command.rstrip(" \t"))
    command = command.rstrip(" \t")
    if not command.strip():
        reader.error(number, "no command after the time fields", "add the command to run, or delete the line")
        return
    reader.entries.append(
        CronEntry(
            file=reader.file,
            line=number,
            schedule=schedule,
            cron_schedule=cron_schedule,
            user=entry_user,
            command=command,
            stdin=stdin,
            env=tuple(reader.env),
            timezone=reader.tz,
            text=line,
            notes=tuple(notes),
        )
    )


def _short_line(reader: _Reader, number: int, line: str, count: int) -> None:
    words = line.split()
    if reader.fmt == "system" and len(words) == count and "/" in words[-1]:
        reader.error(
            number,
            f"no user field: {words[-1]!r} stands where the user should be",
            "/etc/crontab and /etc/cron.d files name a user before the command (`30 2 * * * root /usr/local/bin/backup`); "
            "a crontab without users is a user crontab: import it with --format user --user NAME",
        )
        return
    if words and words[0].startswith("@"):
        want = "a macro, a user and a command" if reader.fmt == "system" else "a macro and a command"
    else:
        want = "5 time fields, a user and a command" if reader.fmt == "system" else "5 time fields and a command"
    reader.error(
        number,
        f"too few fields: expected {want}, found {len(words)} word{'s' if len(words) != 1 else ''}",
        "an entry reads `minute hour day-of-month month day-of-week"
        + (" user" if reader.fmt == "system" else "")
        + " command`, such as `30 2 * * *"
        + (" root" if reader.fmt == "system" else "")
        + " /usr/local/bin/backup`",
    )


def _check_schedule(reader: _Reader, number: int, expr: str) -> tuple[str, list[str]] | None:
    """Refuse what cron refuses; refuse what can never run; rewrite what chrono reads differently."""
    if expr.startswith("@") and expr.lower() not in MACROS:
        reader.error(number, f"unknown macro {expr!r}", "cron knows " + " ".join(MACROS))
        return None
    if expr.lower() in MACROS:
        return expr.lower(), []
    try:
        entry = parse_entry(expr)
    except VixieParseError as exc:
        reader.error(number, f"cron refuses {_bad_field(expr) or 'the time fields'} in {expr!r}: {exc}", _field_hint(expr))
        return None
    words = expr.split()
    notes: list[str] = []
    for index, word in enumerate(words):
        reversed_items = [m.group(0).lstrip(",") for m in _REVERSED.finditer(word) if _is_reversed(m, index)]
        if reversed_items:
            words[index] = _explicit(entry, index)
            notes.append(
                f"the {_FIELD_NAMES[index]} range {', '.join(reversed_items)} runs backwards: cron matches nothing "
                f"for it, so the field means {words[index] or 'nothing'}"
            )
    never = _never_runs(entry)
    if never:
        reader.error(number, f"{expr!r} can never run: {never[0]}", never[1])
        return None
    return " ".join(words), notes


def _is_reversed(m: re.Match[str], index: int) -> bool:
    lo, hi = (_as_number(m.group(g), index) for g in (1, 2))
    return lo is not None and hi is not None and hi < lo


def _as_number(token: str, index: int) -> int | None:
    if token.isdigit():
        return int(token)
    names = {3: ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
             4: ("sun", "mon", "tue", "wed", "thu", "fri", "sat")}.get(index)
    if names and token.lower() in names:
        return names.index(token.lower()) + (1 if index == 3 else 0)
    return None


def _explicit(entry: Entry, index: int) -> str:
    values = (entry.minutes, entry.hours, entry.doms, entry.months, entry.dows)[index]
    return ",".join(str(v) for v in sorted(values))


def _never_runs(entry: Entry) -> tuple[str, str] | None:
    for name, values in zip(("minute", "hour", "month"), (entry.minutes, entry.hours, entry.months)):
        if not values:
            return f"the {name} field matches nothing", "a reversed range such as 22-2 is empty: write 22-23,0-2"
    days_or = not entry.dom_star and not entry.dow_star
    if days_or and (entry.doms or entry.dows):
        return None
    if not entry.doms or not entry.dows:
        return "a day field matches nothing", "a reversed range such as fri-mon is empty: write fri-sat,sun-mon"
    if any(d <= _MONTH_DAYS[m - 1] for m in entry.months for d in entry.doms):
        return None
    months = ",".join(_MONTH_NAMES[m - 1] for m in sorted(entry.months))
    days = ",".join(map(str, sorted(entry.doms)))
    return (
        f"no month in {months} has day {days}",
        "cron accepts this line but never runs it; delete it, or pick a day the month has (February: 1-28, or 29 in leap years)",
    )


def _field_hint(expr: str) -> str:
    words = expr.split()
    if len(words) != 5:
        return "write five time fields: minute hour day-of-month month day-of-week"
    ranges = ", ".join(f"{n} {lo}-{hi}" for n, (lo, hi) in zip(_FIELD_NAMES, _FIELD_LIMITS))
    return f"fields take numbers, ranges (1-5), steps (*/10, 0-30/5) and lists; limits: {ranges}; names jan-dec, sun-sat"


def _bad_field(expr: str) -> str | None:
    """Which field cron's parser stops at ("the minute field '60'")."""
    words = expr.split()
    if len(words) != 5:
        return None
    for index, word in enumerate(words):
        probe = ["*"] * 5
        probe[index] = word
        try:
            parse_entry(" ".join(probe))
        except VixieParseError:
            return f"the {_FIELD_NAMES[index]} field {word!r}"
    return None
