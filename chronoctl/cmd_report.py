"""`report`: every expected occurrence of a job (or of every job with a tag) in a period,
with what happened to it, as Markdown for an auditor or as JSON (chronod.core.report)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from chronoctl import cmd_ops, common
from chronoctl import complete as _complete
from chronoctl.cmd_ops import db_option
from chronoctl.errors import UnknownJob, UsageError

if TYPE_CHECKING:
    from chronod.core.model import JobSpec
    from chronod.store.api import Store

FORMATS = ("md", "json", "html")


def register(app: typer.Typer) -> None:
    """Add `report` to `app`."""
    app.command("report")(report)


def report(
    job: Optional[str] = typer.Argument(
        None, metavar="[JOB]", help="A job id (or use --tag).", autocompletion=_complete.job_ids
    ),
    tag: Optional[str] = typer.Option(None, "--tag", metavar="TAG", help="Every job with this tag."),
    start: str = typer.Option(
        ..., "--from", metavar="DATE", help="Start of the period (ISO date or time; UTC unless an offset is given)."
    ),
    end: str = typer.Option(..., "--to", metavar="DATE", help="End of the period; a date means the end of that day."),
    fmt: Optional[str] = typer.Option(
        None,
        "--format",
        metavar="md|json|html",
        help="Markdown, JSON, or one printable HTML file (default: a table fitted to the terminal, Markdown when "
        "piped).",
    ),
    db: Optional[str] = db_option(),
    registry: Optional[Path] = typer.Option(
        None, "--registry", metavar="DIR", help="Read the job definitions from this registry instead of the database."
    ),
    not_due: bool = typer.Option(
        False, "--not-due", help="List the occurrences not due yet too (the table and Markdown count them only)."
    ),
) -> None:
    """Every expected occurrence in a period with its state, run id, attempts, start, duration and exit code."""
    if (job is None) == (tag is None):
        raise UsageError(
            "give a JOB or --tag TAG (one of them)", "chronoctl report purge --from 2026-03-01 --to 2026-03-31"
        )
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r} is not one of md, json, html")
    since, until = period(start, end)
    now = common.now_utc()
    with cmd_ops.opened(db) as store:
        specs = _specs(store, registry, job, tag, now)
        reports = [_report(store, spec, since, until, now) for spec in specs]
        database = store.url_safe
    if fmt == "html":
        from chronoctl.web.report_html import render

        typer.echo(render(reports, now=now, since=since, until=until, database=database), nl=False)
        return
    _print(reports, fmt, now, since, until, not_due)


def _due_only(r: Any) -> tuple[Any, int]:
    """The report without its not-due lines, and how many there were (the JSON keeps them:
    scripts read every line)."""
    import dataclasses

    from chronod.core.history import NOT_DUE

    due = [line for line in r.lines if line.state != NOT_DUE]
    return dataclasses.replace(r, lines=due), len(r.lines) - len(due)


def period(start: str, end: str) -> tuple[datetime, datetime]:
    """[from, to) in UTC: a bare date as --to covers that whole day."""
    since = common.parse_instant(start, "UTC", "--from")
    until = common.parse_instant(end, "UTC", "--to")
    if len(end.strip()) == 10:
        until += timedelta(days=1)
    if until <= since:
        raise UsageError(
            f"--to {end} is not after --from {start}",
            "give the earlier time as --from (a bare date as --to covers that whole day: --from today --to today)",
        )
    from chronod.core.bounds import MAX_SPAN_S, days_text

    if (until - since).total_seconds() > MAX_SPAN_S:
        raise UsageError(
            f"--from {start} --to {end} is longer than {days_text(MAX_SPAN_S)}",
            "report a shorter period (a year or a month at a time)",
        )
    return since, until


def _specs(store: "Store", registry: Path | None, job: str | None, tag: str | None, now: datetime) -> list["JobSpec"]:
    if registry is not None:
        loaded = common.load([registry], now, secure=False).jobs
        specs = list(loaded.values())
        where = f"registry {registry}"
    else:
        specs = [r.spec for r in store.jobs(include_removed=True)]
        where = f"the database {store.url_safe}"
    if job is not None:
        found = [s for s in specs if s.id == job]
        if not found:
            raise UnknownJob(job, where)
        return found
    found = sorted((s for s in specs if tag in s.tags), key=lambda s: s.id)
    if not found:
        import difflib

        tags = sorted({t for s in specs for t in s.tags})
        close = difflib.get_close_matches(tag or "", tags, n=3, cutoff=0.6)
        raise UsageError(
            f"no job in {where} has the tag {tag!r}",
            f"did you mean {' or '.join(map(repr, close))}?"
            if close
            else (f"the tags in use: {', '.join(tags[:20])}" if tags else "no job has a tag; report one JOB instead"),
        )
    return found


def _report(store: "Store", spec: "JobSpec", since: datetime, until: datetime, now: datetime) -> tuple[Any, str]:
    from chronod.core.report import TooLong
    from chronod.store import audit

    schedule = common.schedule_of(spec)
    try:
        return audit.report(store, spec, since, until, now, schedule=schedule), schedule.describe()
    except TooLong as e:
        raise UsageError(
            str(e), "a report lists every occurrence of its period; report this job a part at a time"
        ) from None


def _print(
    reports: list[tuple[Any, str]], fmt: str | None, now: datetime, since: datetime, until: datetime, not_due: bool
) -> None:
    from chronoctl.render import echo, escape_control, is_terminal, print_json
    from chronod.core.report import to_json, to_markdown

    if fmt is None and is_terminal():
        for r, words in reports:
            shown, hidden = (r, 0) if not_due else _due_only(r)
            _print_terminal(to_json(shown, words), now)
            if hidden:
                echo(_not_listed(hidden))
        return

    if fmt == "json":
        print_json(
            {
                "generated_at": cmd_ops.iso(now),
                "from": cmd_ops.iso(since),
                "to": cmd_ops.iso(until),
                "jobs": [to_json(r, words) for r, words in reports],
            }
        )
        return
    parts = []
    for r, words in reports:
        shown, hidden = (r, 0) if not_due else _due_only(r)
        md = to_markdown(shown, words, now)
        if hidden:  # counted in one line, as on a terminal
            md += f"\n{_not_listed(hidden)}.\n"
        parts.append(md)
    typer.echo(escape_control("\n".join(parts)), nl=False)


def _not_listed(hidden: int) -> str:
    return f"{hidden} occurrence{'s' if hidden != 1 else ''} not due yet, not listed (--not-due lists them)"


def _print_terminal(d: dict[str, Any], now: datetime) -> None:
    """One job's report for a person at a terminal: the header as fields, the totals on
    one line, and the occurrences as a table that fits (Markdown is for files)."""
    from chronoctl.render import Column, echo, echo_field, print_table, short_id, short_time, zone_note

    echo_field("report", d["job_id"])
    echo_field("owner", d["owner"])
    echo_field("schedule", f"{d['schedule']} (zone {d['timezone']})")
    echo_field("period", f"{d['from']} to {d['to']} (end excluded)")
    echo_field("expected", d["expected"])
    echo_field("totals", ", ".join(f"{state} {n}" for state, n in d["totals"].items()))
    for gap in d["compliance_gaps"]:
        echo_field("gap", gap)
    echo()

    def when(text: str | None) -> str | None:
        return short_time(datetime.fromisoformat(text), now) if text else None

    rows = [
        {
            "n": i,
            "scheduled": when(o["scheduled_at"]),
            "state": o["state"],
            "run_id": short_id(o["run_id"]),
            "attempts": o["attempts"],
            "started": when(o["started_at"]),
            "took": o["duration_s"],
            "exit": o["exit_code"],
            "why": o["explanation"],
        }
        for i, o in enumerate(d["occurrences"], 1)
    ]
    cols = (
        Column("n", "#", "right", drop=6),
        Column("scheduled"),
        Column("state"),
        Column("run_id", "RUN ID"),
        Column("attempts", "TRIES", "right", drop=3),
        Column("started", drop=5),
        Column("took", "SECONDS", "right", drop=4),
        Column("exit", "EXIT", "right", drop=2),
        Column("why", "EXPLANATION", wrap=True, drop=1),
    )
    print_table(rows, cols, title=f"occurrences ({zone_note(now)})", empty="(no occurrence expected)")
    echo()
