"""Crontab text -> entries, exactly as Debian cron 3.0 reads it (pure: text in, data out).

Two formats: `system` (`/etc/crontab`, `/etc/cron.d/*`: five time fields, a user, the
command) and `user` (spool files and `crontab -l`: no user field). Every line is
accounted for: an entry, an environment setting, a comment, a commented-out entry
(reported as disabled), or an error with its line number and a hint. One bad line never
stops the lines after it here, but Debian cron ignores a whole file when it refuses any
line of it, or when its last line has no newline: such a file's entries are still read,
marked with `file_ignored` (none of them ever ran under cron).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from chronod.core.cronexpr import ScheduleError, parse_field
from chronod.core.vixie import Entry, VixieParseError, parse_entry

FORMATS = ("system", "user")
MACROS = ("@reboot", "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELD_LIMITS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale
_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # bytes the reader decoded with surrogateescape
_MAX_STRING = 998  # the longest command or NAME=value Debian's cron keeps (checked with its daemon)
_USER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*\$?$")  # '.', '{', '*' or a path can never be one
_REVERSED = re.compile(r"(?:^|,)(\w+)-(\w+)(?:/\d+)?(?=,|$)")
_WORD = re.compile(r"[^ \t]+")
_SETTING = re.compile(r"""^[ \t]*["']?[A-Za-z_][A-Za-z0-9_]*["']?[ \t]*=""")
_UNESCAPED_PERCENT = re.compile(r"(?<!\\)%")  # a `%` that ends the command or a stdin line
_DOC_EXAMPLE = "command to be executed"
# the example lines of the comment `crontab -e` starts a new crontab with (Debian's template)
_TEMPLATE_EXAMPLES = frozenset({"0 5 * * 1 tar -zcf /var/backups/home.tgz /home/"})


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
    file_ignored: str | None = None  # why Debian cron ignores the whole file: this line never ran
    cron_command: str | None = None  # what cron hands the shell, where it differs from `command` (a CR)
    cron_stdin: str | None = None  # what cron writes to standard input, where it differs from `stdin`
    flavor: str = "debian"  # whose rules read the line: debian, cronie (CRON_TZ honoured), busybox

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
    cron_refuses: bool = False  # cron itself refuses the line, and with it the whole file


@dataclass(frozen=True)
class ParsedCrontab:
    """Everything read from one crontab file."""

    file: str
    format: str
    entries: tuple[CronEntry, ...] = ()
    disabled: tuple[DisabledEntry, ...] = ()
    errors: tuple[CrontabProblem, ...] = ()
    notes: tuple[str, ...] = ()  # about the whole file (CRLF)
    ignored_by_cron: str | None = None  # why Debian cron ignores the whole file, if it does


_NAMEI, _NAME, _EQ1, _EQ2, _VALUEI, _VALUE, _FINI, _ERROR = range(8)


def parse_env_line(line: str) -> tuple[str, str] | None:
    """`NAME=value` as Debian cron's env.c `load_env` reads it, or None when the line is not
    a setting (cron then reads it as an entry). Blanks may surround `=`; the name and the
    value may each be quoted with one pair of matching quotes, and nothing may follow the
    closing quote but blanks. Every value loses its trailing blanks, a quoted one too:
    Debian's cron gives `A="  two  "` as `  two` (the classic env.c trims unquoted values
    only; each rule here was checked against the real daemon, tests/fixtures/cron_env).
    An unquoted value must not be empty (`MAILTO=` is not a setting: write `MAILTO=""`).
    cron keeps 998 characters of the line and of `NAME=value`: a longer value is cut short."""
    c = line.lstrip(" \t")[:_MAX_STRING]  # the rest is cut, a closing quote included
    name: list[str] = []
    value: list[str] = []
    out, state, quote, i = name, _NAMEI, "", 0
    while state != _ERROR and i < len(c):
        if state in (_NAMEI, _VALUEI):
            if c[i] in "'\"":
                quote = c[i]
                i += 1
            state += 1
            if i == len(c):
                break
        ch = c[i]
        if state in (_NAME, _VALUE):
            if quote:
                if ch == quote:
                    state, i = state + 1, i + 1
                    continue
                if state == _NAME and ch == "=":
                    state = _ERROR
                    continue
            elif state == _NAME and ch in _C_SPACE:
                state, i = _EQ1, i + 1
                continue
            elif state == _NAME and ch == "=":
                state = _EQ1
                continue
            out.append(ch)
            i += 1
        elif state == _EQ1:
            if ch == "=":
                state, out, quote = _EQ2, value, ""
            elif ch not in _C_SPACE:
                state = _ERROR
            i += 1
        elif ch in _C_SPACE:  # _EQ2, _FINI: skip blanks
            i += 1
        else:
            state += 1
    if state != _FINI and not (state == _VALUE and not quote):
        return None
    text = "".join(value).rstrip(_C_SPACE)
    return "".join(name), text[: max(0, _MAX_STRING - len(name) - 1)]


def split_percent(command: str) -> tuple[str, str | None]:
    """cron's `%` rule (do_command.c): an unescaped `%` ends the command; the rest is
    standard input with every further unescaped `%` a newline. In the command a backslash
    before `%` or before another backslash is dropped (Debian's cron runs `echo 'x\\\\y'`
    as `echo 'x\\y'`, and `\\\\%` ends the command); in standard input only `\\%` loses it,
    and cron ends non-empty input with a newline (`%a%b` is "a\\nb\\n", `%a%` is "a\\n")."""
    out: list[str] = []
    escaped = False
    for i, ch in enumerate(command):
        if escaped:
            escaped = False
            if ch in "%\\":
                out[-1] = ch
                continue
        elif ch == "\\":
            escaped = True
        elif ch == "%":
            stdin = "\n".join(part.replace("\\%", "%") for part in _UNESCAPED_PERCENT.split(command[i + 1 :]))
            return "".join(out), stdin + "\n" if stdin and not stdin.endswith("\n") else stdin
        out.append(ch)
    return "".join(out), None


def _split_fields(text: str, count: int) -> tuple[list[str], str] | None:
    """The first `count` words (separated by blanks and tabs, as entry.c separates them)
    and the rest of the line, possibly empty; None if the line has fewer words."""
    rest = text.lstrip(" \t")
    words = []
    for _ in range(count):
        m = _WORD.match(rest)
        if m is None:
            return None
        words.append(m.group(0))
        rest = rest[m.end() :].lstrip(" \t")
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

    def error(self, line: int, message: str, hint: str = "", cron_refuses: bool = True) -> None:
        self.errors.append(CrontabProblem(self.file, line, message, hint, cron_refuses))

    def set_env(self, name: str, value: str) -> None:
        """As cron keeps it, "=value" (a nameless variable) included: the importer decides
        what chrono can carry."""
        self.env = [(k, v) for k, v in self.env if k != name] + [(name, value)]
        if name == "CRON_TZ" or (name == "TZ" and not any(k == "CRON_TZ" for k, _ in self.env)):
            self.tz = value or None


def parse_crontab(
    text: str, file: str, fmt: str, user: str | None = None, cron_ignores: str | None = None, flavor: str = "debian"
) -> ParsedCrontab:
    """Read one crontab. `fmt` is "system" or "user"; a user crontab needs `user`.

    Environment lines apply to the entries below them; `CRON_TZ` (else `TZ`) sets the
    zone of the entries below it. `cron_ignores` is why Debian cron refuses the file as a
    whole before reading it (its owner, mode or links, which only the caller can see)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, not {fmt!r}")
    if fmt == "user" and not user:
        raise ValueError("a user crontab needs the user it belongs to")
    reader = _Reader(file, fmt)
    file_notes: list[str] = []
    lines = text.split("\n")
    unterminated = lines[-1] != ""
    if not unterminated:
        lines.pop()
    if any(ln.endswith("\r") for ln in lines):
        file_notes.append(
            f"{file} has CRLF line endings: cron passes the carriage return to the shell as part of each "
            "command (usually breaking it); chrono strips it"
        )
    for number, raw in enumerate(lines, start=1):
        _read_line(reader, number, raw, user)
    if unterminated and _is_setting_or_entry(lines[-1]):
        reader.error(
            len(lines),
            "the last line has no newline at its end: Debian cron ignores the whole file "
            '("Missing newline before EOF, this crontab file will be ignored")',
            "end the file with a newline; until then none of its entries run under cron",
        )
    if cron_ignores:
        reader.error(
            0,
            f"Debian cron ignores this whole file: {cron_ignores}",
            "make it a regular file owned by root, not group- or world-writable, with one link (chmod 644)",
        )
    ignored = _why_cron_ignores(reader.errors)
    entries = [replace(e, file_ignored=ignored) for e in reader.entries] if ignored else reader.entries
    if flavor != "debian":
        entries = [replace(e, flavor=flavor) for e in entries]
    return ParsedCrontab(
        file=file,
        format=fmt,
        entries=tuple(entries),
        disabled=tuple(reader.disabled),
        errors=tuple(sorted(reader.errors, key=lambda p: p.line)),
        notes=tuple(file_notes),
        ignored_by_cron=ignored,
    )


def _is_setting_or_entry(line: str) -> bool:
    stripped = line.lstrip(" \t")
    return bool(stripped) and not stripped.startswith("#")


def _why_cron_ignores(problems: list[CrontabProblem]) -> str | None:
    refused = sorted((p for p in problems if p.cron_refuses), key=lambda p: p.line)
    if not refused:
        return None
    if refused[0].line == 0:
        return refused[0].message
    return f"Debian cron ignores this whole file because of line {refused[0].line}"


def _read_line(reader: _Reader, number: int, line: str, user: str | None) -> None:
    """One line as cron's skip_comments/load_env/load_entry see it: a carriage return is
    an ordinary character (a CRLF file's empty line is a line cron refuses)."""
    if number == 1 and line.startswith("\ufeff"):
        reader.error(
            1,
            "the file starts with a byte-order mark (BOM): cron reads it as part of the first line and "
            "refuses that line",
            "save the file as UTF-8 without a BOM",
        )
        return
    stripped = line.strip(" \t")
    if not stripped:
        return
    if stripped.startswith("#"):
        if _looks_like_entry(stripped.lstrip("#").strip(" \t").removesuffix("\r"), reader.fmt):
            text = _NOT_UTF8.sub("\ufffd", line.removesuffix("\r"))
            reader.disabled.append(DisabledEntry(reader.file, number, text))
        return
    if _NOT_UTF8.search(line) or "\0" in line:
        what = (
            "bytes that are not UTF-8" if _NOT_UTF8.search(line) else "a NUL byte (cron reads the line only up to it)"
        )
        reader.error(
            number,
            f"the line holds {what}: chrono's registry is UTF-8 text, so it is not imported",
            "re-encode the file as UTF-8 (iconv -f latin1 -t utf-8) or remove the byte",
            cron_refuses=False,
        )
        return
    env = parse_env_line(line)
    if env is not None:
        reader.set_env(*env)
        return
    if _SETTING.match(line):
        reader.error(
            number,
            f"{line.strip(_C_SPACE)!r} is not a setting cron understands: cron reads it as an entry and refuses it",
            'write NAME=value; an empty value is NAME="" (MAILTO="" turns mail off); a quoted value is one pair '
            "of matching quotes with nothing after the closing one",
        )
        return
    _read_entry(reader, number, line, user)


def _looks_like_entry(text: str, fmt: str) -> bool:
    if not text or text.endswith(_DOC_EXAMPLE) or " ".join(text.split()) in _TEMPLATE_EXAMPLES:
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
    if reader.fmt == "system" and not command:
        _short_line(reader, number, line, count)  # cron refuses a user with no command after it
        return
    time_words = words[:1] if head.startswith("@") else words[:5]
    if reader.fmt == "system":
        entry_user = words[-1]
        if not _USER_NAME.match(entry_user):
            reader.error(
                number,
                f"the user field {entry_user!r} can never be a user name: Debian cron finds no such user and "
                'ignores the whole file ("bad username")',
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
    if len(command) > _MAX_STRING:
        reader.error(
            number,
            f"the command is {len(command)} characters long: Debian cron refuses commands over {_MAX_STRING} "
            '("command too long")',
            "move the command into a script and call the script from the crontab",
        )
        return
    if reader.fmt == "user" and command.startswith("*"):
        reader.error(
            number,
            f"cron refuses a command that starts with '*' in a user crontab ({command.split()[0]!r} reads like a sixth time field)",
            "a user crontab has five time fields and no seconds: `*/5 * * * * /usr/local/bin/poll`",
        )
        return
    cron_command, cron_stdin = split_percent(command) if command.endswith("\r") else (None, None)
    command, stdin = split_percent(command.removesuffix("\r").rstrip(" \t"))
    command = command.rstrip(" \t")
    if not command.strip():
        reader.error(
            number,
            "no command after the time fields (cron accepts the line and runs nothing)",
            "add the command to run, or delete the line",
            cron_refuses=False,
        )
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
            text=line.removesuffix("\r"),
            notes=tuple(notes),
            cron_command=cron_command,
            cron_stdin=cron_stdin if cron_command is not None else None,
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
    if expr.startswith("@"):
        if expr in MACROS:
            return expr, []
        if expr.lower() in MACROS:
            reader.error(number, f"cron does not know {expr!r}: its macros are lower case", f"write {expr.lower()}")
        else:
            reader.error(number, f"unknown macro {expr!r}", "cron knows " + " ".join(MACROS))
        return None
    try:
        entry = parse_entry(expr)
    except VixieParseError as exc:
        reader.error(
            number, f"cron refuses {_bad_field(expr) or 'the time fields'} in {expr!r}: {exc}", _field_hint(expr)
        )
        return None
    words = expr.split(" ")
    notes: list[str] = []
    for index, word in enumerate(words):
        rewritten, why = _as_chrono_reads(entry, index, word)
        if rewritten != word:
            words[index] = rewritten
            notes.append(why)
    never = _never_runs(entry)
    if never:
        reader.error(number, f"{expr!r} can never run: {never[0]}", never[1], cron_refuses=False)
        return None
    return " ".join(words), notes


def _field_values(entry: Entry, index: int) -> frozenset[int]:
    return (entry.minutes, entry.hours, entry.doms, entry.months, entry.dows)[index]


def _chrono_values(index: int, word: str) -> frozenset[int] | None:
    try:
        return frozenset(parse_field(_FIELD_NAMES[index], word))
    except ScheduleError:
        return None


def _as_chrono_reads(entry: Entry, index: int, word: str) -> tuple[str, str]:
    """The field as chrono should be given it so that it means what cron reads, and why it
    was rewritten (unchanged, with no reason, when both read it alike)."""
    values = _field_values(entry, index)
    if _chrono_values(index, word) == values:
        return word, ""
    text = _explicit(index, word, values)
    name = _FIELD_NAMES[index]
    reversed_items = [m.group(0).lstrip(",") for m in _REVERSED.finditer(word) if _is_reversed(m, index)]
    if reversed_items:
        return text, (
            f"the {name} range {', '.join(reversed_items)} runs backwards: cron matches nothing "
            f"for it, so the field means {text or 'nothing'}"
        )
    return text, f"cron reads the {name} field {word!r} as {text!r} (it skips what follows a complete range)"


def _explicit(index: int, word: str, values: frozenset[int]) -> str:
    """`values` written so that chrono reads them; a field that starts with '*' keeps its
    '*', which decides the day rule and whether the job is a wildcard job across DST."""
    plain = ",".join(str(v) for v in sorted(values))
    if not word.startswith("*"):
        return plain
    low, high = _FIELD_LIMITS[index]
    span = high - low + 1
    for candidate in ["*"] + [f"*/{k}" for k in range(2, span + 1)]:
        if _chrono_values(index, candidate) == values:
            return candidate
    rest = ",".join(str(v) for v in sorted(values) if v != low)  # a '*' item always sets `low`
    return f"*/{span},{rest}"


def _is_reversed(m: re.Match[str], index: int) -> bool:
    lo, hi = (_as_number(m.group(g), index) for g in (1, 2))
    return lo is not None and hi is not None and hi < lo


def _as_number(token: str, index: int) -> int | None:
    if token.isdigit():
        return int(token)
    names = {
        3: ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        4: ("sun", "mon", "tue", "wed", "thu", "fri", "sat"),
    }.get(index)
    if names and token.lower() in names:
        return names.index(token.lower()) + (1 if index == 3 else 0)
    return None


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
    return (
        f"fields take numbers, ranges (1-5), steps (*/10, 0-30/5) and lists; limits: {ranges}; names jan-dec, sun-sat"
    )


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


def parse_busybox(text: str, file: str, user: str) -> ParsedCrontab:
    """A busybox crond crontab (chronod.core.busybox has its rules): no user field, no `%`
    rule, `#` starts a comment anywhere, only SHELL=, PATH= and MAILTO= set anything."""
    from chronod.core import busybox

    entries: list[CronEntry] = []
    errors: list[CrontabProblem] = []
    notes: list[str] = []
    env: dict[str, str] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.split("#", 1)[0].strip(" \t\r")
        if not line:
            continue
        first = line.split()[0]
        name = next((n for n in ("MAILTO", "SHELL", "PATH") if first.startswith(n + "=")), None)
        if name is not None:
            env[name] = first[len(name) + 1 :]
            continue
        words = line.split(None, 1) if first.startswith("@") else line.split(None, 5)
        if first.startswith("@"):
            spec = busybox.SPECIALS.get(first)
            if (spec is None and first != "@reboot") or len(words) < 2:
                notes.append(f"{file}:{number}: busybox skips {first!r} (not one of its @ words)")
                continue
            fields, command = (spec.split() if spec else []), words[1]
        elif len(words) < 6:
            if "=" in first:
                notes.append(f"{file}:{number}: busybox ignores {first!r}: it reads only SHELL=, PATH= and MAILTO=")
            continue
        else:
            fields, command = words[:5], words[5]
        if raw.split("#", 1)[0] != raw and "#" in raw:
            notes.append(f"{file}:{number}: busybox cuts the line at '#': the command is {command!r}")
        if first == "@reboot":
            schedule = cron_schedule = "@reboot"
        else:
            try:
                sets = busybox.parse_line(fields)
            except busybox.BusyboxParseError as exc:
                errors.append(CrontabProblem(file, number, f"busybox: {exc}", "fix the field", cron_refuses=False))
                continue
            schedule, cron_schedule = busybox.chrono_schedule(sets), " ".join(fields)
        entries.append(
            CronEntry(
                file=file,
                line=number,
                schedule=schedule,
                cron_schedule=cron_schedule,
                user=user,
                command=command,
                stdin=None,
                env=tuple(env.items()),
                timezone=None,
                text=raw.rstrip("\r"),
                flavor="busybox",
            )
        )
    return ParsedCrontab(file, "user", tuple(entries), (), tuple(errors), tuple(notes))
