"""`chronoctl import`: crontabs -> registry files, with the equivalence check against cron.

The I/O edge of the importer: reads the files (or standard input), the host's zone, the
users' home directories and the clock; `chronoctl.crontab` and `chronoctl.importer` do the
rest. Exit codes: 0 clean; 1 when any line had an error (the other lines are still
imported, or with --dry-run only reported); 2 for usage errors.
"""

from __future__ import annotations

import os
import pwd
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import AbstractSet, Any, Optional

import typer

from chronoctl.crontab import CronEntry, ParsedCrontab, parse_busybox, parse_crontab
from chronoctl.errors import EXIT_NO, EXIT_OK, EXIT_UNREACHABLE, CliError, Unreachable, UsageError
from chronoctl.importer import (
    Account,
    Difference,
    ImportOptions,
    assign_ids,
    build_job,
    check_given,
    compare_with_cron,
    crowded_minutes,
    defaults_diff,
    entry_notes,
    job_timezone,
    pam_environment,
    quote_comment,
    registry_file_name,
    registry_yaml,
)

CRON_D_NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # Debian cron's rule for /etc/cron.d file names


@dataclass
class Source:
    """One crontab to import: where it came from, its text, its format and user."""

    label: str  # the path as given, or "<stdin>"
    text: str
    format: str
    user: str | None
    registry_name: str
    guessed: bool = False
    cron_ignores: str | None = None  # why Debian cron refuses the file itself (owner, mode, links)
    flavor: str = "debian"  # whose cron wrote it: debian, cronie, busybox
    guessed_flavor: bool = False


@dataclass
class ImportResult:
    """Everything `import` found, ready to print or write."""

    jobs: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    disabled: list[dict[str, Any]] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # registry file name -> YAML text
    risky: list[dict[str, Any]] = field(default_factory=list)
    crowded: list[tuple[str, int]] = field(default_factory=list)
    compared: dict[str, str] = field(default_factory=dict)
    scheduler: str = "cron"  # what the jobs came from: cron, systemd, anacron


# --- reading sources -----------------------------------------------------------------


def host_timezone(etc: Path = Path("/etc")) -> str:
    """The host's zone as cron sees it: /etc/timezone, else /etc/localtime's link target, else UTC."""
    try:
        name = (etc / "timezone").read_text().strip()
        if name:
            return name
    except OSError:
        pass
    try:
        target = os.readlink(etc / "localtime")
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    except OSError:
        pass
    return "UTC"


def _home_of(user: str) -> str | None:
    try:
        return pwd.getpwnam(user).pw_dir
    except KeyError:
        return None


def _account_of(user: str) -> Account | None:
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None
    return Account(pw.pw_name, pw.pw_uid, pw.pw_dir, pw.pw_shell)


def host_pam_env(etc: Path = Path("/etc")) -> tuple[tuple[str, str], ...]:
    """What Debian cron's PAM session (pam_env) adds to every job on this host."""
    texts = []
    for name in ("environment", "default/locale"):
        try:
            texts.append((etc / name).read_text(errors="replace"))
        except OSError:
            pass
    return pam_environment(*texts)


def import_options(owner: str | None, adopt_defaults: bool) -> ImportOptions:
    """The options of an import on this host: its zone, passwd, PAM environment and directories."""
    return ImportOptions(
        host_timezone=host_timezone(),
        owner=owner,
        adopt_defaults=adopt_defaults,
        home_of=_home_of,
        pam_env=host_pam_env(),
        account_of=_account_of,
        dir_exists=os.path.isdir,
        anacron_installed=os.access("/usr/sbin/anacron", os.X_OK),
    )


def _user_exists(user: str) -> bool:
    return _home_of(user) is not None


def _current_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _read_text(path: Path) -> str:
    """A crontab, at most 1 MiB of it (chronoctl.limits); bytes that are not UTF-8 are kept
    as surrogate escapes, which crontab.py reports."""
    from chronoctl.limits import read_bounded

    try:
        return read_bounded(path, str(path))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file", "check the path") from None


def _detect(path: Path, fmt: str | None, user: str | None, text: str) -> tuple[str, str | None, bool]:
    """(format, user, guessed) for a file, from --format/--user, its path, or its content."""
    parent = path.parent.name
    if fmt is None and not user and parent != "crontabs" and not _is_cron_system_file(path) and _theirs(path):
        return "user", _file_user(path), True  # another user's file holds that user's jobs (`_sniff`)
    if fmt is None:
        if str(path) == "/etc/crontab" or parent == "cron.d":
            fmt = "system"
        elif parent == "crontabs":
            fmt, user = "user", user or path.name
        elif user:
            fmt = "user"
        else:
            return _sniff(text, path)
    if fmt == "user" and not user:
        user = path.name if parent == "crontabs" else _file_user(path)
    return fmt, user, False


def _sniff(text: str, path: Path) -> tuple[str, str | None, bool]:
    """A file whose path says nothing: system format when it is root's (or the caller's)
    and every entry names a known user. A file another user owns is that user's crontab,
    whatever it holds or wherever it lies (`_detect`): cron never reads a file it does not
    own as a system crontab (WRONG FILE OWNER), and a line such as `* * * * * root cmd`
    in it is `root cmd` run as its owner."""
    if not _theirs(path):
        parsed = parse_crontab(text, str(path), "system")
        if parsed.entries and not parsed.errors and all(_user_exists(e.user) for e in parsed.entries):
            return "system", None, True
    return "user", _file_user(path), True


def _theirs(path: Path) -> bool:
    """Whether the file belongs to another user than root and the caller."""
    return _owner_uid(path) not in (0, None, os.geteuid())


def _owner_uid(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def _file_user(path: Path) -> str:
    """Whose a user crontab is when neither its path nor --user says: its owner when that
    is not root (a user's file holds that user's jobs, never root's), else the caller."""
    uid = _owner_uid(path)
    if uid not in (0, None):
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)
    return _current_user()


def _is_cron_system_file(path: Path) -> bool:
    """/etc/crontab itself, or a file directly in /etc/cron.d: the files whose owner, mode
    and links Debian cron checks (a copy elsewhere is read as it is)."""
    resolved = path.resolve()
    return resolved == Path("/etc/crontab") or resolved.parent == Path("/etc/cron.d")


def cron_file_problem(st: os.stat_result) -> str | None:
    """Why Debian cron refuses a system crontab file before reading it, as its log says."""
    if st.st_uid != 0:
        return "it is not owned by root (cron logs WRONG FILE OWNER)"
    if st.st_mode & 0o022:
        return "it is group- or world-writable (cron logs INSECURE MODE)"
    if st.st_nlink > 1:
        return "it has more than one hard link (cron logs NUMBER OF HARD LINKS > 1)"
    return None


def _cron_reads(directory: Path) -> list[Path]:
    """The files in a directory that cron itself would read (cron.d naming rules)."""
    out = []
    for name in sorted(os.listdir(directory)):
        p = directory / name
        if CRON_D_NAME.match(name) and p.is_file():
            out.append(p)
    return out


def flavor_of(path: Path, flavor: str | None) -> tuple[str, bool]:
    """(flavor, guessed): --flavor, else the path's: /etc/crontabs/USER is busybox's (Alpine),
    /var/spool/cron/USER cronie's (Red Hat, Fedora); anything else Debian's."""
    if flavor is not None:
        return flavor, False
    parts = path.absolute().parts
    if len(parts) >= 3 and parts[-3:-1] == ("etc", "crontabs"):
        return "busybox", True
    if len(parts) >= 4 and parts[-4:-1] == ("var", "spool", "cron"):
        return "cronie", True
    return "debian", False


def collect_sources(
    path: str, fmt: str | None, user: str | None, stdin_text: str | None = None, flavor: str | None = None
) -> list[Source]:
    """The crontabs named by PATH (a file, a directory, or `-`)."""
    if path == "-":
        if stdin_text is not None:
            text = stdin_text
        else:
            from chronoctl.limits import read_stream

            text = read_stream(sys.stdin.buffer, "standard input").decode("utf-8", errors="surrogateescape")
        the_user: str | None = user or _current_user()
        the_fmt = fmt or "user"
        return [
            Source(
                "<stdin>",
                text,
                the_fmt,
                the_user if the_fmt == "user" else None,
                registry_file_name("-", the_user if the_fmt == "user" else None),
            )
        ]
    p = Path(path)
    if not p.exists():
        raise UsageError(
            f"{path}: no such file or directory",
            "give a crontab file, a directory such as /etc/cron.d, or - for standard input",
        )
    files = _cron_reads(p) if p.is_dir() else [p]
    sources = []
    for f in files:
        text = _read_text(f)
        the_fmt, the_user, guessed = _detect(f, fmt, user, text)
        if p.is_dir() and fmt is None and p.name != "crontabs" and not user and not _theirs(f):
            the_fmt, the_user, guessed = "system", None, False
        the_flavor, flavor_guessed = flavor_of(f, flavor)
        if the_flavor == "busybox":
            the_fmt, the_user = "user", user or f.name
        name = registry_file_name(str(f), the_user if the_fmt == "user" else None)
        refused = cron_file_problem(f.stat()) if _is_cron_system_file(f) and the_flavor == "debian" else None
        sources.append(Source(str(f), text, the_fmt, the_user, name, guessed, refused, the_flavor))
        if flavor_guessed:
            sources[-1].guessed_flavor = True
    return sources


# --- the import itself ---------------------------------------------------------------

_HEADER = re.compile(r"# Imported from (.*) by `chronoctl import`\.")


def _header_source(label: str) -> str:
    """The crontab a registry file's header names: its absolute path (the same file
    imported again from another directory is the same crontab), or <stdin>."""
    return label if label == "<stdin>" else os.path.abspath(label)


def _same_source(header: str, label: str) -> bool:
    """Whether the crontab a registry file's header names is `label`. Standard input is
    taken for the same crontab each time (nothing tells two apart). A header written
    before headers held absolute paths (relative to wherever that import ran) matches by
    the file's name, as every import before would have replaced it."""
    if "<stdin>" in (header, label):
        return header == label
    if header == quote_comment(_header_source(label)) or os.path.realpath(header) == os.path.realpath(label):
        return True
    return not os.path.isabs(header) and os.path.basename(header) == os.path.basename(label)


def _refuse_another_import(reg: Path, sources: list[Source]) -> None:
    """An import writes one registry file per crontab, named after it (or after its user):
    refuse to replace a file that the import of another crontab wrote, or to write two
    crontabs into one file. A second crontab of the same user (the spool file, then
    `crontab -l | chronoctl import -`; two files with `--user root`) replaced the first
    one's jobs without a word. Re-importing the same crontab replaces its file, as ever."""
    seen: dict[str, str] = {}
    for src in sources:
        target = reg / src.registry_name
        if src.registry_name in seen:
            raise UsageError(
                f"{seen[src.registry_name]} and {src.label} would both be written to {target}",
                "import them one at a time, into different registry directories (--registry)",
            )
        seen[src.registry_name] = src.label
        try:
            with open(target, encoding="utf-8", errors="replace") as f:
                first = f.readline().rstrip("\n")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
        except OSError as e:
            raise CliError(f"{target}: cannot read it: {e.strerror}", "check its permissions") from None
        m = _HEADER.fullmatch(first)
        if m is None:
            raise CliError(
                f"{target} exists and was not written by `chronoctl import`; importing {src.label} would replace it",
                f"move {target} aside first, or import into another registry directory (--registry)",
            )
        before = m.group(1)
        if _same_source(before, src.label):
            continue
        label = _header_source(src.label)
        raise CliError(
            f"{target} holds the jobs imported from {before}; importing {label} would replace them",
            f"if {label} replaces {before}, remove {target} first; "
            "otherwise import it into another registry directory (--registry)",
        )


def _existing_ids(registry: Path, ours: set[str]) -> set[str]:
    """Ids defined by registry files other than the ones this import (re)writes."""
    import yaml

    taken: set[str] = set()
    if not registry.is_dir():
        return taken
    for f in sorted(registry.glob("*.y*ml")):
        if f.name in ours:
            continue
        try:
            doc = yaml.safe_load(f.read_text())
        except (OSError, yaml.YAMLError):
            continue
        for job in (doc or {}).get("jobs") or [] if isinstance(doc, dict) else []:
            if isinstance(job, dict) and isinstance(job.get("id"), str):
                taken.add(job["id"])
    return taken


def run_import(
    sources: list[Source], options: ImportOptions, now: datetime, taken: AbstractSet[str] = frozenset()
) -> ImportResult:
    """Parse, name, build, check and render every source. Pure apart from the schedule math."""
    result = ImportResult()
    parsed: list[tuple[Source, ParsedCrontab]] = []
    for src in sources:
        if src.flavor == "busybox":
            pc = parse_busybox(src.text, src.label, src.user or _current_user())
        else:
            pc = parse_crontab(src.text, src.label, src.format, src.user, src.cron_ignores, src.flavor)
        parsed.append((src, pc))
        result.notes.extend(pc.notes)
        if src.guessed_flavor:
            result.notes.append(
                f"{src.label}: read with {src.flavor}'s rules (guessed from the path; use --flavor to say)"
            )
        if src.guessed:
            result.notes.append(
                f"{src.label}: read as a {src.format} crontab (guessed from its content; use --format to say)"
            )
        result.errors += [{"file": e.file, "line": e.line, "message": e.message, "hint": e.hint} for e in pc.errors]
        result.disabled += [{"file": d.file, "line": d.line, "text": d.text} for d in pc.disabled]
    all_entries = [e for _, pc in parsed for e in pc.entries]
    ids = dict(zip(map(id, all_entries), assign_ids(all_entries, taken)))
    fires: dict[str, list[datetime]] = {}
    for src, pc in parsed:
        kept = []
        for entry in pc.entries:
            job = _import_entry(entry, ids[id(entry)], options, now, result, fires)
            if job is not None:
                kept.append((entry, job))
        if kept:
            result.files[src.registry_name] = registry_yaml(
                _header_source(src.label), [(e, _spec_only(j)) for e, j in kept]
            )
    result.crowded = crowded_minutes(fires)
    result.errors.sort(key=lambda e: (e["file"], e["line"]))
    return result


_EXTRA_KEYS = ("source", "notes", "would_change", "equivalence")


def _spec_only(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if k not in _EXTRA_KEYS}


def _import_entry(
    entry: CronEntry,
    job_id: str,
    options: ImportOptions,
    now: datetime,
    result: ImportResult,
    fires: dict[str, list[datetime]],
) -> dict[str, Any] | None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from chronod.core.schedule import ScheduleError, compile_schedule

    tz = job_timezone(entry, options)
    try:
        ZoneInfo(tz)
        schedule = compile_schedule(entry.schedule, tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        if isinstance(exc, ZoneInfoNotFoundError) or "zone" in message.lower():
            message, hint = (
                f"unknown time zone {tz!r} (CRON_TZ/TZ above this line)",
                "use an IANA name such as Europe/Paris",
            )
        else:
            hint = getattr(exc, "hint", "") if isinstance(exc, ScheduleError) else ""
            message = f"chrono cannot read {entry.schedule!r}: {message}"
        result.errors.append({"file": entry.file, "line": entry.line, "message": message, "hint": hint})
        return None
    job = build_job(entry, job_id, options)
    notes = entry_notes(entry, options)
    if not _user_exists(entry.user):
        notes.append(
            f"user {entry.user!r} does not exist on this host, so cron here has not been running this line "
            '(in /etc/crontab and /etc/cron.d it refuses the whole file: "bad username")'
        )
    if entry.flavor == "busybox":
        job.pop("stdin", None)
        job["overlap"] = "forbid"  # busybox does not start a line whose last run still goes
        if schedule.is_fixed_time:  # busybox follows the wall clock for every line
            job.update(dst_gap="skip", dst_repeat="both")
            schedule = compile_schedule(entry.schedule, tz, "skip", "both")
    cron_tz = tz if entry.flavor == "cronie" else options.host_timezone  # cronie honours CRON_TZ
    eq = compare_with_cron(job_id, entry, tz, now, schedule.fires, cron_tz=cron_tz)
    result.differences += eq.differences
    result.compared[job_id] = eq.compared
    given = check_given(entry, job, options) if entry.flavor != "busybox" else _busybox_given()
    live = not entry.is_reboot and not entry.file_ignored  # a disabled job neither crowds a minute nor meets DST
    events = schedule.dst_events(now, now + timedelta(days=400)) if live and schedule.is_fixed_time else ()
    if entry.flavor != "busybox":
        job.update(_cron_dst_policy(events))
    job.update(
        source={"file": entry.file, "line": entry.line},
        notes=notes,
        would_change=[] if options.adopt_defaults else defaults_diff(job, schedule.min_gap_s()),
        equivalence={
            "compared": eq.compared,
            "cron_starts": eq.fires,
            "differences": len(eq.differences),
            **given.as_json(),
        },
    )
    result.jobs.append(job)
    if live:
        fires[job_id] = _week_of_starts(entry.cron_schedule, tz, now)
        if events:
            result.risky.append(
                {
                    "id": job_id,
                    "source": f"{entry.file}:{entry.line}",
                    "reason": "; ".join(f"{e.date}: {e.effect}" for e in events),
                }
            )
    return job


@lru_cache(maxsize=256)
def _week_of_starts(cron_schedule: str, tz: str, now: datetime) -> list[datetime]:
    """cron's starts in the coming week (the crowded-minutes check), once per schedule."""
    from chronod.core.vixie import simulate

    return simulate(cron_schedule, tz, now, now + timedelta(days=7))


def _busybox_given() -> Any:
    from chronoctl.importer import GivenCheck

    return GivenCheck(
        environment=(
            "not compared: busybox gives LOGNAME, USER, HOME, SHELL (the crontab's, else /bin/sh) and PATH (the "
            "crontab's, else crond's own); chronod gives the user's",
        )
    )


# What Debian's cron does when a fixed time meets a clock change: a time the spring-forward
# gap skips runs once right after the jump, a time the fall-back repeats runs in the first pass.
_CRON_DST = {"spring-forward": ("dst_gap", "shift"), "fall-back": ("dst_repeat", "first")}


def _cron_dst_policy(events: Any) -> dict[str, str]:
    """Cron's own DST behaviour, written out for a job whose time a clock change meets: the
    defaults already are cron's, but written out the job says so, and passes validate --strict."""
    return dict(_CRON_DST[e.change] for e in events if e.change in _CRON_DST)


# --- output --------------------------------------------------------------------------


def as_json(
    result: ImportResult, written: list[str], dry_run: bool, would_write: list[str] | None = None
) -> dict[str, Any]:
    """The `--json` document: jobs and errors, plus disabled lines, differences and a summary."""
    return {
        "jobs": result.jobs,
        "errors": result.errors,
        "disabled": result.disabled,
        "differences": [
            {
                "id": d.job_id,
                "source": d.source,
                "date": d.date,
                "cron_only": list(d.cron),
                "chrono_only": list(d.chrono),
            }
            for d in result.differences
        ],
        "summary": {
            "imported": len(result.jobs),
            "disabled": len(result.disabled),
            "errors": len(result.errors),
            "differences": len(result.differences),
            "not_as_cron_gives": sum(1 for j in result.jobs if _given_differences(j)),
            "risky": result.risky,
            "crowded_minutes": [{"utc_minute": m, "jobs": n} for m, n in result.crowded],
            "notes": result.notes,
            "dry_run": dry_run,
            "written": written,
            "would_write": would_write if would_write is not None else written,
            "fire_differently": sorted(j["id"] for j in result.jobs if _fires_differently(j)),
        },
    }


def print_human(result: ImportResult, written: list[str], dry_run: bool) -> None:
    """Tables and lists for a person at a terminal."""
    from chronoctl.render import Column, echo, echo_wrapped, escape_line, print_table

    rows = [
        {
            "id": j["id"],
            "schedule": j["schedule"],
            "timezone": j["timezone"],
            "user": j["user"],
            "source": _source(j),
            "check": _check_cell(j),
            "given": _given_cell(j),
        }
        for j in result.jobs
    ]
    print_table(
        rows,
        [
            "id",
            # a timer's calendar of several expressions wraps between them; a cron line does not
            Column("schedule", wrap=result.scheduler == "systemd"),
            Column("timezone", drop=3),
            Column("user", drop=1),
            Column("source", drop=2),
            # the verdicts are what a dry run is for: never dropped on a narrow terminal
            Column("check", f"SAME AS {result.scheduler.upper()}"),
            Column("given", "ENV/STDIN/COMMAND"),
        ],
        title="Imported jobs",
    )
    for title, items in (
        (
            "Errors (not imported)",
            [f"{_where(e)}: {e['message']}" + (f"\n    hint: {e['hint']}" if e["hint"] else "") for e in result.errors],
        ),
        (
            "Disabled (commented out, not imported)",
            [f"{d['file']}:{d['line']}: {d['text'].strip()}" for d in result.disabled],
        ),
        ("Differences from cron", _difference_lines(result.differences)),
        (
            f"Not fired as {result.scheduler} fires it",
            [f"{j['id']} ({_source(j)}): {why}" for j in result.jobs for why in j["equivalence"].get("why", [])],
        ),
        (
            "Not what cron gives the job",
            [
                f"{j['id']} ({j['source']['file']}:{j['source']['line']}) {part}: {why}"
                for j in result.jobs
                for part, why in _given_differences(j)
            ],
        ),
        ("Risky: fixed-time jobs on DST days", [f"{r['id']} ({r['source']}): {r['reason']}" for r in result.risky]),
        ("Risky: many jobs start in the same minute", [f"{m} UTC: {n} jobs" for m, n in result.crowded]),
        ("Notes", result.notes + fold_notes(result.jobs)),
    ):
        if items:
            echo("")
            echo(f"{title}:")
            for item in items:
                first, *more = item.split("\n    ")
                echo_wrapped(escape_line(first), "  ", hang="    ")
                for part in more:
                    echo_wrapped(escape_line(part), "    ", hang="      ")
    if result.jobs and result.jobs[0]["would_change"]:
        echo("")
        echo_wrapped("Under chrono's defaults (--adopt-defaults), every imported job would change:")
        for line in result.jobs[0]["would_change"]:
            echo_wrapped(line, "  ", hang="    ")
    echo("")
    verb = "would write" if dry_run else "wrote"
    off = sum(1 for j in result.jobs if j["equivalence"]["compared"].startswith("skipped (cron ignores"))
    imported = f"{len(result.jobs)} imported" + (f" ({off} of them disabled: cron ignores their file)" if off else "")
    echo_wrapped(
        f"{imported}, {len(result.disabled)} commented out (not imported), {len(result.errors)} errors, "
        f"{sum(1 for j in result.jobs if _fires_differently(j))} not fired as {result.scheduler} fires them, "
        f"{len(result.risky) + len(result.crowded)} risky; "
        f"{verb} {', '.join(written) or 'nothing'}"
    )


def _where(error: dict[str, Any]) -> str:
    """`file:line`, or the file alone for what concerns the whole file (line 0)."""
    return f"{error['file']}:{error['line']}" if error["line"] else str(error["file"])


def _source(job: dict[str, Any]) -> str:
    src = job["source"]
    return f"{src['file']}:{src['line']}" if src["line"] else src["file"]


def fold_notes(jobs: list[dict[str, Any]], shown: int = 3) -> list[str]:
    """Each job's notes, a note that several jobs share said once with the jobs it is about
    (the first few named, then how many more): a crontab of forty jobs under one MAILTO gets
    one MAILTO note, not forty."""
    by_note: dict[str, list[str]] = {}
    for j in jobs:
        for n in j["notes"]:
            by_note.setdefault(n, []).append(j["id"])
    out = []
    for note, ids in by_note.items():
        if len(ids) == 1:
            out.append(f"{ids[0]}: {note}")
        else:
            more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
            out.append(f"{', '.join(ids[:shown])}{more} ({len(ids)} jobs): {note}")
    return out


_DATES_SHOWN = 3  # per job in the text output; --json lists every date


def _difference_lines(differences: list[Difference]) -> list[str]:
    """Each job's first few differing dates, then how many more there are."""
    by_job: dict[str, list[Difference]] = {}
    for d in differences:
        by_job.setdefault(d.job_id, []).append(d)
    out = []
    for job_id, days in by_job.items():
        out += [d.message() for d in days[:_DATES_SHOWN]]
        if len(days) > _DATES_SHOWN:
            out.append(f"{job_id}: and {len(days) - _DATES_SHOWN} more dates (--json lists them all)")
    return out


_PARTS = (("environment", "env"), ("stdin", "stdin"), ("command", "command"))


def _given_differences(job: dict[str, Any]) -> list[tuple[str, str]]:
    eq = job["equivalence"]
    return [(part, why) for part, _ in _PARTS for why in eq[part]["why"]]


def _given_cell(job: dict[str, Any]) -> str:
    """`same`, or which of environment, standard input and command differ from what cron gives."""
    eq = job["equivalence"]
    differ = [short for part, short in _PARTS if not eq[part]["same"]]
    return "NO: " + ", ".join(differ) + " differ" if differ else "same"


def _check_cell(job: dict[str, Any]) -> str:
    eq = job["equivalence"]
    if eq["compared"].startswith("skipped"):
        return "n/a (@reboot)" if "@reboot" in eq["compared"] else "n/a (imported disabled)"
    if eq["differences"]:
        if "why" in eq:  # a timer or an anacron job: reasons, listed below the table
            return f"NO: {eq['differences']} reason(s)"
        return f"NO: {eq['differences']} day(s) differ"
    return "yes" + (" (sampled)" if eq["compared"] == "sampled" else "")


# --- cutover and rollback -------------------------------------------------------------


def cutover_cmd(
    path: str,
    fmt: str | None,
    user: str | None,
    owner: str | None,
    reg: Path,
    db: str | None,
    dry_run: bool,
    json_out: bool,
    adopt_defaults: bool,
) -> None:
    """`import PATH --cutover`: import, then hand the imported lines from cron to chronod
    (chronoctl.cutover). Refused without a live chronod: cron must not stop before it runs."""
    from chronoctl import cmd_ops
    from chronoctl import cutover as co
    from chronoctl.common import now_utc

    if path == "-":
        raise UsageError(
            "--cutover needs the crontab file itself, not standard input",
            "give the spool file (/var/spool/cron/crontabs/USER) or /etc/crontab, /etc/cron.d/NAME",
        )
    if adopt_defaults:
        raise UsageError(
            "--cutover keeps cron's behaviour: it cannot be combined with --adopt-defaults",
            "cut over first, then edit the imported registry file to adopt chrono's defaults",
        )
    if fmt is not None and fmt not in ("system", "user"):
        raise UsageError(f"--format must be system or user, not {fmt!r}")
    todo, done = _split_migrated(collect_sources(os.path.abspath(path), fmt, user))
    _refuse_another_import(reg, todo)
    if not todo or dry_run:
        result, migrations = _import_for_cutover(todo, owner, reg)
        _print_cutover(result, dry_run, json_out, migrations, done, None)
        raise typer.Exit(EXIT_NO if result.errors else EXIT_OK)
    try:
        with cmd_ops.opened(db) as store:
            daemon = co.find_daemon(store)
            if daemon is None:
                raise CliError(
                    f"no chronod is running on this host (database {store.url_safe}); "
                    "the crontab and the registry were not changed",
                    "start chronod (systemctl start chronod), then run the cutover again: "
                    "cron must not stop before chronod runs",
                    EXIT_UNREACHABLE,
                )
            result, migrations = _import_for_cutover(todo, owner, reg)
            if migrations:
                co.ping(daemon)
                if (co.switch_start(now_utc()) - now_utc()).total_seconds() > 1 and not json_out:
                    sys.stderr.write("waiting for second 5-45 of a minute to switch...\n")
                switch = co.cutover(migrations, daemon)
    except Unreachable as exc:
        raise CliError(
            f"{exc.message}; the crontab and the registry were not changed",
            "start chronod before the cutover: cron must not stop before chronod runs",
            EXIT_UNREACHABLE,
        ) from None
    _print_cutover(result, False, json_out, migrations, done, switch if migrations else None)
    raise typer.Exit(EXIT_NO if result.errors else EXIT_OK)


def _split_migrated(sources: list[Source]) -> tuple[list[Source], list[str]]:
    """Sources with lines still to migrate, and the files already migrated. Refuses a file
    that was cut over and has gained new lines since (its backup is no longer the original)."""
    from chronoctl import cutover as co

    todo, done = [], []
    for src in sources:
        crontab = Path(src.label)
        parsed = parse_crontab(src.text, src.label, src.format, src.user, src.cron_ignores)
        entries = parsed.entries
        if parsed.ignored_by_cron and entries:
            raise CliError(
                f"{crontab}: {parsed.ignored_by_cron}, so cron is not running its lines and there is "
                "nothing to hand over; the crontab and the registry were not changed",
                f"fix the file (chronoctl import {crontab} --dry-run lists its errors), then cut it over; "
                "or import it without --cutover, which adds its jobs disabled",
            )
        if not entries:
            if co.migrated_ids(crontab.read_bytes()):
                done.append(src.label)
            continue
        backup = co.backup_path(crontab)
        if backup.exists():
            raise CliError(
                f"{crontab} was cut over before ({backup} exists) and has new lines since: "
                f"{', '.join(str(e.line) for e in entries)}",
                f"roll it back first (chronoctl import --rollback {crontab}), then cut it over again",
            )
        todo.append(src)
    return todo, done


def _import_for_cutover(sources: list[Source], owner: str | None, reg: Path) -> tuple[ImportResult, list[Any]]:
    """The import itself (nothing written), and per crontab the lines that became jobs."""
    from chronoctl import cutover as co
    from chronoctl.common import now_utc

    options = import_options(owner, False)
    names = {s.registry_name for s in sources}
    result = run_import(sources, options, now_utc().replace(second=0, microsecond=0), _existing_ids(reg, names))
    migrations = []
    for src in sources:
        lines = {j["source"]["line"]: j["id"] for j in result.jobs if j["source"]["file"] == src.label}
        if lines:
            target = reg / src.registry_name
            text = result.files[src.registry_name]
            migrations.append(
                co.Migration(
                    Path(src.label), Path(src.label).read_bytes(), lines, target, text, co.specs_of(text, str(target))
                )
            )
    return result, migrations


def _print_cutover(
    result: ImportResult, dry_run: bool, json_out: bool, migrations: list[Any], done: list[str], switch: Any
) -> None:
    from chronoctl import cutover as co
    from chronoctl.render import echo, escape_line, print_json

    would = [str(m.registry_file) for m in migrations]
    written = [] if dry_run else would
    plan = [
        {
            "file": str(m.crontab),
            "lines": sorted(m.lines),
            "registry_file": str(m.registry_file),
            "backup": str(co.backup_path(m.crontab)),
        }
        for m in migrations
    ]
    if json_out:
        print_json(
            {
                **as_json(result, written, dry_run, would),
                "cutover": {"migrate": plan, "already_migrated": done, "switch": switch.as_json() if switch else None},
            }
        )
        return
    if migrations or not done:
        print_human(result, would, dry_run)
    for f in done:
        echo(escape_line(f"{f}: already migrated to chrono; nothing to do (undo: chronoctl import --rollback {f})"))
    for m in plan:
        lines = ", ".join(str(n) for n in m["lines"])
        if switch is None:
            echo(escape_line(f"cutover would comment out line(s) {lines} of {m['file']} (backup {m['backup']})"))
        else:
            echo(escape_line(f"cut over {m['file']}: line(s) {lines} commented out, backup {m['backup']}"))
    if switch is None:
        return
    second = (switch.switched_at - switch.minute).total_seconds()
    echo(
        f"switched at {switch.switched_at:%H:%M:%S} UTC, second {second:.1f} of the minute: cron ran these lines "
        f"up to {switch.minute:%H:%M}, chronod runs them from:"
    )
    for job_id, first in sorted(switch.firsts.items()):
        echo(escape_line(f"  {job_id}: {first:%Y-%m-%d %H:%M} UTC"))
    echo(escape_line("undo with: " + "; ".join(f"chronoctl import --rollback {m['file']}" for m in plan)))


def rollback_cmd(crontab: Path, reg: Path, db: str | None, json_out: bool) -> None:
    """`import --rollback FILE`: restore the crontab from its backup, then remove the
    registry files imported from it and confirm chronod dropped their jobs."""
    from chronoctl import cmd_ops
    from chronoctl import cutover as co
    from chronoctl.render import echo, escape_line, print_json

    crontab = Path(os.path.abspath(crontab))
    if crontab.is_dir():
        raise UsageError(
            f"{crontab} is a directory; --rollback takes one crontab file",
            f"roll back each file of {crontab} that has a {co.BACKUP_SUFFIX} backup",
        )
    plan = co.plan_rollback(crontab, reg)
    report: dict[str, Any] = {
        "file": str(crontab),
        "restored_from": None,
        "removed": [],
        "jobs": plan.job_ids,
        "daemon": None,
        "switch": None,
    }
    if plan.nothing_to_do:
        if json_out:
            print_json({**report, "nothing_to_do": True})
        else:
            echo(
                escape_line(
                    f"{crontab}: nothing to roll back (no {plan.backup.name} backup, no registry file "
                    f"imported from it in {reg})"
                )
            )
        raise typer.Exit(EXIT_OK)
    try:
        with cmd_ops.opened(db) as store:
            daemon = co.find_daemon(store)
            switch = co.rollback(plan, daemon)
            report["daemon"] = daemon.node.name if daemon else None
    except Unreachable:
        switch = co.rollback(plan, None)
    report.update(
        restored_from=str(plan.backup) if plan.restore is not None else None,
        removed=[str(f) for f in plan.registry_files],
        switch=switch.as_json(),
        nothing_to_do=False,
    )
    if json_out:
        print_json(report)
        raise typer.Exit(EXIT_OK)
    if plan.restore is not None:
        echo(
            escape_line(
                f"restored {crontab} from {plan.backup}; cron runs its lines again from "
                f"{switch.minute + timedelta(minutes=1):%H:%M} UTC"
            )
        )
    for f in plan.registry_files:
        echo(escape_line(f"removed {f} ({', '.join(plan.job_ids)})"))
    if report["daemon"] and plan.registry_files:
        echo(escape_line(f"chronod on {report['daemon']} dropped the jobs at {switch.confirmed_at:%H:%M:%S} UTC"))
    elif plan.registry_files:
        echo("no chronod is running; it will not carry these jobs when it starts")
    raise typer.Exit(EXIT_OK)


# --- the command ---------------------------------------------------------------------


def import_cmd(
    path: Optional[str] = typer.Argument(
        None, help="A crontab file, a directory (/etc/cron.d), or - for standard input."
    ),
    user: Optional[str] = typer.Option(
        None,
        "--user",
        help="The user a user crontab belongs to (default: the file name in a spool, else the file's owner when not root, else you).",
    ),
    owner: Optional[str] = typer.Option(
        None, "--owner", help="The team paged for failures (default: the crontab user)."
    ),
    fmt: Optional[str] = typer.Option(
        None, "--format", help="system (with a user field) or user; default: from the path."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be imported; write nothing."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
    adopt_defaults: bool = typer.Option(
        False, "--adopt-defaults", help="Use chrono's defaults instead of cron's behaviour."
    ),
    registry: Optional[Path] = typer.Option(None, "--registry", help="Registry directory to write into."),
    all_timers: bool = typer.Option(
        False, "--all-timers", help="Import every timer enabled on this host (timers.target.wants)."
    ),
    flavor: Optional[str] = typer.Option(
        None,
        "--flavor",
        help="Which cron wrote the crontab: debian, cronie or busybox (default: guessed from the path, else debian).",
    ),
    cutover: bool = typer.Option(
        False,
        "--cutover",
        help="Register the jobs with the running chronod, then comment out "
        "the migrated lines in the source file (backup FILE.chrono-backup), in one minute.",
    ),
    rollback: Optional[Path] = typer.Option(
        None,
        "--rollback",
        metavar="FILE",
        help="Restore FILE from its backup, then remove its imported jobs from the registry and chronod.",
    ),
    db: Optional[str] = typer.Option(
        None,
        "--db",
        metavar="URL",
        help="Database through which chronod is found "
        "(--cutover, --rollback; default: CHRONO_DB, else the per-user default).",
    ),
) -> None:
    """Import crontabs as chrono jobs, keeping cron's behaviour, and check the fire times match."""
    from chronoctl.common import now_utc, registry_dir
    from chronoctl.render import print_json

    if rollback is not None:
        if path is not None or cutover:
            raise UsageError(
                "--rollback FILE takes the crontab as its value, with no PATH and no --cutover",
                "chronoctl import --rollback /etc/cron.d/backup",
            )
        if rollback.name.endswith(".timer"):
            from chronoctl.timer_cutover import timer_rollback_cmd

            timer_rollback_cmd(Path(os.path.abspath(rollback)), registry_dir(registry), db, json_out)
            return
        rollback_cmd(rollback, registry_dir(registry), db, json_out)
        return
    if path is None and not all_timers:
        raise UsageError(
            "import needs a PATH: a crontab file, a directory, - for standard input, a .timer, "
            "or /etc/anacrontab (or --all-timers)",
            "chronoctl import /etc/crontab --dry-run",
        )
    if fmt is not None and fmt not in ("system", "user"):
        raise UsageError(f"--format must be system or user, not {fmt!r}")
    if flavor is not None and flavor not in FLAVORS:
        raise UsageError(f"--flavor must be one of {', '.join(FLAVORS)}, not {flavor!r}")
    kind = source_kind(path, all_timers)
    from chronoctl.limits import forget_reads

    forget_reads()  # what this command reads decides whether what it writes is private
    if cutover:
        if kind == "timer":
            from chronoctl.timer_cutover import timer_cutover_cmd

            timer_cutover_cmd(path, all_timers, owner, registry_dir(registry), db, dry_run, json_out)
            return
        cutover_cmd(path or "", fmt, user, owner, registry_dir(registry), db, dry_run, json_out, adopt_defaults)
        return
    reg = registry_dir(registry)
    options = import_options(owner, adopt_defaults)
    now = now_utc().replace(second=0, microsecond=0)
    if kind == "crontab":
        assert path is not None
        sources = collect_sources(path, fmt, user, flavor=flavor)
        _refuse_another_import(reg, sources)
        names = {s.registry_name for s in sources}
        result = run_import(sources, options, now, _existing_ids(reg, names))
    else:
        result = import_other(kind, path, all_timers, options, now, reg, flavor)
    would = [str(reg / name) for name in sorted(result.files)]
    written: list[str] = []
    if not dry_run:
        from chronoctl.cmd_registry import check_write
        from chronoctl.cutover import others_may_not_read, write_registry_file
        from chronoctl.limits import read_privately

        source_of = {s.registry_name: s.label for s in sources} if kind == "crontab" else {}
        for name, text in sorted(result.files.items()):  # all or none: refusals come first
            check_write(reg / name, text.encode())
        for name, text in sorted(result.files.items()):
            # a crontab: as its own file; a timer or an anacrontab: as every file read for it
            private = others_may_not_read(source_of[name]) if name in source_of else read_privately()
            write_registry_file(reg / name, text.encode(), private=private)
            written.append(str(reg / name))
    if json_out:
        print_json(as_json(result, written, dry_run, would))
    else:
        print_human(result, written if not dry_run else would, dry_run)
    differs = dry_run and any(_fires_differently(j) for j in result.jobs)
    raise typer.Exit(EXIT_NO if result.errors or differs else EXIT_OK)


FLAVORS = ("debian", "cronie", "busybox")


def source_kind(path: str | None, all_timers: bool) -> str:
    """What PATH is: a systemd timer, an anacrontab, or a crontab (the rest)."""
    if all_timers or (path is not None and path.endswith(".timer")):
        return "timer"
    if path is not None and Path(path).name == "anacrontab":
        return "anacron"
    return "crontab"


def _fires_differently(job: dict[str, Any]) -> bool:
    """A job the dry run's verdict says would not fire as its source scheduler fires it."""
    eq = job["equivalence"]
    return bool(eq["differences"]) and not eq["compared"].startswith("skipped")


def import_other(
    kind: str,
    path: str | None,
    all_timers: bool,
    options: ImportOptions,
    now: datetime,
    reg: Path,
    flavor: str | None,
) -> ImportResult:
    """Timers (`X.timer`, `--all-timers`) and anacrontabs into the same result as crontabs."""
    from chronoctl import import_schedulers as sched
    from chronoctl.import_timers import sources_for
    from chronoctl.limits import read_bounded

    result = ImportResult(scheduler="systemd" if kind == "timer" else "anacron")
    if kind == "timer":
        sources = sources_for(path, all_timers)
        names = {sched.registry_name(s.name, "systemd") for s in sources}
        sched.import_timers(sources, options, now, _existing_ids(reg, names), result)
    else:
        assert path is not None
        try:
            text = read_bounded(Path(path), path)
        except FileNotFoundError:
            raise UsageError(f"{path}: no such file", "give /etc/anacrontab or another anacrontab") from None
        names = {sched.registry_name(path, "anacron")}
        sched.import_anacrontab(path, text, options, _existing_ids(reg, names), result, flavor or "debian")
    result.errors.sort(key=lambda e: (e["file"], e["line"]))
    return result


def register(app: typer.Typer) -> None:
    """Add `import` to the chronoctl app."""
    app.command("import")(import_cmd)


if __name__ == "__main__":
    _app = typer.Typer(add_completion=False)
    register(_app)

    @_app.callback()
    def _root() -> None:
        """chronoctl (import only)."""

    _app()
