"""`chronoctl next`, `explain` and `forecast`: when jobs fire, why, and how they pile up.

Times in `next` and `explain` are shown in the schedule's own zone (JSON: ISO-8601 with
that zone's offset, e.g. `2026-11-01T02:30:00-05:00`), because that is the zone the
expression is written in. `forecast` mixes zones, so its JSON is in UTC (`+00:00`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import typer

from chronoctl import common
from chronoctl import complete as _complete
from chronoctl.errors import UsageError

if TYPE_CHECKING:  # the schedule engine is imported by the commands that run, not by --help
    from chronod.core.explain import Explanation, Fire, Target, WindowShown
    from chronod.core.forecast import Forecast, HeldSpan, Which
    from chronod.core.occurrence import Occurrence

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


def occurrence_json(target: Target, occ: Occurrence) -> dict[str, Any]:
    """`{"at", "scheduled_at", "run_id"}` of one occurrence, in the schedule's zone, with
    `"node"` for a job that runs on each node (the node these times are for)."""
    from chronoctl.render import iso

    out = {"at": iso(occ.fire_at, target.tz), "scheduled_at": iso(occ.scheduled_at, target.tz), "run_id": occ.run_id}
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
    from chronod.core import explain as explain_core

    if cron is not None:
        if node is not None:
            raise UsageError("--node applies to a JOB that runs on each node, not to --cron")
        zone = common.check_zone(tz or "UTC")
        expr = cron.strip()
        return explain_core.expression_target(expr, zone, common.compile_or_fail(expr, zone, *dst.check()))
    if tz is not None:
        raise UsageError("--tz applies to --cron; a job's zone is its `timezone` field")
    if dst.gap is not None or dst.repeat is not None:
        raise UsageError(
            "--dst-gap and --dst-repeat apply to --cron; a job's policy is its dst_gap and dst_repeat fields"
        )
    assert job_id is not None  # one of the two, checked above
    reg = common.registry_dir(registry)
    job, result = common.find_job_in(reg, job_id, now)
    schedule = common.schedule_of(job)
    nodes = common.fleet_nodes(db) if job.run_on.each else []
    return explain_core.job_target(job, schedule, common.node_or_here(node), nodes, result.blackouts)


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
        render.print_json([occurrence_json(target, o) for o in fires])
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

_BIG_JUMP = "a clock change of 3 hours or more is a correction, not DST: nothing is caught up and nothing repeats"


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
    from chronoctl import render
    from chronod.core import explain as explain_core

    answer = explain_core.explanation(target, start)

    if as_json:
        render.print_json(explanation_json(answer))
    else:
        _print_explanation(answer, now)


def explanation_json(ex: Explanation) -> dict[str, Any]:
    """The `--json` document of `explain`: times in the schedule's zone."""
    from chronoctl.render import iso
    from chronod.core.explain import JITTER_FORMULA

    t, job, tz = ex.target, ex.job, ex.target.tz
    policy, example = ex.dst_policy, ex.run_id_example
    return {
        "job": job.id if job is not None else None,
        "source": {"file": job.source_file, "line": job.source_line} if job is not None else None,
        "expression": t.expr,
        "timezone": tz,
        "description": t.schedule.describe(),
        "class": ex.schedule_class,
        "class_meaning": ex.class_meaning,
        "dst_policy": None
        if policy is None
        else {"dst_gap": policy.dst_gap, "dst_repeat": policy.dst_repeat, "as_cron": policy.as_cron},
        "job_key": t.key,
        "run_on": job.run_on.mode if job is not None else None,
        "node": t.place.node,
        "nodes": [
            {
                "node": n.place.node,
                "job_key": n.place.key,
                "jitter_offset_s": n.place.offset_s,
                "next": [occurrence_json(t, o) for o in n.next],
            }
            for n in ex.nodes
        ],
        "tolerance_s": t.tolerance_s,
        "jitter_offset_s": t.offset_s,
        "jitter_formula": JITTER_FORMULA,
        "run_id_example": None
        if example is None
        else {"scheduled_at": iso(example.scheduled_at, tz), "input": example.input, "run_id": example.run_id},
        "after": iso(ex.after, tz),
        "next": [_fire_json(ex, f) for f in ex.next],
        "dst_events": [
            {
                "date": e.date,
                "transition_at": iso(e.transition_at, tz),
                "change": e.change,
                "shift_s": e.shift_s,
                "effect": e.effect,
            }
            for e in ex.dst_events
        ],
        "blackout": job.blackout if job is not None else None,
        "windows": [_window_json(w, tz) for w in ex.windows],
    }


def _fire_json(ex: Explanation, fire: Fire) -> dict[str, Any]:
    """One next fire; for a job, with the maintenance window that holds it (`window`, or None)."""
    out = occurrence_json(ex.target, fire.occurrence)
    if ex.job is None:
        return out
    return {**out, "window": fire.window.window.name if fire.window else None}


def _window_json(shown: WindowShown, tz: str) -> dict[str, Any]:
    from chronoctl.render import iso

    w = shown.window
    return {
        "name": w.name,
        "reason": w.reason,
        "source": {"file": w.source_file, "line": w.source_line},
        "cron": w.cron,
        "duration_s": w.duration_s if w.cron else None,
        "timezone": w.timezone,
        "next": [{"from": iso(a, tz), "to": iso(b, tz)} for a, b in shown.spans],
    }


def _jitter_lines(ex: Explanation) -> list[str]:
    t, job = ex.target, ex.job
    if job is None:
        return ["jitter:      none (--cron shows nominal times; a job is jittered by its tolerance_s)"]
    run_on = job.run_on.mode
    return [
        f"job key:     {t.key} (run_on: {run_on}"
        + ("; the node name is part of the key" if run_on == "each" else "")
        + ")",
        f"tolerance:   {t.tolerance_s}s",
        f"jitter:      +{t.offset_s}s = first 8 bytes of sha256({t.key!r}) mod {t.tolerance_s}"
        if t.tolerance_s
        else "jitter:      none (tolerance_s is 0: fires exactly on time)",
        "             the same offset every day, on every node, across restarts",
    ]


def _print_explanation(ex: Explanation, now: datetime) -> None:
    from chronoctl import render

    t, job = ex.target, ex.job
    lines = []
    if job is not None:
        lines.append(f"job:         {job.id} ({job.source_file}:{job.source_line})")
    lines += [
        f"schedule:    {t.expr}",
        f"in words:    {t.schedule.describe()}",
        f"zone:        {t.tz}",
        f"class:       {ex.class_meaning}",
    ]
    policy = ex.dst_policy
    if policy is not None:
        same = "cron's behaviour" if policy.as_cron else "not cron's behaviour"
        lines.append(f"DST policy:  dst_gap: {policy.dst_gap}, dst_repeat: {policy.dst_repeat} ({same})")
    lines += _jitter_lines(ex)
    lines += _fleet_lines(t, ex.after, now)
    example = ex.run_id_example
    if example:
        lines.append(
            f"run id:      sha256({example.input!r})[:16] = {example.run_id}  (scheduled, pre-jitter time in UTC)"
        )
    for line in lines:
        render.echo_line(render.escape_line(line))
    _print_fires(ex, now)
    _print_windows(ex, now)
    _print_dst(ex)


def _print_windows(ex: Explanation, now: datetime) -> None:
    from chronoctl import render
    from chronod.core.explain import WINDOW_LOOKAHEAD_DAYS

    job, tz = ex.job, ex.target.tz
    if job is None:
        return
    render.echo("")
    if not ex.windows:
        render.echo("maintenance windows: none hold this job")
        return
    what = {"skip": "recorded skipped_blackout", "defer": "run once when the window ends"}[job.blackout]
    render.echo_line(f"maintenance windows (blackout: {job.blackout}: an occurrence inside one is {what}):")
    for shown in ex.windows:
        w = shown.window
        every = f"at {w.cron!r} for {_dur(w.duration_s)} ({w.timezone})" if w.cron else "once"
        render.echo_line(render.escape_line(f"  {w.name} ({w.source_file}:{w.source_line}): {w.reason}; {every}"))
        for a, b in shown.spans:
            render.echo(f"    {render.human_time(a, now, tz)} .. {render.human_time(b, now, tz)}")
        if not shown.spans:
            render.echo(f"    not open in the next {WINDOW_LOOKAHEAD_DAYS} days")


def _dur(seconds: int) -> str:
    from chronod.core.durations import format_duration

    return format_duration(seconds)


def _print_fires(ex: Explanation, now: datetime) -> None:
    from chronoctl import render

    render.echo("")
    render.echo("next fires:")
    if not ex.next:
        render.echo("  none (@reboot)")
    for fire in ex.next:
        occ = fire.occurrence
        held = (
            f"  (inside window {fire.window.window.name}: blackout {ex.job.blackout})" if fire.window and ex.job else ""
        )
        render.echo_line(
            render.escape_line(f"  {render.human_time(occ.fire_at, now, ex.target.tz)}  run {occ.run_id}{held}")
        )


def _print_dst(ex: Explanation) -> None:
    from chronoctl import render

    tz = ex.target.tz
    render.echo("")
    if ex.schedule_class in ("interval", "reboot"):
        render.echo("DST: does not affect this schedule")
        return
    if not ex.dst_events:
        render.echo_line(f"DST in the next year: nothing changes what this schedule does in {tz}")
        return
    render.echo(f"DST in the next year ({tz}):")
    for e in ex.dst_events:
        hours = e.shift_s / 3600
        render.echo_line(
            render.escape_line(f"  {e.date}  {e.change} ({hours:g}h at {render.iso(e.transition_at, tz)}): {e.effect}")
        )
    render.echo_line(f"  ({_BIG_JUMP})")


# --- forecast ------------------------------------------------------------------------


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
    from chronod.core import forecast as herd

    now = common.now_utc()
    start = common.parse_instant(from_, "UTC", "--from") if from_ else herd.floor(now, bucket_s)
    end = start + timedelta(seconds=window_s)
    reg = common.registry_dir(registry)
    if not reg.exists():
        raise UsageError(f"registry {str(reg)!r} does not exist", common.registry_hint(reg))
    result = common.load([reg], now, secure=False)
    _warn_invalid(result, reg)
    schedules = {j.id: common.schedule_of(j) for j in result.jobs.values() if j.enabled}
    fc = herd.forecast(
        result.jobs.values(), schedules, result.blackouts, start, end, bucket_s, common.node_or_here(node)
    )
    from chronoctl import render

    if as_json:
        render.print_json(forecast_json(fc, top))
    else:
        _print_forecast(fc, top, now)
        _print_forecast_windows(fc.held, now)


def forecast_json(fc: Forecast, top: int) -> dict[str, Any]:
    """The `--json` document, in UTC; only non-empty buckets are listed."""
    utc = timezone.utc

    def peaks(which: Which) -> list[dict[str, Any]]:
        return [
            {"start": p.start.astimezone(utc), "count": p.count, "jobs": p.jobs, "by_job": p.by_job}
            for p in fc.peaks(which, top)
        ]

    return {
        "from": fc.start.astimezone(utc),
        "to": fc.end.astimezone(utc),
        "window_s": int((fc.end - fc.start).total_seconds()),
        "bucket_s": fc.bucket_s,
        "jobs": fc.jobs,
        "fires_before": fc.fires_before,
        "fires_after": fc.fires_after,
        "buckets": [
            {"start": fc.bucket_start(i).astimezone(utc), "before": fc.before.get(i, 0), "after": fc.after.get(i, 0)}
            for i in fc.buckets()
        ],
        "peaks": peaks("after"),
        "peaks_before": peaks("before"),
        "windows": [
            {
                "name": h.name,
                "reason": h.reason,
                "from": h.start,
                "to": h.end,
                "jobs": h.jobs,
                "fires_held": h.fires_held,
                "by_job": h.by_job,
                "more": h.more,
            }
            for h in fc.held
        ],
    }


def _print_forecast_windows(held: Sequence[HeldSpan], now: datetime) -> None:
    from chronoctl import render
    from chronod.core.forecast import MAX_SPANS

    if not held:
        return
    render.echo("")
    render.echo("maintenance windows in this period (their fires are skipped or deferred):")
    for h in held:
        jobs = ", ".join(h.jobs[:8]) + (f" and {len(h.jobs) - 8} more" if len(h.jobs) > 8 else "")
        render.echo(
            render.escape_line(
                f"  {render.human_time(h.start, now)} .. {render.human_time(h.end, now)}  {h.name} "
                f"({h.reason}): {h.fires_held} fire{'' if h.fires_held == 1 else 's'} held of {jobs or 'no job'}"
            )
        )
        if h.more:
            render.echo(
                render.escape_line(
                    f"  ... {h.name} opens more often than {MAX_SPANS} times in this period; "
                    "forecast a shorter --window to see the rest"
                )
            )


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
        f"herd forecast: {fc.jobs} jobs, {fc.fires_before} fires from {render.human_time(fc.start)} "
        f"to {render.human_time(fc.end)}, in {bucket} buckets"
    )
    if not fc.before and not fc.after:
        render.echo("nothing fires in this window")
        return
    _print_chart(fc, bucket)
    sides: tuple[tuple[Which, str], ...] = (("after", "after jitter"), ("before", "before jitter"))
    for which, label in sides:
        render.echo("")
        render.echo(f"busiest {bucket} buckets {label}:")
        for p in fc.peaks(which, top):
            names = ", ".join(render.escape_line(j) + (f" x{n}" if n > 1 else "") for j, n in p.by_job.items())
            render.echo_line(f"  {p.count:>5}  {render.human_time(p.start, now)}  {names}")


BAR_WIDTH = 24


def _print_chart(fc: Forecast, bucket: str) -> None:
    from chronoctl import render
    from chronod.core.durations import format_duration
    from chronod.core.forecast import chart_rows

    rows = chart_rows(fc)
    bar_width = BAR_WIDTH
    if render.is_terminal():  # the bars share what the times and counts leave of the width
        bar_width = max(8, min(BAR_WIDTH, (render.terminal_width() - 33) // 2))
    per_row_s = int((rows[1].start - rows[0].start).total_seconds()) if len(rows) > 1 else fc.bucket_s
    top = max(max(r.before, r.after) for r in rows) or 1
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
        when = (render.short_time(start, fc.start) or "").rjust(14)
        render.echo(f"  {when}  {b:>5} {left} | {a:>5} {right}".rstrip())
