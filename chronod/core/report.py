"""The audit report: every expected occurrence of a job in a period, joined with the history.

Pure: the schedule says which occurrences were expected, the runs say what happened, and
`now` is an argument. Each occurrence appears exactly once; one that has no row at all is
`missing`, which is the finding an auditor most needs to see. Occurrences that fell due
while the job was not registered (before its first registration, after its removal) are
not expected: they are counted as "not registered", never listed as missing. Every occurrence that did
not succeed gets a category (failure, policy, outage, paused, missing, not finished)
and the history's sentence explaining it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Sequence

from chronod.core import history, retention
from chronod.core.model import JobSpec, RunState
from chronod.core.occurrence import Occurrence, node_of_key

MAX_LINES = 600_000  # the most occurrences one job's report walks: a year of a job every minute
MISSING = "missing"
PRUNED = retention.PRUNED
CATEGORY = {
    RunState.SUCCEEDED: "",
    RunState.FAILED: "failure",
    RunState.TIMED_OUT: "failure",
    RunState.LOST: "failure",
    RunState.CANCELLED: "policy",
    RunState.SKIPPED_OVERLAP: "policy",
    RunState.SKIPPED_OUTAGE: "outage",
    RunState.SKIPPED_PAUSED: "paused",
    RunState.SKIPPED_BLACKOUT: "maintenance",
    RunState.SKIPPED_RESOURCE: "resource",
    RunState.SKIPPED_ACCOUNT: "account",
    MISSING: "missing",
    PRUNED: "pruned",
    RunState.PENDING: "not finished",
    RunState.RUNNING: "not finished",
    RunState.RETRY_WAIT: "not finished",
    history.NOT_DUE: "not due",
}


@dataclass(frozen=True)
class Line:
    """One expected occurrence and what happened to it."""

    scheduled_at: datetime
    fire_at: datetime
    run_id: str
    node: str | None
    state: str  # a run state, `missing`, `pruned`, or `not_due`
    category: str
    explanation: str
    attempts: int = 0
    started_at: datetime | None = None
    duration_s: float | None = None
    exit_code: int | None = None
    trigger: str | None = None  # what started the run: schedule, manual, backfill (None: no run)


@dataclass(frozen=True)
class JobReport:
    """A job's occurrences in [start, end), their totals, and the manual runs beside them."""

    spec: JobSpec
    start: datetime
    end: datetime
    lines: list[Line]
    manual: list[Any] = field(default_factory=list)
    registered: list[history.Span] | None = None  # None: the store has no record of it
    not_registered: int = 0  # occurrences in the period that fell due while not registered

    @property
    def totals(self) -> dict[str, int]:
        """Occurrences per state, in a fixed order, zero counts left out."""
        counts = Counter(line.state for line in self.lines)
        order = [
            RunState.SUCCEEDED,
            RunState.FAILED,
            RunState.TIMED_OUT,
            RunState.LOST,
            RunState.CANCELLED,
            RunState.SKIPPED_OVERLAP,
            RunState.SKIPPED_OUTAGE,
            RunState.SKIPPED_PAUSED,
            RunState.SKIPPED_BLACKOUT,
            RunState.SKIPPED_RESOURCE,
            RunState.SKIPPED_ACCOUNT,
            MISSING,
            PRUNED,
            RunState.PENDING,
            RunState.RUNNING,
            RunState.RETRY_WAIT,
            history.NOT_DUE,
        ]
        return {s: counts[s] for s in order if counts[s]}

    @property
    def compliance_gaps(self) -> list[str]:
        """What a job tagged `compliance` lacks (the validator refuses such jobs; shown anyway)."""
        if "compliance" not in self.spec.tags:
            return []
        gaps = []
        if not self.spec.max_silence_explicit:
            gaps.append("no explicit max_silence_s")
        if not self.spec.notify:
            gaps.append("no notify route")
        return gaps


class TooLong(ValueError):
    """A period holding more occurrences of a job than a report lists; says what fits."""


def job_report(
    spec: JobSpec,
    schedule: Any,
    runs: Iterable[Any],
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    nodes: Iterable[str] = (),
    spans: Sequence[history.Span] | None = None,
    pruned: Any | None = None,
) -> JobReport:
    """Every occurrence nominally in [start, end) with its run (or `missing`, or `pruned` at
    or before the job's pruning watermark `pruned`); `runs` are the job's runs around the
    period (others are ignored). `spans` say when the job was registered: an occurrence
    outside them without a row is counted, not listed."""
    runs = list(runs)
    by_id = {r.run_id: r for r in runs}
    eps = timedelta(microseconds=1)
    nodes = set(nodes) | {n for r in runs if (n := node_of_key(r.job_key))}
    _refuse_a_huge_period(spec, schedule, start - eps, end - eps)
    occs = history.occurrences(spec, schedule, start - eps, end - eps, nodes)
    expected = [o for o in occs if o.run_id in by_id or history.registered(spans, o.fire_at)]
    lines = [_line(o, by_id.get(o.run_id), now, spec, pruned) for o in expected]
    manual = sorted(
        (r for r in runs if r.trigger.startswith("manual") and start <= r.scheduled_at < end),
        key=lambda r: r.scheduled_at,
    )
    return JobReport(
        spec, start, end, lines, manual, list(spans) if spans is not None else None, len(occs) - len(expected)
    )


def _refuse_a_huge_period(spec: JobSpec, schedule: Any, start: datetime, end: datetime) -> None:
    """Refuse before walking a period of more than MAX_LINES occurrences (ten years of a job
    that fires every second would hold hundreds of millions in memory). A cron schedule
    that cannot fire that often in the period is not walked at all: walking it with a limit
    costs several times what listing its occurrences does."""
    if schedule.kind == "reboot":
        return
    most = _most_per_day(schedule)
    if most is not None and 2 * most * ((end - start).days + 2) <= MAX_LINES:
        return
    fires = schedule.fires(start, end, limit=MAX_LINES + 1)
    if len(fires) > MAX_LINES:
        last = fires[MAX_LINES].strftime("%Y-%m-%dT%H:%M:%SZ")  # --to is exclusive
        raise TooLong(
            f"{spec.id} ({spec.schedule}) falls due more than {MAX_LINES:,} times from "
            f"{(start + timedelta(microseconds=1)).strftime('%Y-%m-%dT%H:%M:%SZ')}: report a shorter period, "
            f"e.g. --to {last}"
        )


def _most_per_day(schedule: Any) -> int | None:
    """At most how many times a cron schedule fires in a day (its seconds x minutes x hours;
    a fall-back day's repeated hour adds less than a day's worth), None for other kinds."""
    fields = getattr(schedule, "fields", None)
    if fields is None:
        return None
    return len(fields.seconds) * len(fields.minutes) * len(fields.hours)


def _line(occ: Occurrence, run: Any | None, now: datetime, spec: JobSpec, pruned: Any | None) -> Line:
    if run is None:
        if pruned is not None and retention.was_pruned(occ.scheduled_at, pruned):
            return Line(
                occ.scheduled_at,
                occ.fire_at,
                occ.run_id,
                occ.node,
                PRUNED,
                "pruned",
                f"{retention.pruned_reason(pruned.kept_s)}: its row was deleted with the runs up to "
                f"{history.iso(pruned.through)}",
            )
        if occ.fire_at > now:
            return Line(
                occ.scheduled_at,
                occ.fire_at,
                occ.run_id,
                occ.node,
                history.NOT_DUE,
                "not due",
                f"not due yet: fires at {history.iso(occ.fire_at)}",
            )
        return Line(
            occ.scheduled_at,
            occ.fire_at,
            occ.run_id,
            occ.node,
            MISSING,
            "missing",
            "MISSING: no record at all; it fell due but the history has no row for it (chronod was "
            "down and nothing caught it up, or the database was restored from an older copy)",
        )
    state = run.state
    if state == RunState.PENDING and run.fire_at > now:
        state = history.NOT_DUE
    why = history.describe_run(run, now, spec) if state != RunState.SUCCEEDED else ""
    if state == RunState.SUCCEEDED and run.trigger == "backfill":
        why = "run by a backfill"
    duration = (run.finished_at - run.started_at).total_seconds() if run.started_at and run.finished_at else None
    return Line(
        occ.scheduled_at,
        occ.fire_at,
        occ.run_id,
        occ.node,
        state,
        CATEGORY.get(state, state),
        why,
        run.attempts,
        run.started_at,
        duration,
        run.exit_code,
        run.trigger,
    )


def to_json(report: JobReport, words: str) -> dict[str, Any]:
    """The report of one job as JSON (stable keys, ISO-8601 times with offsets)."""
    s = report.spec
    return {
        "job_id": s.id,
        "owner": s.owner,
        "schedule": s.schedule,
        "schedule_words": words,
        "timezone": s.timezone,
        "tags": list(s.tags),
        "max_silence_s": s.max_silence_s,
        "notify_events": sorted({e for n in s.notify for e in n.on}),
        "compliance_gaps": report.compliance_gaps,
        "from": history.iso(report.start),
        "to": history.iso(report.end),
        "expected": len(report.lines),
        "totals": report.totals,
        "not_registered": report.not_registered,
        "registered": None
        if report.registered is None
        else [{"from": history.iso(a), "until": history.iso(b)} for a, b in report.registered],
        "occurrences": [
            {
                "scheduled_at": history.iso(line.scheduled_at),
                "fire_at": history.iso(line.fire_at),
                "run_id": line.run_id,
                "node": line.node,
                "state": line.state,
                "category": line.category,
                "attempts": line.attempts,
                "started_at": history.iso(line.started_at),
                "duration_s": round(line.duration_s, 3) if line.duration_s is not None else None,
                "exit_code": line.exit_code,
                "explanation": line.explanation,
                "trigger": line.trigger,
            }
            for line in report.lines
        ],
        "manual_runs": [
            {"run_id": r.run_id, "scheduled_at": history.iso(r.scheduled_at), "state": r.state, "trigger": r.trigger}
            for r in report.manual
        ],
    }


def _spans_text(spans: list[dict[str, Any]] | None) -> str:
    if spans is None:
        return "no record (expected throughout the period)"
    return "; ".join(f"{s['from']} to {s['until'] or 'now'}" for s in spans) or "never"


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(report: JobReport, words: str, generated_at: datetime) -> str:
    """The report of one job as Markdown: a header, the totals, then every occurrence."""
    d = to_json(report, words)
    out = [
        f"# Audit report: {_cell(d['job_id'])}",
        "",
        "| | |",
        "|---|---|",
        f"| Job | `{_cell(d['job_id'])}` |",
        f"| Owner | {_cell(d['owner'])} |",
        f"| Schedule | `{_cell(d['schedule'])}`: {_cell(words)} (zone {_cell(d['timezone'])}) |",
        f"| Period | {d['from']} to {d['to']} (end excluded) |",
        f"| Generated at | {history.iso(generated_at)} |",
        f"| Expected occurrences | {d['expected']} |",
        f"| Registered | {_cell(_spans_text(d['registered']))} |",
        f"| Tags | {_cell(', '.join(d['tags']) or '-')} |",
        f"| Dead man's switch | {_cell(d['max_silence_s'])} s |",
        f"| Notified on | {_cell(', '.join(d['notify_events']) or 'nothing')} |",
    ]
    if d["compliance_gaps"]:
        out.append(f"| Compliance gaps | {_cell('; '.join(d['compliance_gaps']))} |")
    out += ["", "## Totals", "", "| state | occurrences |", "|---|---:|"]
    out += [f"| {state} | {n} |" for state, n in d["totals"].items()]
    out += [f"| **total** | **{d['expected']}** |"]
    if d["not_registered"]:
        out += [
            "",
            f"Not registered: {d['not_registered']} occurrence(s) of the period fell due while the job was "
            "not in the registry; they were never expected and are not listed.",
        ]
    out += [
        "",
        "## Occurrences",
        "",
        "| # | scheduled at | state | run id | attempts | started at | duration (s) | exit | explanation |",
        "|---:|---|---|---|---:|---|---:|---:|---|",
    ]
    for i, o in enumerate(d["occurrences"], 1):
        out.append(
            f"| {i} | {o['scheduled_at']} | {o['state']} | `{o['run_id']}` | {o['attempts']} | "
            f"{_cell(o['started_at'] or '-')} | {_cell(o['duration_s'] if o['duration_s'] is not None else '-')} | "
            f"{_cell(o['exit_code'] if o['exit_code'] is not None else '-')} | {_cell(o['explanation'])} |"
        )
    if d["manual_runs"]:
        out += [
            "",
            "## Manual runs in the period (beside the schedule)",
            "",
            "| scheduled at | state | run id |",
            "|---|---|---|",
        ]
        out += [f"| {m['scheduled_at']} | {m['state']} | `{m['run_id']}` |" for m in d["manual_runs"]]
    return "\n".join(out) + "\n"
