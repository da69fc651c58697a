"""`chronoctl next`, `explain` and `forecast`: when jobs fire, why, and how they pile up.

Times in `next` and `explain` are shown in the schedule's own zone (JSON: ISO-8601 with
that zone's offset, e.g. `2026-11-01T02:30:00-05:00`), because that is the zone the
expression is written in. `forecast` mixes zones, so its JSON is in UTC (`+00:00`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional

import typer

from chronoctl import common
from chronoctl import complete as _complete
from chronoctl.errors import UsageError

COUNT_MAX = 10000


def register(app: typer.Typer) -> None:
    """Add `next`, `explain` and `forecast` to `app`."""
    app.command("next")(next_fires)
    app.command("explain")(explain)
    app.command("forecast")(forecast)


# --- options that next, explain and forecast share ---------------------------------------


def _job_argument() -> Any:
    return typer.Argument(None, metavar="JOB", help="A job id from the registry.", autocompletion=_complete.job_ids)


def _cron_option() -> Any:
    return typer.Option(None, "--cron", metavar="EXPR", help="A cron expression instead of a job.")


def _tz_option() -> Any:
    return typer.Option(
        None, "--tz", metavar="TZ", help="Zone of --cron (IANA name; default UTC).", autocompletion=_complete.zones
    )


def _dst_gap_option() -> Any:
    return typer.Option(
        None,
        "--dst-gap",
        metavar="shift|skip",
        help="DST policy of --cron for a time a spring-forward skips (default shift, as cron).",
    )


def _dst_repeat_option() -> Any:
    return typer.Option(
        None,
        "--dst-repeat",
        metavar="first|last|both",
        help="DST policy of --cron for a time a fall-back repeats (default first, as cron).",
    )


def _node_option() -> Any:
    return typer.Option(
        None, "--node", metavar="NAME", help="Node name for jobs that run on each node (default: this host)."
    )


def _registry_option() -> Any:
    return typer.Option(
        None, "--registry", metavar="DIR", help="Registry directory (default CHRONO_REGISTRY or the system one)."
    )


def _fleet_db_option() -> Any:
    return typer.Option(
        None,
        "--db",
        metavar="URL",
        help="Database whose nodes a job that runs on each node is shown for (default CHRONO_DB or the system one, if present).",
    )


# --- what a command is asked about: a registry job or a bare expression ----------------


@dataclass(frozen=True)
class Target:
    """A schedule with its identity: the job (if any), where its occurrences live (`place`:
    key, node and jitter offset) and, for a job that runs on each node, its placement on
    every node the store knows (`fleet`)."""

    job: Any  # JobSpec | None
    expr: str
    tz: str
    schedule: Any  # chronod.core.schedule.Schedule
    place: Any  # chronod.core.occurrence.Placement
    tolerance_s: int
    fleet: tuple[Any, ...] = ()
    windows: tuple[Any, ...] = ()  # the registry's maintenance windows (chronod.core.blackout.Window)

    @property
    def key(self) -> str:
        return str(self.place.key)

    @property
    def offset_s(self) -> int:
        return int(self.place.offset_s)

    def occurrence(self, occ: Any) -> dict[str, Any]:
        """`{"at", "scheduled_at", "run_id"}` of one occurrence, in the schedule's zone, with
        `"node"` for a job that runs on each node (the node these times are for)."""
        from chronoctl.render import iso

        out = {"at": iso(occ.fire_at, self.tz), "scheduled_at": iso(occ.scheduled_at, self.tz), "run_id": occ.run_id}
        return out if occ.node is None else {**out, "node": occ.node}


@dataclass(frozen=True)
class DstPolicy:
    """`--dst-gap` and `--dst-repeat` as given (None: not given)."""

    gap: str | None = None
    repeat: str | None = None

    def check(self) -> tuple[str, str]:
        """The policy for --cron, defaults filled in; UsageError for an unknown word."""
        from chronod.core.model import DST_GAP_POLICIES, DST_REPEAT_POLICIES

        for flag, value, choices in (
            ("--dst-gap", self.gap, DST_GAP_POLICIES),
            ("--dst-repeat", self.repeat, DST_REPEAT_POLICIES),
        ):
            if value is not None and value not in choices:
                raise UsageError(
                    f"{flag} {value!r} is not one of {', '.join(choices)}", f"{choices[0]} is cron's behaviour"
                )
        return self.gap or "shift", self.repeat or "first"


def resolve_target(
    job_id: str | None,
    cron: str | None,
    tz: str | None,
    node: str | None,
    registry: Path | None,
    now: datetime,
    dst: DstPolicy = DstPolicy(),
    db: str | None = None,
) -> Target:
    """The job `job_id` from the registry, or the expression `cron` in zone `tz` with the DST
    policy `dst` (no jitter, and the expression itself as the run-id key). Exactly one of the
    two must be given."""
    if (job_id is None) == (cron is None):
        raise UsageError(
            "give a JOB id or --cron EXPR (one of the two)",
            "chronoctl next billing-export; chronoctl next --cron '0 2 * * *' --tz UTC",
        )
    from chronod.core import occurrence

    if cron is not None:
        if node is not None:
            raise UsageError("--node applies to a JOB that runs on each node, not to --cron")
        zone = common.check_zone(tz or "UTC")
        expr = cron.strip()
        return Target(
            None, expr, zone, common.compile_or_fail(expr, zone, *dst.check()), occurrence.expression(expr), 0
        )
    if tz is not None:
        raise UsageError("--tz applies to --cron; a job's zone is its `timezone` field")
    if dst.gap is not None or dst.repeat is not None:
        raise UsageError(
            "--dst-gap and --dst-repeat apply to --cron; a job's policy is its dst_gap and dst_repeat fields"
        )
    reg = common.registry_dir(registry)
    job, result = common.find_job_in(reg, job_id, now)
    schedule = common.schedule_of(job)
    fleet = tuple(occurrence.placements(job, common.fleet_nodes(db))) if job.run_on.each else ()
    place = common.placement(job, node)
    return Target(job, job.schedule, job.timezone, schedule, place, job.tolerance_s, fleet, tuple(result.blackouts))


def _fleet_lines(target: Target, start: datetime, now: datetime) -> list[str]:
    """For a job that runs on each node: which node the times are for, and the first fire
    on every node the store knows (each node has its own key, so its own offset)."""
    from chronoctl import render

    if target.job is None or not target.job.run_on.each:
        return []
    lines = [
        f"times for node {target.place.node} (run_on: each: every node fires at its own offset; "
        "--node NAME shows another)"
    ]
    for p in target.fleet:
        nxt = p.next_after(target.schedule, start)
        when = render.human_time(nxt.fire_at, now, target.tz) if nxt else "never"
        lines.append(f"  node {p.node}: jitter +{p.offset_s}s, next fire {when}")
    return lines


def _after(text: str | None, tz: str, now: datetime) -> datetime:
    return common.parse_instant(text, tz, direction="future") if text is not None else now


# --- next ----------------------------------------------------------------------------


def next_fires(
    job: Optional[str] = _job_argument(),
    cron: Optional[str] = _cron_option(),
    tz: Optional[str] = _tz_option(),
    after: Optional[str] = typer.Option(
        None,
        "--after",
        metavar="ISO",
        help="Start after this time (default now); without an offset it is wall time in the schedule's zone.",
    ),
    count: Optional[int] = typer.Option(
        None, "--count", "-n", min=1, max=COUNT_MAX, help="How many fires to list (default 5; the agenda: all)."
    ),
    dst_gap: Optional[str] = _dst_gap_option(),
    dst_repeat: Optional[str] = _dst_repeat_option(),
    node: Optional[str] = _node_option(),
    registry: Optional[Path] = _registry_option(),
    db: Optional[str] = _fleet_db_option(),
    window: Optional[str] = typer.Option(
        None, "--window", metavar="DUR", help="Without JOB: the agenda of every job over this long (default 1h)."
    ),
    tag: Optional[str] = typer.Option(None, "--tag", metavar="TAG", help="Without JOB: only jobs with this tag."),
    owner: Optional[str] = typer.Option(None, "--owner", metavar="TEAM", help="Without JOB: only this owner's jobs."),
    as_json: bool = typer.Option(
        False, "--json", help="A JSON array of {at, scheduled_at, run_id} (and node, for a job on each node)."
    ),
) -> None:
    """The next fire times of a job (with its jitter) or of a cron expression (without).
    Without either: the agenda, every job's fires in the next hour (--window) in fire
    order, held ones marked (paused, or inside a maintenance window)."""
    now = common.now_utc()
    if job is None and cron is None:
        if tz is not None or dst_gap is not None or dst_repeat is not None or node is not None:
            raise UsageError("--tz, --dst-gap, --dst-repeat and --node apply to a JOB or --cron, not to the agenda")
        start = _after(after, "UTC", now)
        return _agenda(start, window or "1h", count, tag, owner, registry, db, as_json, now)
    if window is not None or tag is not None or owner is not None:
        raise UsageError("--window, --tag and --owner are for the agenda (next without a JOB or --cron)")
    target = resolve_target(job, cron, tz, node, registry, now, DstPolicy(dst_gap, dst_repeat), db)
    start = _after(after, target.tz, now)
    fires = target.place.upcoming(target.schedule, start, count or 5)
    from chronoctl import render

    if as_json:
        render.print_json([target.occurrence(o) for o in fires])
        return
    _print_next_text(target, fires, start, now)


def _agenda(
    start: datetime,
    window: str,
    count: int | None,
    tag: str | None,
    owner: str | None,
    registry: Path | None,
    db: str | None,
    as_json: bool,
    now: datetime,
) -> None:
    """`chronoctl next` without a job: what fires in [start, start + window)."""
    from chronoctl import cmd_ops, render
    from chronoctl.errors import CliError
    from chronod.store import status as views

    end = start + timedelta(seconds=common.parse_seconds(window, "--window"))
    reg = common.registry_dir(registry)
    specs: dict[str, Any] = {}
    windows: list[Any] = []
    if reg.is_dir():
        loaded = common.load([reg], now, secure=False)
        specs, windows = dict(loaded.jobs), list(loaded.blackouts)
    try:
        with cmd_ops.opened(db) as store:
            plan = views.agenda(store, specs, start, end, windows=windows, tag=tag, owner=owner)
    except CliError:
        if not specs:
            raise
        plan = views.agenda(None, specs, start, end, windows=windows, tag=tag, owner=owner)
        render.warn("the database cannot be read: pauses are not known, only the registry's jobs are listed")
    entries = plan.entries[:count] if count else plan.entries
    if as_json:
        return render.print_json(
            {
                "from": start,
                "to": end,
                "cut": plan.cut,
                "fires": [
                    {
                        "job_id": e.job_id,
                        "owner": e.owner,
                        "at": e.fire_at,
                        "scheduled_at": e.scheduled_at,
                        "jitter_s": e.jitter_s,
                        "run_id": e.run_id,
                        "node": e.node,
                        "held": cmd_ops.hold_json(e.hold),
                    }
                    for e in entries
                ],
            }
        )
    rows = [
        {
            "at": render.short_time(e.fire_at, now),
            "in": render.relative(e.fire_at, now),
            "job": e.job_id + (f"@{e.node}" if e.node else ""),
            "owner": e.owner,
            "held": cmd_ops.held_text(cmd_ops.hold_json(e.hold), now) if e.hold else None,  # type: ignore[arg-type]
        }
        for e in entries
    ]
    title = f"fires from {render.short_time(start, now)} to {render.short_time(end, now)} ({render.zone_note(now)})"
    render.print_table(
        rows,
        [
            render.Column("at", "AT"),
            render.Column("in", "IN", "right", drop=2),
            render.Column("job", "JOB"),
            render.Column("owner", "OWNER", drop=1),
            render.Column("held", "HELD", wrap=True),
        ]
        if any(r["held"] for r in rows)
        else [
            render.Column("at", "AT"),
            render.Column("in", "IN", "right", drop=2),
            render.Column("job", "JOB"),
            render.Column("owner", "OWNER", drop=1),
        ],
        title=title,
        empty="(nothing fires in this window)",
    )
    if plan.cut or len(entries) < len(plan.entries):
        render.echo("... more fires in this window; give a shorter --window or a larger --count")


def _headline(target: Target) -> str:
    what = f"job {target.job.id}" if target.job is not None else f"cron {target.expr!r}"
    return f"{what}: {target.schedule.describe()}"


def _print_next_text(target: Target, fires: list[Any], start: datetime, now: datetime) -> None:
    from chronoctl import render

    render.echo_line(render.escape_line(_headline(target)))
    if target.job is not None:
        render.echo_line(
            f"jitter: +{target.offset_s}s (key {render.escape_line(target.key)}, tolerance {target.tolerance_s}s)"
        )
        if not target.job.enabled:
            render.echo("note: this job is disabled (enabled: false); these are the times it would fire")
    for line in _fleet_lines(target, start, now):
        render.echo_line(render.escape_line(line))
    if not fires:
        render.echo("no fire times: @reboot jobs run once when the daemon starts after a boot")
        return
    rows = [{"at": o.fire_at, "scheduled": o.scheduled_at, "run_id": o.run_id} for o in fires]
    render.print_table(
        rows,
        [
            render.Column("at", "FIRES AT", format=lambda t: render.human_time(t, now, target.tz)),
            render.Column("scheduled", "SCHEDULED", format=lambda t: render.human_time(t, None, target.tz)),
            render.Column("run_id", "RUN ID"),
        ],
    )


# --- explain -------------------------------------------------------------------------

_GAP_TEXT = {
    "shift": "when a DST change skips its time it fires once, at the moment the clock jumps",
    "skip": "when a DST change skips its time it does not run that day",
}
_REPEAT_TEXT = {
    "first": "when a DST change repeats its time it fires only in the first pass",
    "last": "when a DST change repeats its time it fires only in the second pass",
    "both": "when a DST change repeats its time it fires in each pass, each its own occurrence and run id",
}
_CLASS_TEXT = {
    "fixed-time": "fixed-time (minute and hour are fixed): {gap}; {repeat}",
    "wildcard": (
        "wildcard (minute or hour starts with '*'): times skipped by a DST change are simply skipped; "
        "times repeated by a DST change fire in both passes"
    ),
    "interval": "interval (@every): fires at UTC multiples of the interval since the epoch; DST changes nothing",
    "reboot": "@reboot: once each time the daemon starts after a boot; no clock times",
}
_BIG_JUMP = "a clock change of 3 hours or more is a correction, not DST: nothing is caught up and nothing repeats"


def schedule_class(schedule: Any) -> str:
    """`fixed-time`, `wildcard`, `interval` or `reboot` (docs/reference.md, Time zones and daylight saving time)."""
    if schedule.kind == "reboot":
        return "reboot"
    if schedule.kind == "every":
        return "interval"
    return "fixed-time" if schedule.is_fixed_time else "wildcard"


def _class_meaning(klass: str, schedule: Any) -> str:
    text = _CLASS_TEXT[klass]
    if klass != "fixed-time":
        return text
    return text.format(gap=_GAP_TEXT[schedule.dst_gap], repeat=_REPEAT_TEXT[schedule.dst_repeat])


def dst_policy(target: Target, klass: str) -> dict[str, Any] | None:
    """The DST policy in force, and whether it is cron's; None when no policy applies."""
    if klass != "fixed-time":
        return None
    gap, repeat = target.schedule.dst_gap, target.schedule.dst_repeat
    return {"dst_gap": gap, "dst_repeat": repeat, "as_cron": (gap, repeat) == ("shift", "first")}


def explanation(target: Target, start: datetime, count: int = 5) -> dict[str, Any]:
    """Everything `explain` says, as data: words, class, jitter and why, next fires, DST dates."""
    from chronoctl.render import iso
    from chronod.core.occurrence import utc_stamp

    fires = target.place.upcoming(target.schedule, start, count)
    events = target.schedule.dst_events(start, start + timedelta(days=365))
    klass = schedule_class(target.schedule)
    job = target.job
    example = fires[0] if fires else None
    return {
        "job": job.id if job is not None else None,
        "source": {"file": job.source_file, "line": job.source_line} if job is not None else None,
        "expression": target.expr,
        "timezone": target.tz,
        "description": target.schedule.describe(),
        "class": klass,
        "class_meaning": _class_meaning(klass, target.schedule),
        "dst_policy": dst_policy(target, klass),
        "job_key": target.key,
        "run_on": (job.run_on.mode if job is not None else None),
        "node": target.place.node,
        "nodes": [
            {
                "node": p.node,
                "job_key": p.key,
                "jitter_offset_s": p.offset_s,
                "next": [target.occurrence(o) for o in p.upcoming(target.schedule, start, 1)],
            }
            for p in target.fleet
        ],
        "tolerance_s": target.tolerance_s,
        "jitter_offset_s": target.offset_s,
        "jitter_formula": "int.from_bytes(sha256(job_key).digest()[:8], 'big') % tolerance_s (0 when tolerance_s is 0)",
        "run_id_example": None
        if example is None
        else {
            "scheduled_at": iso(example.scheduled_at, target.tz),
            "input": f"{target.key}|{utc_stamp(example.scheduled_at)}",
            "run_id": example.run_id,
        },
        "after": iso(start, target.tz),
        "next": [_held(target, s) for s in fires],
        "dst_events": [
            {
                "date": e.date,
                "transition_at": iso(e.transition_at, target.tz),
                "change": e.change,
                "shift_s": e.shift_s,
                "effect": e.effect,
            }
            for e in events
        ],
        "blackout": job.blackout if job is not None else None,
        "windows": window_json(job, target.windows, start, start + timedelta(days=WINDOW_LOOKAHEAD_DAYS), target.tz)
        if job is not None
        else [],
    }


def _held(target: Target, occ: Any) -> dict[str, Any]:
    """One next fire, with the maintenance window that holds it (`window`, or None)."""
    from chronod.core import blackout

    out = target.occurrence(occ)
    if target.job is None:
        return out
    hit = blackout.blackout_at(target.job, target.windows, occ.fire_at)
    return {**out, "window": hit.window.name if hit else None}


WINDOW_LOOKAHEAD_DAYS = 35
WINDOW_SPANS = 3


def window_json(job: Any, windows: tuple[Any, ...], start: datetime, end: datetime, tz: str) -> list[dict[str, Any]]:
    """The maintenance windows that hold `job`, each with its next spans in [start, end)."""
    from chronoctl.render import iso
    from chronod.core import blackout

    out = []
    for w in blackout.windows_for(job, windows):
        spans = w.spans(start, end, limit=WINDOW_SPANS)
        out.append(
            {
                "name": w.name,
                "reason": w.reason,
                "source": {"file": w.source_file, "line": w.source_line},
                "cron": w.cron,
                "duration_s": w.duration_s if w.cron else None,
                "timezone": w.timezone,
                "next": [{"from": iso(a, tz), "to": iso(b, tz)} for a, b in spans],
            }
        )
    return out


def explain(
    job: Optional[str] = _job_argument(),
    cron: Optional[str] = _cron_option(),
    tz: Optional[str] = _tz_option(),
    after: Optional[str] = typer.Option(
        None, "--after", metavar="ISO", help="Explain from this time on (default now)."
    ),
    dst_gap: Optional[str] = _dst_gap_option(),
    dst_repeat: Optional[str] = _dst_repeat_option(),
    node: Optional[str] = _node_option(),
    registry: Optional[Path] = _registry_option(),
    db: Optional[str] = _fleet_db_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the explanation as JSON."),
) -> None:
    """A schedule in words: its zone and DST behaviour, jitter and why, run ids, next fires, DST dates."""
    now = common.now_utc()
    target = resolve_target(job, cron, tz, node, registry, now, DstPolicy(dst_gap, dst_repeat), db)
    start = _after(after, target.tz, now)
    data = explanation(target, start)
    from chronoctl import render

    if as_json:
        render.print_json(data)
    else:
        _print_explanation(data, target, start, now)


def _jitter_lines(data: dict[str, Any]) -> list[str]:
    if data["job"] is None:
        return ["jitter:      none (--cron shows nominal times; a job is jittered by its tolerance_s)"]
    lines = [
        f"job key:     {data['job_key']} (run_on: {data['run_on']}"
        + ("; the node name is part of the key" if data["run_on"] == "each" else "")
        + ")",
        f"tolerance:   {data['tolerance_s']}s",
        f"jitter:      +{data['jitter_offset_s']}s = first 8 bytes of sha256({data['job_key']!r}) mod {data['tolerance_s']}"
        if data["tolerance_s"]
        else "jitter:      none (tolerance_s is 0: fires exactly on time)",
        "             the same offset every day, on every node, across restarts",
    ]
    return lines


def _print_explanation(data: dict[str, Any], target: Target, start: datetime, now: datetime) -> None:
    from chronoctl import render

    lines = []
    if data["job"] is not None:
        src = data["source"]
        lines.append(f"job:         {data['job']} ({src['file']}:{src['line']})")
    lines += [
        f"schedule:    {data['expression']}",
        f"in words:    {data['description']}",
        f"zone:        {data['timezone']}",
        f"class:       {data['class_meaning']}",
    ]
    policy = data["dst_policy"]
    if policy is not None:
        same = "cron's behaviour" if policy["as_cron"] else "not cron's behaviour"
        lines.append(f"DST policy:  dst_gap: {policy['dst_gap']}, dst_repeat: {policy['dst_repeat']} ({same})")
    lines += _jitter_lines(data)
    lines += _fleet_lines(target, start, now)
    ex = data["run_id_example"]
    if ex:
        lines.append(f"run id:      sha256({ex['input']!r})[:16] = {ex['run_id']}  (scheduled, pre-jitter time in UTC)")
    for line in lines:
        render.echo_line(render.escape_line(line))
    _print_fires(target, now, data)
    _print_windows(data, target, now)
    _print_dst(data)


def _print_windows(data: dict[str, Any], target: Target, now: datetime) -> None:
    from chronoctl import render

    if data["job"] is None:
        return
    render.echo("")
    if not data["windows"]:
        render.echo("maintenance windows: none hold this job")
        return
    what = {"skip": "recorded skipped_blackout", "defer": "run once when the window ends"}[data["blackout"]]
    render.echo_line(f"maintenance windows (blackout: {data['blackout']}: an occurrence inside one is {what}):")
    for w in data["windows"]:
        src = w["source"]
        every = f"at {w['cron']!r} for {_dur(w['duration_s'])} ({w['timezone']})" if w["cron"] else "once"
        render.echo_line(render.escape_line(f"  {w['name']} ({src['file']}:{src['line']}): {w['reason']}; {every}"))
        for span in w["next"]:
            a, b = datetime.fromisoformat(span["from"]), datetime.fromisoformat(span["to"])
            render.echo(f"    {render.human_time(a, now, target.tz)} .. {render.human_time(b, now, target.tz)}")
        if not w["next"]:
            render.echo(f"    not open in the next {WINDOW_LOOKAHEAD_DAYS} days")


def _dur(seconds: int) -> str:
    from chronod.core.durations import format_duration

    return format_duration(seconds)


def _print_fires(target: Target, now: datetime, data: dict[str, Any]) -> None:
    from chronoctl import render

    render.echo("")
    render.echo("next fires:")
    if not data["next"]:
        render.echo("  none (@reboot)")
    for item in data["next"]:
        at = datetime.fromisoformat(item["at"])
        held = f"  (inside window {item['window']}: blackout {data['blackout']})" if item.get("window") else ""
        render.echo_line(render.escape_line(f"  {render.human_time(at, now, target.tz)}  run {item['run_id']}{held}"))


def _print_dst(data: dict[str, Any]) -> None:
    from chronoctl import render

    render.echo("")
    if data["class"] in ("interval", "reboot"):
        render.echo("DST: does not affect this schedule")
        return
    if not data["dst_events"]:
        render.echo_line(f"DST in the next year: nothing changes what this schedule does in {data['timezone']}")
        return
    render.echo(f"DST in the next year ({data['timezone']}):")
    for e in data["dst_events"]:
        hours = e["shift_s"] / 3600
        render.echo_line(
            render.escape_line(f"  {e['date']}  {e['change']} ({hours:g}h at {e['transition_at']}): {e['effect']}")
        )
    render.echo_line(f"  ({_BIG_JUMP})")


# --- forecast ------------------------------------------------------------------------


@dataclass(frozen=True)
class Forecast:
    """Fires per bucket before and after jitter over [start, end), and the busiest buckets."""

    start: datetime
    end: datetime
    bucket_s: int
    jobs: int
    before: dict[int, int]  # bucket index -> scheduled instants in it
    after: dict[int, int]  # bucket index -> fire instants in it
    after_jobs: dict[int, Counter]  # bucket index -> job id -> fires in it
    before_jobs: dict[int, Counter]

    def bucket_start(self, index: int) -> datetime:
        return self.start + timedelta(seconds=index * self.bucket_s)

    def peaks(self, which: str = "after", top: int = 5) -> list[dict[str, Any]]:
        counts, names = (self.after, self.after_jobs) if which == "after" else (self.before, self.before_jobs)
        best = sorted((i for i, n in counts.items() if n), key=lambda i: (-counts[i], i))[:top]
        return [
            {
                "start": self.bucket_start(i),
                "count": counts[i],
                "jobs": sorted(names[i]),
                "by_job": dict(sorted(names[i].items())),
            }
            for i in best
        ]


def build_forecast(
    entries: list[tuple[str, list[datetime], int]], start: datetime, end: datetime, bucket_s: int
) -> Forecast:
    """Bucket each job's scheduled instants (`before`) and fire instants, scheduled + offset
    (`after`), that fall in [start, end). `entries` are (job id, scheduled instants, offset)."""
    before: Counter = Counter()
    after: Counter = Counter()
    before_jobs: dict[int, Counter] = defaultdict(Counter)
    after_jobs: dict[int, Counter] = defaultdict(Counter)
    t0, t1 = start.timestamp(), end.timestamp()
    for job_id, scheduled, offset in entries:
        for s in scheduled:
            ts = s.timestamp()
            if t0 <= ts < t1:
                i = int((ts - t0) // bucket_s)
                before[i] += 1
                before_jobs[i][job_id] += 1
            if t0 <= ts + offset < t1:
                i = int((ts + offset - t0) // bucket_s)
                after[i] += 1
                after_jobs[i][job_id] += 1
    return Forecast(start, end, bucket_s, len(entries), dict(before), dict(after), after_jobs, before_jobs)


def forecast_entries(
    jobs: dict[str, Any], start: datetime, end: datetime, node: str | None
) -> list[tuple[str, list[datetime], int]]:
    """(id, scheduled instants that may fire or be scheduled in [start, end), jitter offset) per enabled job."""
    entries = []
    for job in sorted(jobs.values(), key=lambda j: j.id):
        if not job.enabled:
            continue
        schedule = common.schedule_of(job)
        if schedule.kind == "reboot":
            continue
        offset = common.placement(job, node).offset_s
        lo = start - timedelta(seconds=offset, microseconds=1)
        entries.append((job.id, schedule.fires(lo, end), offset))
    return entries


def forecast_json(fc: Forecast, top: int) -> dict[str, Any]:
    """The `--json` document; only non-empty buckets are listed."""
    utc = timezone.utc
    indexes = sorted(set(fc.before) | set(fc.after))

    def peaks(which: str) -> list[dict[str, Any]]:
        return [dict(p, start=p["start"].astimezone(utc)) for p in fc.peaks(which, top)]

    return {
        "from": fc.start.astimezone(utc),
        "to": fc.end.astimezone(utc),
        "window_s": int((fc.end - fc.start).total_seconds()),
        "bucket_s": fc.bucket_s,
        "jobs": fc.jobs,
        "fires_before": sum(fc.before.values()),
        "fires_after": sum(fc.after.values()),
        "buckets": [
            {"start": fc.bucket_start(i).astimezone(utc), "before": fc.before.get(i, 0), "after": fc.after.get(i, 0)}
            for i in indexes
        ],
        "peaks": peaks("after"),
        "peaks_before": peaks("before"),
    }


def forecast(
    registry: Optional[Path] = _registry_option(),
    window: str = typer.Option("24h", "--window", metavar="DUR", help="How far ahead to look (90s, 15m, 24h, 7d)."),
    bucket: str = typer.Option("1m", "--bucket", metavar="DUR", help="Bucket size."),
    from_: Optional[str] = typer.Option(
        None,
        "--from",
        metavar="ISO",
        help="Start of the window (default: now, rounded down to the bucket); without an offset, UTC.",
    ),
    node: Optional[str] = _node_option(),
    top: int = typer.Option(5, "--top", min=1, max=1000, help="How many peak buckets to name."),
    as_json: bool = typer.Option(False, "--json", help="Buckets and peaks as JSON (UTC times)."),
) -> None:
    """The herd calendar: how many jobs fire in each bucket, before and after jitter, and the peaks."""
    window_s = common.parse_seconds(window, "--window")
    bucket_s = common.parse_seconds(bucket, "--bucket")
    if window_s // bucket_s > 1_000_000:
        raise UsageError(
            f"--window {window} in --bucket {bucket} buckets is more than a million buckets", "use a larger --bucket"
        )
    now = common.now_utc()
    start = common.parse_instant(from_, "UTC", "--from") if from_ else _floor(now, bucket_s)
    end = start + timedelta(seconds=window_s)
    reg = common.registry_dir(registry)
    if not reg.exists():
        raise UsageError(f"registry {str(reg)!r} does not exist", common.registry_hint(reg))
    result = common.load([reg], now, secure=False)
    _warn_invalid(result, reg)
    entries = forecast_entries(result.jobs, start, end, node)
    fc = build_forecast(entries, start, end, bucket_s)
    held = forecast_windows(result.jobs, result.blackouts, entries, start, end)
    from chronoctl import render

    if as_json:
        render.print_json(dict(forecast_json(fc, top), windows=held))
    else:
        _print_forecast(fc, top, now)
        _print_forecast_windows(held, now)


FORECAST_SPANS = 100  # spans of one window a forecast lists; a window open every second has 604,800 a week


def _count_in(times: list[datetime], a: datetime, b: datetime) -> int:
    """How many of the sorted `times` lie in [a, b)."""
    return bisect_left(times, b) - bisect_left(times, a)


def forecast_windows(
    jobs: dict[str, Any],
    windows: list[Any],
    entries: list[tuple[str, list[datetime], int]],
    start: datetime,
    end: datetime,
) -> list[dict[str, Any]]:
    """Each span of a maintenance window in [start, end): the jobs it holds and how many of
    their fires fall inside it (the daemon skips or defers those)."""
    fires = {job_id: sorted(s + timedelta(seconds=off) for s in scheduled) for job_id, scheduled, off in entries}
    out = []
    for w in windows:
        held = sorted(j.id for j in jobs.values() if j.enabled and w.applies_to(j))
        spans = w.spans(start, end, limit=FORECAST_SPANS + 1)
        for i, (a, b) in enumerate(spans[:FORECAST_SPANS]):
            inside = {j: _count_in(fires.get(j, []), a, b) for j in held}
            out.append(
                {
                    "name": w.name,
                    "reason": w.reason,
                    "from": a.astimezone(timezone.utc),
                    "to": b.astimezone(timezone.utc),
                    "jobs": held,
                    "fires_held": sum(inside.values()),
                    "by_job": {j: n for j, n in inside.items() if n},
                    "more": i == FORECAST_SPANS - 1 and len(spans) > FORECAST_SPANS,
                }
            )
    return sorted(out, key=lambda d: (d["from"], d["name"]))


def _print_forecast_windows(held: list[dict[str, Any]], now: datetime) -> None:
    from chronoctl import render

    if not held:
        return
    render.echo("")
    render.echo("maintenance windows in this period (their fires are skipped or deferred):")
    for h in held:
        jobs = ", ".join(h["jobs"][:8]) + (f" and {len(h['jobs']) - 8} more" if len(h["jobs"]) > 8 else "")
        render.echo(
            render.escape_line(
                f"  {render.human_time(h['from'], now)} .. {render.human_time(h['to'], now)}  {h['name']} "
                f"({h['reason']}): {h['fires_held']} fire{'' if h['fires_held'] == 1 else 's'} held of {jobs or 'no job'}"
            )
        )
        if h["more"]:
            render.echo(
                render.escape_line(
                    f"  ... {h['name']} opens more often than {FORECAST_SPANS} times in this period; "
                    "forecast a shorter --window to see the rest"
                )
            )


def _floor(at: datetime, bucket_s: int) -> datetime:
    ts = int(at.timestamp())
    return datetime.fromtimestamp(ts - ts % bucket_s, timezone.utc)


def _warn_invalid(result: Any, reg: Path) -> None:
    from chronoctl import render

    errors = [p for p in result.problems if p.severity == "error"]
    if errors:
        render.warn(
            f"{len(errors)} error(s) in {reg}: the forecast covers the valid jobs only (see chronoctl validate {reg})"
        )


def _print_forecast(fc: Forecast, top: int, now: datetime) -> None:
    from chronoctl import render
    from chronod.core.durations import format_duration

    bucket = format_duration(fc.bucket_s)
    render.echo_line(
        f"herd forecast: {fc.jobs} jobs, {sum(fc.before.values())} fires from {render.human_time(fc.start)} "
        f"to {render.human_time(fc.end)}, in {bucket} buckets"
    )
    if not fc.before and not fc.after:
        render.echo("nothing fires in this window")
        return
    _print_chart(fc, bucket)
    for which, label in (("after", "after jitter"), ("before", "before jitter")):
        render.echo("")
        render.echo(f"busiest {bucket} buckets {label}:")
        for p in fc.peaks(which, top):
            names = ", ".join(render.escape_line(j) + (f" x{n}" if n > 1 else "") for j, n in p["by_job"].items())
            render.echo_line(f"  {p['count']:>5}  {render.human_time(p['start'], now)}  {names}")


CHART_ROWS = 48
BAR_WIDTH = 24


def chart_rows(fc: Forecast, rows: int = CHART_ROWS) -> list[tuple[datetime, int, int]]:
    """(row start, busiest bucket before jitter, busiest bucket after jitter) for at most
    `rows` rows covering the window: each row is a whole number of buckets."""
    n_buckets = max(1, -(-int((fc.end - fc.start).total_seconds()) // fc.bucket_s))
    per_row = max(1, -(-n_buckets // rows))
    out = []
    for first in range(0, n_buckets, per_row):
        span = range(first, min(first + per_row, n_buckets))
        out.append(
            (fc.bucket_start(first), max(fc.before.get(i, 0) for i in span), max(fc.after.get(i, 0) for i in span))
        )
    return out


def _print_chart(fc: Forecast, bucket: str) -> None:
    from chronoctl import render
    from chronod.core.durations import format_duration

    rows = chart_rows(fc)
    bar_width = BAR_WIDTH
    if render.is_terminal():  # the bars share what the times and counts leave of the width
        bar_width = max(8, min(BAR_WIDTH, (render.terminal_width() - 33) // 2))
    per_row_s = int((rows[1][0] - rows[0][0]).total_seconds()) if len(rows) > 1 else fc.bucket_s
    top = max(max(b, a) for _, b, a in rows) or 1
    unicode = render.unicode_ok()
    zone = render.zone_note(fc.start)
    if per_row_s == fc.bucket_s:
        render.echo_line(f"fires per {bucket} bucket ({zone}): before jitter | after jitter")
    else:
        render.echo_line(
            f"busiest {bucket} bucket in each {format_duration(per_row_s)} ({zone}): before jitter | after jitter"
        )
    for start, b, a in rows:
        left = render.bar(b, top, bar_width, unicode).ljust(bar_width)
        right = render.bar(a, top, bar_width, unicode)
        when = render.short_time(start, fc.start).rjust(14)
        render.echo(f"  {when}  {b:>5} {left} | {a:>5} {right}".rstrip())
