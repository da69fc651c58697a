"""Parsed crontab entries -> chrono job dicts, registry YAML, and the checks around them.

Pure: the host's zone, the clock and users' home directories come in as arguments. The
defaults preserve what cron did (no jitter, overlapping runs allowed, no catch-up, at
most once, on every host); `adopt_defaults=True` leaves those keys out so that chrono's
own defaults apply, and `defaults_diff` says what that changes.
"""

from __future__ import annotations

import os
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any, Callable, Iterable, Protocol, Sequence

import yaml

from chronoctl.crontab import CronEntry

EQUIVALENCE_DAYS = 400
CRON_DEFAULT_PATH = "/usr/bin:/bin"  # what cron puts in PATH when the crontab sets none
CRON_DEFAULT_SHELL = "/bin/sh"  # what cron runs commands with, and puts in SHELL, when the crontab sets none
# What chronod's runner gives every job before its `env` (chronod.runner.runner.job_environment;
# a unit test keeps the two the same, chronoctl never imports the runner).
CHRONO_ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHRONO_USER_PATH = "/usr/local/bin:/usr/bin:/bin"
_CHRONO_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CRON_SETS = ("SHELL", "HOME", "PATH", "LOGNAME")  # cron's own values beat PAM's (checked with the daemon)
CRON_SPOOL_DIR = "/var/spool/cron"  # where cron starts a job whose HOME does not exist (its own directory)
_ID_OK = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_MAX_ID = 63
_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", "{", "}", ";;", "|&", "\n"}
_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "!", "time", "exec", "{", "}"}
_GUARDS = {
    "cd",
    "test",
    "[",
    "[[",
    "true",
    ":",
    "export",
    "set",
    "umask",
    "sleep",
    "echo",
    "source",
    ".",
    "ulimit",
    "mkdir",
    "command",
    "type",
    "which",
    "pgrep",
    "pidof",
}
_WRAPPERS = {
    "nice",
    "ionice",
    "nohup",
    "env",
    "sudo",
    "su",
    "flock",
    "timeout",
    "chronic",
    "setlock",
    "runuser",
    "chrt",
    "taskset",
    "stdbuf",
    "cronic",
    "run-one",
    "lockrun",
    "xargs",
}
_INTERPRETERS = re.compile(
    r"^(php[0-9.]*(-cli)?|python[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node(js)?|bash|sh|dash|zsh|ksh|java|Rscript|lua[0-9.]*)$"
)
_WITH_SUBJECT = {
    "invoke-rc.d",
    "service",
    "systemctl",
    "docker",
    "docker-compose",
    "kubectl",
    "make",
    "rake",
    "drush",
    "wp",
    "artisan",
    "manage.py",
    "console",
}
_SHELLS = {"bash", "sh", "dash", "zsh", "ksh"}
_SCRIPT_EXT = re.compile(r"\.(sh|bash|py|pl|php|rb|js|cron)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECT = re.compile(r"^[0-9]*[<>]")


# --- job ids -------------------------------------------------------------------------


def slugify(text: str) -> str:
    """Lower-case, runs of anything outside [a-z0-9.] become one '-', trimmed to a valid id."""
    slug = re.sub(r"[^a-z0-9.]+", "-", text.lower())
    slug = re.sub(r"\.{2,}", ".", slug)
    slug = slug.strip("-.")[:_MAX_ID].rstrip("-.")
    return slug or "job"


def _words(command: str) -> list[str]:
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        return list(lexer)
    except ValueError:
        return command.replace(";", " ; ").replace("&&", " && ").replace("||", " || ").split()


def _segments(command: str) -> list[list[str]]:
    """The simple commands of a shell line, split at && || ; | & and braces; what a
    `$( … )` substitutes only feeds a word and is left out (`[ $(date +%d) -le 7 ]`)."""
    out: list[list[str]] = [[]]
    words = _words(command)
    depth = 0
    for i, word in enumerate(words):
        punctuation = not word.strip("();<>|&")
        if depth or (punctuation and word.startswith("(") and i and words[i - 1].endswith("$")):
            if punctuation:  # shlex groups punctuation: `);` closes and separates
                depth += word.count("(") - word.count(")")
                if depth <= 0 and word.strip(")"):
                    depth = 0
                    out.append([])
            continue
        if word in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(word)
    return [seg for seg in out if seg]


def _program(segment: list[str]) -> list[str] | None:
    """The words from the real program on: keywords, VAR=value, wrappers and redirections
    dropped; None when the segment is a guard (`cd /`, `test -x …`, `[ … ]`)."""
    words = [w for w in segment if not _REDIRECT.match(w)]
    while words and (words[0] in _KEYWORDS or _ASSIGNMENT.match(words[0])):
        words = words[1:]
    while words and (os.path.basename(words[0]) in _WRAPPERS or words[:2] == ["bundle", "exec"]):
        words = words[2:] if words[0] == "bundle" else _skip_wrapper(words)
    if not words or os.path.basename(words[0]) in _GUARDS or _quiet_grep(words):
        return None
    return words


def _quiet_grep(words: list[str]) -> bool:
    """`grep -q …` only tests a file's content: a guard like `test`."""
    return os.path.basename(words[0]) in {"grep", "egrep", "fgrep"} and any(
        w.startswith("-") and not w.startswith("--") and "q" in w for w in words[1:]
    )


def _inline_code(words: list[str]) -> bool:
    """`perl -e CODE`, `python3 -c CODE`: the program is the code, a poor name when a
    later command of the line has a real one (`perl -e 'sleep …' && certbot renew`)."""
    return bool(_INTERPRETERS.match(os.path.basename(words[0]))) and any(w in ("-e", "-c", "-r") for w in words[1:2])


def _skip_wrapper(words: list[str]) -> list[str]:
    name = os.path.basename(words[0])
    rest = words[1:]
    takes_value = {
        "nice": {"-n"},
        "ionice": {"-c", "-n", "-p"},
        "sudo": {"-u", "-g"},
        "su": {"-c", "-s"},
        "runuser": {"-u", "-g"},
        "flock": {"-w", "-E"},
        "timeout": {"-s", "-k"},
        "chrt": set(),
        "taskset": set(),
    }.get(name, set())
    while rest and (rest[0].startswith("-") or _ASSIGNMENT.match(rest[0])):
        option = rest.pop(0)
        if option in takes_value and rest:
            rest.pop(0)
    if name in {"flock", "setlock", "lockrun", "timeout", "chrt", "taskset"} and rest:
        rest = rest[1:]  # the lock file, the duration, the priority, the mask
    if name == "su" and rest:
        rest = rest[1:]
    return rest


def _stem(word: str) -> str:
    base = os.path.basename(word.rstrip("/")) or word
    return _SCRIPT_EXT.sub("", base)


def command_name(command: str) -> str:
    """The meaningful word(s) of a command: `run-parts --report /etc/cron.daily` ->
    `run-parts-cron-daily`, `/usr/bin/php /var/www/cron.php` -> `php-cron`,
    `cd /srv && ./backup-db.sh` -> `backup-db`."""
    programs = [w for w in map(_program, _segments(command)) if w is not None]
    programs = [w for w in programs if not _inline_code(w)] or programs
    for words in programs:
        program = os.path.basename(words[0])
        args = [w for w in words[1:] if not w.startswith("-") and not _REDIRECT.match(w)]
        if program in _SHELLS and args and any(w.startswith("-") and "c" in w for w in words[1:]):
            inner = command_name(args[0])  # `sh -lc 'cd /srv && rake x'` names what the script runs
            if inner != "job":
                return inner
        if program == "run-parts" and args:
            return f"run-parts-{_stem(args[-1]).replace('.', '-')}"
        if _INTERPRETERS.match(program) and args and program not in {"bash", "sh", "dash", "zsh", "ksh"}:
            return f"{re.sub(r'[0-9.]+(-cli)?$', '', program)}-{_stem(args[0])}"
        if _INTERPRETERS.match(program) and args:
            return _stem(args[0])
        if program in _WITH_SUBJECT and args:
            return f"{_stem(program)}-{_stem(args[0])}"
        return _stem(program)
    return "job"


def base_job_id(user: str, command: str) -> str:
    """`<user>-<command name>`, slugified ('root-logrotate', 'www-data-php-cron')."""
    return slugify(f"{user}-{command_name(command)}")


def assign_ids(entries: Iterable[CronEntry], taken: Iterable[str] = ()) -> list[str]:
    """Unique ids in entry order: the second `root-backup` is `root-backup-2`, and so on.
    `taken` holds ids already used elsewhere in the registry."""
    used = set(taken)
    out = []
    for entry in entries:
        base = base_job_id(entry.user, entry.command)
        candidate, n = base, 1
        while candidate in used:
            n += 1
            suffix = f"-{n}"
            candidate = base[: _MAX_ID - len(suffix)].rstrip("-.") + suffix
        used.add(candidate)
        out.append(candidate)
    return out


# --- job dicts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    """A user's passwd entry, as both daemons read it when they start a job."""

    name: str
    uid: int
    home: str
    shell: str


@dataclass(frozen=True)
class ImportOptions:
    """What the command line decides: owner, defaults, the host's zone, users' homes;
    `pam_env` is what Debian cron's PAM session adds to every job (/etc/environment,
    /etc/default/locale) and `account_of` the passwd entry of a user (None: unknown)."""

    host_timezone: str = "UTC"
    owner: str | None = None
    adopt_defaults: bool = False
    home_of: Callable[[str], str | None] | None = None
    pam_env: tuple[tuple[str, str], ...] = ()
    account_of: Callable[[str], Account | None] | None = None
    dir_exists: Callable[[str], bool] | None = None
    anacron_installed: bool = False  # /usr/sbin/anacron exists: Debian's /etc/crontab hands cron.daily etc. to it


_ANACRON_GUARD = re.compile(r"(?:test -x|\[ -x) /usr/sbin/anacron\s*(?:\]\s*)?\|\|.*run-parts\b[^/]*(/etc/cron\.\w+)")


def job_timezone(entry: CronEntry, options: ImportOptions) -> str:
    """The zone cron scheduled the entry in, as written: CRON_TZ/TZ in force, else the host's."""
    return entry.timezone or options.host_timezone


@lru_cache(maxsize=256)
def same_zone(a: str, b: str) -> bool:
    """Whether two zone names keep the same clock (UTC and Etc/UTC, Asia/Calcutta and
    Asia/Kolkata): the same offset at every month from 1970 to 2040. An unknown name is only
    itself."""
    if a == b:
        return True
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        za, zb = ZoneInfo(a), ZoneInfo(b)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    t = datetime(1970, 1, 15, tzinfo=timezone.utc)
    while t.year < 2040:
        if t.astimezone(za).utcoffset() != t.astimezone(zb).utcoffset():
            return False
        t += timedelta(days=30, hours=7)
    return True


def carried_env(entry: CronEntry, options: ImportOptions) -> dict[str, str]:
    """The `env` that gives the job under chrono what cron gave it: PAM's variables and
    cron's SHELL and PATH defaults (unless --adopt-defaults), then the crontab's settings
    chrono can carry (not LOGNAME, which cron always sets to the user, as chrono does)."""
    preserve = not options.adopt_defaults
    settings = dict(entry.env)
    env = {k: v for k, v in options.pam_env if k not in settings and k not in _CRON_SETS} if preserve else {}
    env.update((k, v) for k, v in entry.env if _carries(k) and k != "LOGNAME")
    if preserve:
        env.setdefault("SHELL", CRON_DEFAULT_SHELL)
        env.setdefault("PATH", CRON_DEFAULT_PATH)
    return env


def _carries(name: str) -> bool:
    return bool(_CHRONO_ENV_NAME.fullmatch(name)) and not name.upper().startswith("CHRONO_")


def _home_of(user: str, options: ImportOptions) -> str | None:
    account = options.account_of(user) if options.account_of else None
    if account is not None:
        return account.home
    return options.home_of(user) if options.home_of else None


def build_job(entry: CronEntry, job_id: str, options: ImportOptions) -> dict[str, Any]:
    """The job dict for one entry, keys in reading order."""
    env = carried_env(entry, options)
    shell = dict(entry.env).get("SHELL", CRON_DEFAULT_SHELL)
    job: dict[str, Any] = {
        "id": job_id,
        "owner": options.owner or entry.user,
        "schedule": entry.schedule,
        "timezone": job_timezone(entry, options),
        "command": entry.command,
    }
    if entry.stdin is not None:
        job["stdin"] = entry.stdin
    job["user"] = entry.user
    job["shell"] = shell
    home = env.get("HOME") or _home_of(entry.user, options)
    if home and options.dir_exists is not None and not options.dir_exists(home):
        home = CRON_SPOOL_DIR  # cron's chdir(HOME) fails and the job starts where cron is
    if home:
        job["workdir"] = home
    if env:
        job["env"] = env
    job["idempotency_class"] = "unsafe"
    if entry.file_ignored:
        job["enabled"] = False  # cron never ran it: importing it must not start it
    if not options.adopt_defaults:
        job["tolerance_s"] = 0
        job["tolerance_reason"] = f"imported from {entry.file}:{entry.line}; cron fires on the minute"
        job["overlap"] = "allow"
        job["catchup"] = "none"
        job["run_on"] = "each"
    return job


def defaults_diff(job: dict[str, Any], min_gap_s: int | None) -> list[str]:
    """What chrono's own defaults would change for this job, one sentence each."""
    tolerance = min(300, (min_gap_s or 3000) // 10)
    return [
        f"tolerance 0s→{tolerance}s: the start would move by a fixed offset of up to {tolerance}s after the minute",
        "overlap allow→forbid: a slow run would be skipped instead of running twice",
        "catchup none→latest: after downtime the most recent missed run would run once, late (cron runs none)",
        "run_on each→any: in a fleet, one node would run it instead of every host that has it",
    ]


def entry_notes(entry: CronEntry, options: ImportOptions) -> list[str]:
    """What the operator should know about one imported entry."""
    notes = list(entry.notes)
    if entry.file_ignored:
        notes.append(
            f"imported disabled: {entry.file_ignored} (see the errors), so this line never ran under cron; "
            "set enabled: true once you want it to run"
        )
    env = dict(entry.env)
    if env.get("MAILTO") == "":
        notes.append('MAILTO="": cron mailed nothing for this job, nor does chrono; its output is in the run history')
    elif "MAILTO" in env:
        notes.append(
            f"MAILTO={env['MAILTO']!r}: cron mailed the job's output there; chrono sends no mail, the output "
            "is in the run history (the variable stays in env, as cron gave it to the job)"
        )
    if entry.timezone and entry.flavor == "debian" and not same_zone(entry.timezone, options.host_timezone):
        notes.append(
            f"scheduled in {entry.timezone}, as CRON_TZ/TZ in the file says; Debian's cron ignores both for "
            f"scheduling and ran this line in the host's zone ({options.host_timezone}), so the fire times differ "
            f"from cron's (see the differences; cronie honours CRON_TZ). To keep cron's times, set "
            f"timezone: {options.host_timezone}; the variables stay in env, as cron gave them to the job"
        )
    if entry.is_reboot:
        notes.append("@reboot runs once when chronod starts on a boot, not on every daemon restart")
    if entry.stdin is not None:
        notes.append(
            f"the command is cut at its first unescaped %: cron runs {entry.command!r} and gives the rest to it "
            "as standard input, and so does the imported job; if the % was meant literally (date +%F, "
            "$(( RANDOM % 600 ))), this job never did what it says under cron: write \\% where a % is meant"
        )
    guard = _ANACRON_GUARD.search(entry.command)
    if guard and options.anacron_installed:
        notes.append(
            f"anacron is installed here: this line does nothing under cron (its `test -x /usr/sbin/anacron` "
            f"succeeds), and anacron runs {guard.group(1)} instead; import /etc/anacrontab for what really runs"
        )
    if "LOGNAME" in env and env["LOGNAME"] != entry.user:
        notes.append(
            f"LOGNAME={env['LOGNAME']!r} is not carried over: cron sets LOGNAME to the user ({entry.user}) "
            "whatever the crontab says, as chrono does"
        )
    home = env.get("HOME") or _home_of(entry.user, options)
    if home and options.dir_exists is not None and not options.dir_exists(home):
        notes.append(
            f"HOME {home} does not exist: cron starts the job in its own directory {CRON_SPOOL_DIR}, "
            "and so does the imported job (workdir)"
        )
    return notes


# --- what the job is given: environment, standard input, command ----------------------


def cron_environment(
    entry: CronEntry, account: Account | None, pam_env: tuple[tuple[str, str], ...] = ()
) -> dict[str, str]:
    """The environment Debian's cron gives the job (checked with the daemon, tests/fixtures/cron_env):
    the crontab's settings in force at the line; SHELL, HOME (the passwd entry) and PATH
    where it set none; LOGNAME always the user; then PAM's variables where none of these
    set them (a PATH in /etc/environment does not reach cron jobs)."""
    env = dict(entry.env)
    env.setdefault("SHELL", CRON_DEFAULT_SHELL)
    if account is not None:
        env.setdefault("HOME", account.home)
    env.setdefault("PATH", CRON_DEFAULT_PATH)
    env["LOGNAME"] = entry.user
    for name, value in pam_env:
        env.setdefault(name, value)
    return env


def cron_workdir(cron_env: dict[str, str], dir_exists: Callable[[str], bool] | None) -> str:
    """Where cron starts the job: HOME, or its own spool directory when HOME does not exist."""
    home = cron_env.get("HOME", "/")
    return home if dir_exists is None or dir_exists(home) else CRON_SPOOL_DIR


def pam_environment(*texts: str) -> tuple[tuple[str, str], ...]:
    """The variables pam_env reads from /etc/environment and /etc/default/locale, which
    Debian's cron session adds to every job: `NAME=value` lines (`export` allowed, one
    pair of surrounding quotes removed), comments and blank lines skipped; later files win."""
    env: dict[str, str] = {}
    for text in texts:
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            line = line.removeprefix("export ").lstrip()
            name, eq, value = line.partition("=")
            if not eq or not _CHRONO_ENV_NAME.fullmatch(name):
                continue
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            env[name] = value
    return tuple(env.items())


def chrono_environment(job: dict[str, Any], account: Account | None) -> dict[str, str]:
    """The environment chronod gives the job (as its runner builds it), without the
    CHRONO_* variables it adds for every run: the user's HOME, SHELL (login shell), PATH,
    LOGNAME and USER, then the job's `env`."""
    env: dict[str, str] = {}
    if account is not None:
        env = {
            "HOME": account.home,
            "SHELL": account.shell or "/bin/sh",
            "PATH": CHRONO_ROOT_PATH if account.uid == 0 else CHRONO_USER_PATH,
            "LOGNAME": account.name,
            "USER": account.name,
        }
    env.update(job.get("env") or {})
    return env


@dataclass(frozen=True)
class GivenCheck:
    """Whether chrono gives the job what cron gave it: per part, why not ([] = the same),
    and the variables only chrono sets (harmless additions, listed, not differences)."""

    environment: tuple[str, ...] = ()
    stdin: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    chrono_adds: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            part: {"same": not why, "why": list(why)}
            for part, why in (("environment", self.environment), ("stdin", self.stdin), ("command", self.command))
        } | {"chrono_adds": list(self.chrono_adds)}


def check_given(entry: CronEntry, job: dict[str, Any], options: ImportOptions) -> GivenCheck:
    """Compare what cron gives the job (environment, working directory, standard input,
    shell and command) with what chronod will give the imported job, and say why they differ."""
    if options.account_of is None:
        return GivenCheck(environment=("not compared: the user's passwd entry was not looked up",))
    account = options.account_of(entry.user)
    if account is None:
        unknown = (f"user {entry.user!r} is not in this host's passwd: neither daemon can start the job here",)
        return GivenCheck(environment=unknown)
    cron = cron_environment(entry, account, options.pam_env)
    chrono = chrono_environment(job, account)
    why = [
        _env_difference(name, cron.get(name), chrono.get(name), options)
        for name in cron
        if cron[name] != chrono.get(name)
    ]
    adds = [f"{name}={chrono[name]}" for name in chrono if name not in cron]
    workdir, cron_dir = job.get("workdir", "/"), cron_workdir(cron, options.dir_exists)
    if workdir != cron_dir:
        why.append(f"working directory: cron starts the job in {cron_dir}, chrono in {workdir}")
    cron_command = entry.cron_command if entry.cron_command is not None else entry.command
    cron_stdin = entry.cron_stdin if entry.cron_command is not None else entry.stdin
    command = []
    if job["shell"] != cron["SHELL"]:
        command.append(f"cron runs it with {cron['SHELL']} -c, chrono with {job['shell']} -c")
    if job["command"] != cron_command:
        command.append(_text_difference(cron_command, job["command"]))
    stdin = []
    if (job.get("stdin") or "") != (cron_stdin or ""):
        stdin.append(_text_difference(cron_stdin or "", job.get("stdin") or ""))
    return GivenCheck(
        tuple(why),
        tuple(stdin),
        tuple(command),
        tuple(adds) + ("CHRONO_JOB_ID, CHRONO_RUN_ID and the other CHRONO_* variables",),
    )


def _env_difference(name: str, cron: str | None, chrono: str | None, options: ImportOptions) -> str:
    """One variable cron and chrono give differently, and why."""
    gives = f"cron gives {name}={cron!r}" + (f", chrono {chrono!r}" if chrono is not None else ", chrono nothing")
    if not name:
        return f"cron gives a nameless variable ({cron!r}, from a line '=value'): chrono cannot carry it"
    if not _CHRONO_ENV_NAME.fullmatch(name):
        return (
            f"{gives}: {name!r} is not a name chrono's env takes (letters, digits and '_', not starting with a digit)"
        )
    if name.upper().startswith("CHRONO_"):
        return f"{gives}: CHRONO_* variables are chrono's own for every run and cannot be set"
    if options.adopt_defaults and (name in ("SHELL", "PATH") or name in dict(options.pam_env)):
        return f"{gives}: --adopt-defaults leaves cron's defaults (SHELL, PATH, PAM's variables) out"
    return gives


def _text_difference(cron: str, chrono: str) -> str:
    if cron.replace("\r", "") == chrono:
        return (
            f"cron passes the carriage return of the CRLF line end on ({cron!r}); chrono strips it "
            "(under cron the job most likely failed)"
        )
    return f"cron gives {cron!r}, chrono {chrono!r}"


# --- YAML ----------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings; PyYAML quotes what YAML 1.1 would mis-read."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def quote_comment(text: str) -> str:
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class SourceLike(Protocol):
    """Where a job came from: a crontab entry, a timer, an anacrontab line."""

    @property
    def file(self) -> str: ...

    @property
    def line(self) -> int: ...

    @property
    def text(self) -> str: ...


def registry_yaml(source: str, jobs: Sequence[tuple[SourceLike, dict[str, Any]]]) -> str:
    """One registry file: a header naming the source, then each job under a comment with
    its source line and the line as written."""
    out = [
        f"# Imported from {quote_comment(source)} by `chronoctl import`.",
        "# Edit freely; re-importing the same file gives the same ids.",
        "jobs:" if jobs else "jobs: []",
    ]
    for entry, job in jobs:
        out.append(f"  # source: {quote_comment(entry.file)}:{entry.line}")
        out.append(f"  #   {quote_comment(entry.text.strip())}")
        text = yaml.dump(
            [job], Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=10**6
        )
        out.extend("  " + line if line else line for line in text.rstrip("\n").split("\n"))
    return "\n".join(out) + "\n"


def registry_file_name(source: str, user: str | None = None) -> str:
    """`imported-etc-crontab.yaml`, `imported-cron.d-php.yaml`; a user crontab (spool
    file or standard input) is `imported-crontab-<user>.yaml`."""
    parts = [p for p in source.split("/") if p]
    if user:
        stem = f"crontab-{user}"
    elif len(parts) >= 2 and parts[-2] == "cron.d":
        stem = f"cron.d-{parts[-1]}"
    else:
        stem = "-".join(parts[-2:])
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "crontab"
    return f"imported-{stem}.yaml"


# --- the equivalence check -----------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """Where chrono's fire times and cron's differ for one job, by local date."""

    job_id: str
    source: str
    date: str
    cron: tuple[str, ...]  # UTC instants only cron starts the job at
    chrono: tuple[str, ...]  # UTC instants only chrono fires at

    def message(self, shown: int = 3) -> str:
        """One line: the first `shown` instants on each side, then how many more (--json has all)."""

        def few(items: tuple[str, ...]) -> str:
            if not items:
                return "—"
            more = f" and {len(items) - shown} more" if len(items) > shown else ""
            return ", ".join(items[:shown]) + more

        return (
            f"{self.job_id} ({self.source}) on {self.date}: cron only {few(self.cron)}; chrono only {few(self.chrono)}"
        )


@dataclass
class Equivalence:
    """The outcome of comparing one job: how much was compared and what differed."""

    job_id: str
    compared: str  # "full", "sampled", "skipped (…)"
    fires: int = 0
    differences: list[Difference] = field(default_factory=list)


FULL_COMPARE_LIMIT = 20_000  # cron starts in 400 days; above this, compare sample windows
_EDGE = timedelta(hours=6)


def _windows(
    start: datetime, end: datetime, transitions: list[datetime], tz: str = "UTC"
) -> list[tuple[datetime, datetime]]:
    """For frequent jobs: the first day, six hours either side of every month's first
    midnight in the zone (where day fields act) and of every clock change (where DST rules do)."""
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(tz)
    spans = [(start, start + timedelta(days=1))]
    local = start.astimezone(zone)
    year, month = local.year, local.month
    while True:
        first = datetime(year, month, 1, tzinfo=zone).astimezone(timezone.utc)
        if first - _EDGE >= end:
            break
        spans.append((first - _EDGE, first + _EDGE))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    spans += [(t - _EDGE, t + _EDGE) for t in transitions]
    spans = sorted((max(a, start), min(b, end)) for a, b in spans if b > start and a < end)
    merged: list[tuple[datetime, datetime]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def zone_transitions(tz: str, start: datetime, end: datetime) -> list[datetime]:
    """UTC instants in [start, end) at which the zone's offset changes (to the hour)."""
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(tz)
    out = []
    t = start.replace(minute=0, second=0, microsecond=0)
    prev = t.astimezone(zone).utcoffset()
    while t < end:
        t += timedelta(hours=1)
        off = t.astimezone(zone).utcoffset()
        if off != prev:
            out.append(t)
            prev = off
    return out


def compare_with_cron(
    job_id: str,
    entry: CronEntry,
    tz: str,
    now: datetime,
    chrono_fires: Callable[[datetime, datetime], list[datetime]],
    days: int = EQUIVALENCE_DAYS,
    cron_tz: str | None = None,
) -> Equivalence:
    """chrono's fire times (in `tz`) against Debian cron's (the `vixie` simulation of the
    line as written, in `cron_tz`, else `tz`) over (now, now + days]. Debian's cron
    schedules every line in the host's zone, whatever CRON_TZ or TZ say (checked with the
    daemon): callers pass the host's zone as `cron_tz`. `chrono_fires(start, end)` is the
    compiled schedule's `fires`. Jobs with more than FULL_COMPARE_LIMIT starts are compared
    on sample windows."""
    if entry.is_reboot:
        return Equivalence(job_id, "skipped (@reboot has no fire times)")
    if entry.file_ignored:
        return Equivalence(job_id, "skipped (cron ignores the file; the job is imported disabled)")
    # a crontab repeats its schedules (every `0 * * * *` of a file): compare each once.
    # compile_schedule returns one object per expression and zone, so its `fires` names it.
    cron_zone = cron_tz or tz
    key = (entry.cron_schedule, getattr(chrono_fires, "__self__", chrono_fires), tz, cron_zone, now, days, entry.flavor)
    if key not in _COMPARED:
        _COMPARED[key] = _compare(
            entry.cron_schedule, cron_zone, now, now + timedelta(days=days), chrono_fires, tz, entry.flavor
        )
    compared, fires, only_cron, only_chrono = _COMPARED[key]
    result = Equivalence(job_id, compared, fires=fires)
    result.differences = _by_date(job_id, entry, tz, only_cron, only_chrono)
    return result


_COMPARED: dict[tuple[Any, ...], tuple[str, int, list[datetime], list[datetime]]] = {}


def _compare(
    cron_schedule: str,
    tz: str,
    now: datetime,
    end: datetime,
    chrono_fires: Callable[[datetime, datetime], list[datetime]],
    chrono_tz: str | None = None,
    flavor: str = "debian",
) -> tuple[str, int, list[datetime], list[datetime]]:
    """(how compared, cron's start count, starts only cron has, fires only chrono has), by
    minute and counting repeats: a DST gap's skipped times start once each under cron, all
    in the minute after the jump, and chrono fires each one second apart in that minute.
    A job that may start more than FULL_COMPARE_LIMIT times (more than 50 times a day) is
    compared on windows only (the count is then the windows' starts), so an every-minute
    line costs a fraction of a second rather than 400 days of minutes."""
    from chronod.core import busybox
    from chronod.core.vixie import minutes_of, parse_entry, simulate

    run: Callable[[datetime, datetime], list[datetime]]
    if flavor == "busybox":
        sets = busybox.parse_line(cron_schedule.split())
        per_day = len(sets.minutes) * len(sets.hours)
        run = lambda a, b: busybox.simulate(sets, tz, a, b)  # noqa: E731
    else:
        entry = parse_entry(cron_schedule)
        per_day = len(entry.minutes) * len(entry.hours)  # at most: every day may match
        run = lambda a, b: simulate(cron_schedule, tz, a, b)  # noqa: E731
    if per_day * (end - now).days <= FULL_COMPARE_LIMIT:
        spans, compared = [(now, end)], "full"
    else:
        changes = zone_transitions(tz, now, end)
        if chrono_tz and chrono_tz != tz:
            changes = sorted(set(changes) | set(zone_transitions(chrono_tz, now, end)))
        spans, compared = _windows(now, end, changes, tz), "sampled"
    only_cron: Counter[datetime] = Counter()
    only_chrono: Counter[datetime] = Counter()
    starts = 0
    for a, b in spans:
        theirs = Counter(run(a, b))
        mine = Counter(minutes_of(chrono_fires(a, b)))
        starts += sum(theirs.values())
        only_cron += theirs - mine
        only_chrono += mine - theirs
    return compared, starts, sorted(only_cron.elements()), sorted(only_chrono.elements())


def _by_date(
    job_id: str, entry: CronEntry, tz: str, only_cron: list[datetime], only_chrono: list[datetime]
) -> list[Difference]:
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(tz)
    dates: dict[str, tuple[list[str], list[str]]] = {}
    for bucket, instants in ((0, only_cron), (1, only_chrono)):
        for t in sorted(instants):
            local = t.astimezone(zone)
            dates.setdefault(local.date().isoformat(), ([], []))[bucket].append(
                f"{t.strftime('%Y-%m-%dT%H:%MZ')} ({local.strftime('%H:%M %Z')})"
            )
    source = f"{entry.file}:{entry.line}"
    return [Difference(job_id, source, d, tuple(c), tuple(m)) for d, (c, m) in sorted(dates.items())]


# --- risk ----------------------------------------------------------------------------


def crowded_minutes(fires_by_job: dict[str, list[datetime]], threshold: int = 10) -> list[tuple[str, int]]:
    """UTC minutes of the day (HH:MM) at which at least `threshold` jobs start together,
    busiest first, with the largest number seen."""
    per_minute: Counter[datetime] = Counter()
    for instants in fires_by_job.values():
        per_minute.update(set(instants))
    worst: dict[str, int] = {}
    for t, n in per_minute.items():
        if n >= threshold:
            key = t.strftime("%H:%M")
            worst[key] = max(worst.get(key, 0), n)
    return sorted(worst.items(), key=lambda kv: (-kv[1], kv[0]))
