"""`status`, `runs`, `logs`, `did-it-run` and `missed`: the run history, read from the store.

Every query is bounded by job and time window on the store's indexes (job_id,
scheduled_at) so that the answer comes as fast with a million runs as with ten; the
judging itself is `chronod.core.history` (pure).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Optional, Sequence

import typer

from chronoctl import cmd_ops, common
from chronoctl import complete as _complete
from chronoctl.cmd_ops import db_option, json_option
from chronoctl.errors import EXIT_NO, UsageError

if TYPE_CHECKING:
    from chronod.store.api import JobRow, Leases, Run, Store

LAST_RUNS = 10
STREAK_SCAN = 100
FAILING = ("failed", "timed_out", "lost")


def register(app: typer.Typer) -> None:
    """Add `status`, `runs`, `logs`, `did-it-run` and `missed` to `app`."""
    app.command("status")(status)
    app.command("runs")(runs)
    app.command("logs")(logs)
    app.command("did-it-run")(did_it_run)
    app.command("missed")(missed)


# --- helpers ------------------------------------------------------------------------------


def _schedule(row: "JobRow") -> Any:
    return common.schedule_of(row.spec)


def _node_names(store: "Leases") -> list[str]:
    return [n.name for n in store.nodes()]


def _run_rows(runs: list["Run"], now: datetime, wide: bool = False) -> list[dict[str, Any]]:
    from chronoctl.render import age, short_id, short_time

    return [
        {
            "state": r.state,
            "scheduled": short_time(r.scheduled_at, now),
            "started": short_time(r.started_at, now),
            "duration": age(d) if (d := cmd_ops.duration_s(r)) is not None else None,
            "exit": r.exit_code if r.signal is None else f"sig {r.signal}",
            "attempts": r.attempts,
            "node": r.node,
            "run_id": short_id(r.run_id, wide),
            "trigger": None if r.trigger == "schedule" else r.trigger,
        }
        for r in runs
    ]


def run_columns(rows: list[dict[str, Any]], fleet: bool, wide: bool = False) -> list[Any]:
    """The columns of a table of runs: the node only in a fleet, the attempts only when
    some run had more than one, the trigger only when some run was not scheduled; on a
    narrow terminal the least useful go first (started, trigger, attempts, exit, duration)."""
    from chronoctl.render import Column

    cols = [
        Column("state"),
        Column("scheduled"),
        Column("started", drop=5),
        Column("duration", "TOOK", "right", drop=2),
        Column("exit", "EXIT", "right", drop=3),
    ]
    if wide or any((r["attempts"] or 0) > 1 for r in rows):
        cols.append(Column("attempts", "TRIES", "right", drop=4))
    if fleet or wide:
        cols.append(Column("node", drop=6))
    cols.append(Column("run_id", "RUN ID"))
    if wide or any(r["trigger"] for r in rows):
        cols.append(Column("trigger", drop=7))
    return cols


def _placements(row: "JobRow", nodes: list[str]) -> list[Any]:
    """Where the job's occurrences live: one placement, or one per known node for a job
    that runs on each node (none when no node is known yet)."""
    from chronod.core import occurrence

    return occurrence.placements(row.spec, nodes)


def _occurrence_json(o: Any) -> dict[str, Any]:
    return {
        "scheduled_at": cmd_ops.iso(o.scheduled_at),
        "fire_at": cmd_ops.iso(o.fire_at),
        "node": o.node,
        "run_id": o.run_id,
    }


# --- status ---------------------------------------------------------------------------------


def status(
    job: Optional[str] = typer.Argument(
        None, metavar="[JOB]", help="A job id; without it, the whole installation.", autocompletion=_complete.job_ids
    ),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
    wide: bool = cmd_ops.wide_option(),
    utc: bool = cmd_ops.utc_option(),
) -> None:
    """The daemons, failing and silent jobs and what runs now; or one job in detail.
    A health check: exit 0 healthy, 1 degraded (registry errors, quarantined jobs, a fleet
    node down), 3 no live chronod (on this host judged by its process, at once after a crash)."""
    from chronod.store import status as views

    now = common.now_utc()
    with cmd_ops.opened(db) as store:
        fleet = cmd_ops.is_fleet(store)
        if job is None:
            over = views.overview(store, now, windows=_registry_windows(now))
            data = _overview_json(store, over)
            verdict = over.health
        else:
            row = cmd_ops.get_job(store, job)
            js = views.job_status(store, row, now, windows=_registry_windows(now))
            data = _job_status_json(store, js)
            verdict = js.health
    if as_json:
        _print_json(data)
    elif job is None:
        _print_overview(data, now, fleet, wide)
    else:
        _print_job_status(data, js.runs, now, fleet, wide)
    if verdict.exit_code:
        raise typer.Exit(verdict.exit_code)


def _registry_windows(now: datetime) -> list[Any]:
    """The registry's maintenance windows, when this user can read the registry (else none:
    `status` answers from the database alone)."""
    from chronoctl.errors import CliError

    reg = common.registry_dir(None)
    if not reg.is_dir():
        return []
    try:
        return list(common.load([reg], now, secure=False).blackouts)
    except CliError:
        return []


def _print_json(data: Any) -> None:
    from chronoctl.render import print_json

    print_json(data)


def _health_json(h: Any) -> dict[str, Any]:
    return {"verdict": h.verdict.value, "exit_code": h.exit_code, "reasons": list(h.reasons)}


def _job_status_json(store: "Store", js: Any) -> dict[str, Any]:
    spec, hold = js.spec, js.hold
    return {
        "job_id": spec.id,
        "owner": spec.owner,
        "schedule": spec.schedule,
        "timezone": spec.timezone,
        "schedule_words": js.schedule_words,
        "run_on": spec.run_on.mode,
        "jitter_offset_s": js.jitter_offset_s,
        "tolerance_s": spec.tolerance_s,
        "enabled": spec.enabled,
        "paused": hold is not None,
        "paused_reason": hold.reason if hold else None,
        "paused_at": cmd_ops.iso(js.pause.since if js.pause else None),
        "paused_by": hold.by if hold else None,
        "paused_until": cmd_ops.iso(hold.until) if hold else None,
        "paused_scope": hold.name if hold else None,
        "held": cmd_ops.hold_json(hold),
        "registered_since": cmd_ops.iso(js.registered_since),
        "tags": list(spec.tags),
        "next": [_next_json(n) for n in js.next],
        "nodes": [
            {"node": n.node, "jitter_offset_s": n.jitter_offset_s, "next": [_next_json(n.next)] if n.next else []}
            for n in js.nodes
        ],
        "success_streak": js.success_streak,
        "success_streak_capped": js.success_streak_capped,
        "last_success_at": cmd_ops.iso(js.last_success_at),
        "silence_s": round(js.silence.age_s) if js.silence.age_s is not None else None,
        "max_silence_s": js.silence.max_silence_s,
        "silent": js.silent,
        "history_days": spec.history_days,
        "pruned_through": cmd_ops.iso(js.pruned_through),
        "runs": [cmd_ops.run_json(r) for r in js.runs],
        "waiting": [
            {"run_id": r.run_id, "fire_at": cmd_ops.iso(r.fire_at), "held": cmd_ops.hold_json(h)} for r, h in js.waiting
        ],
        "backfills": _backfills_json(store, js.backfills),
        "health": _health_json(js.health),
    }


def _next_json(n: Any) -> dict[str, Any]:
    return dict(_occurrence_json(n.occurrence), held=cmd_ops.hold_json(n.hold))


def _print_job_status(d: dict[str, Any], recent: list["Run"], now: datetime, fleet: bool, wide: bool) -> None:
    from chronoctl.render import age, echo, echo_field, human_time, print_table, zone_note

    h = d["health"]  # the verdict first, healthy too, as the overview gives it (chronoctl(1))
    word = h["verdict"] if h["verdict"] == "healthy" else h["verdict"].upper()
    echo_field("health", f"{word} (exit {h['exit_code']})" + (": " + "; ".join(h["reasons"]) if h["reasons"] else ""))
    echo_field("job", d["job_id"])
    echo_field("owner", d["owner"])
    echo_field("schedule", f"{d['schedule']} (zone {d['timezone']}): {d['schedule_words']}")
    if d["run_on"] == "each":
        echo_field("jitter", f"each node its own, of tolerance {d['tolerance_s']}s (run_on: each)")
    else:
        echo_field("jitter", f"+{d['jitter_offset_s']}s of tolerance {d['tolerance_s']}s")
    if d["registered_since"]:
        echo_field("known", f"since {_human(d['registered_since'], now)} (occurrences before it are not expected)")
    if d["paused"]:
        scope = "" if d["paused_scope"] == "job" else f" ({d['paused_scope']})"
        who = f" by {d['paused_by']}" if d["paused_by"] else ""
        until = f"; ends by itself {_human(d['paused_until'], now)}" if d["paused_until"] else "; until resumed"
        echo_field(
            "paused",
            f"since {_human(d['paused_at'], now)}{scope}{who}: {d['paused_reason'] or 'no reason given'}{until}",
        )
    elif not d["enabled"]:
        echo_field("disabled", "enabled: false in its file")
    _print_backfills(d["backfills"])
    if d["run_on"] == "each":
        _print_each_next(d, now)
    for w in d["waiting"]:
        due = human_time(datetime.fromisoformat(w["fire_at"]), now)
        echo_field("waiting", f"run {w['run_id'][:8]} due {due}: {cmd_ops.held_text(w['held'], now)}")
    for i, n in enumerate(d["next"] if d["run_on"] != "each" else []):
        when = human_time(datetime.fromisoformat(n["fire_at"]), now)
        echo_field("next" if i == 0 else "", when + (f": {cmd_ops.held_text(n['held'], now)}" if n["held"] else ""))
    streak = f"{d['success_streak']}{'+' if d['success_streak_capped'] else ''}"
    echo_field(
        "success", f"streak {streak}; last {_human(d['last_success_at'], now) if d['last_success_at'] else 'never'}"
    )
    limit = age(d["max_silence_s"]) if d["max_silence_s"] else "none"
    echo_field("silence", f"max {limit}" + ("; SILENT: past max_silence_s" if d["silent"] else ""))
    pruned = f"; pruned up to {_human(d['pruned_through'], now)}" if d["pruned_through"] else ""
    echo_field("history", f"kept {d['history_days']} days{pruned}")
    echo()
    rows = _run_rows(recent, now, wide)
    print_table(
        rows,
        run_columns(rows, fleet, wide),
        title=f"last runs ({zone_note(now)})",
        empty="(no runs recorded)",
        wide=wide,
    )


def _print_each_next(d: dict[str, Any], now: datetime) -> None:
    """The next fire of a `run_on: each` job on every node the store knows."""
    from chronoctl.render import echo_field, human_time

    if not d["nodes"]:
        echo_field("next", "no node has run chronod on this database yet (each node fires at its own offset)")
    for i, n in enumerate(d["nodes"]):
        when = human_time(datetime.fromisoformat(n["next"][0]["fire_at"]), now) if n["next"] else "never"
        echo_field("next" if i == 0 else "", f"{when} on {n['node']} (jitter +{n['jitter_offset_s']}s)")


def _human(text: str | None, now: datetime) -> str:
    from chronoctl.render import human_time

    return human_time(datetime.fromisoformat(text), now) if text else "-"


def _overview_json(store: "Store", o: Any) -> dict[str, Any]:
    from chronod.core.health import Verdict

    return {
        "health": _health_json(o.health),
        "nodes": [
            dict(_node_json(n, o.node_info.get(n.name, {}), o.now), running=list(o.running_on[n.name]))
            for n in o.health.nodes
        ],
        "spec_disagreements": o.spec_disagreements,
        "jobs": o.jobs,
        "paused": o.paused,
        "pauses": [_pause_dict(p.pause, list(p.jobs)) for p in o.pauses],
        "failing": [dict(cmd_ops.run_json(f.run), owner=f.owner, held=cmd_ops.hold_json(f.hold)) for f in o.failing],
        "silent": [_silent_json(q) for q in o.silent],
        "registry_errors": o.registry_errors,
        "running": [cmd_ops.run_json(r) for r in o.running],
        "database": {"bytes": o.database_bytes, "runs_by_state": o.runs_by_state},
        "backfills": _backfills_json(store, o.backfills),
        "down": o.health.verdict is Verdict.DOWN,
    }


def _pause_dict(p: Any, jobs: list[str] | None = None) -> dict[str, Any]:
    d = {
        "kind": p.kind,
        "target": p.target,
        "reason": p.reason,
        "by": p.by,
        "since": cmd_ops.iso(p.since),
        "until": cmd_ops.iso(p.until),
    }
    return d if jobs is None else dict(d, jobs=jobs)


def _pause_line(p: dict[str, Any], now: datetime) -> str:
    n = len(p["jobs"])
    what = p["target"] if p["kind"] == "job" else f"{p['kind']} {p['target']} ({n} job{'' if n == 1 else 's'})"
    who = f" by {p['by']}" if p["by"] else ""
    until = f", ends by itself {_human(p['until'], now)}" if p["until"] else ", until resumed"
    return f"paused {what}{who} since {_human(p['since'], now)}{until}: {p['reason']}"


def _backfills_json(store: "Store", shown: list[Any]) -> list[dict[str, Any]]:
    """The backfills `status` shows (chronod.store.status.backfills_shown), with their progress."""
    from chronoctl.cmd_backfill import backfill_json

    data = [backfill_json(store, bf) for bf in shown]
    return [{k: v for k, v in d.items() if k != "runs"} for d in data]


def _print_backfills(backfills: list[dict[str, Any]]) -> None:
    from chronoctl.cmd_backfill import progress_line
    from chronoctl.render import echo_wrapped, escape_line

    for b in backfills:
        line = f"{progress_line(b)} ({b['job_id']}, --only {b['only']}, {b['from']} to {b['to']})"
        if b["state"] == "cancelled":
            line = f"{line}: CANCELLED, nothing more starts ({b['error'] or 'cancelled'})"
        echo_wrapped(escape_line(line))


def _database_line(db: dict[str, Any]) -> str:
    """`database: 48.2 MiB, 1,000,000 runs (990,000 succeeded, 10,000 failed)`."""
    counts = db["runs_by_state"]
    size = f"{db['bytes'] / 2**20:.1f} MiB, " if db["bytes"] is not None else ""
    states = ", ".join(f"{n:,} {state}" for state, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"database: {size}{sum(counts.values()):,} runs" + (f" ({states})" if states else "")


def _silent(store: "Store", rows: list["JobRow"], now: datetime, recent: list[Any]) -> list[Any]:
    """The jobs silent now, as `status` judges them (chronod.store.status.silent)."""
    from chronod.store import status as views

    in_force = views.pauses_in_force(store, rows, now)
    held = views.held_jobs(rows, in_force)
    found = views.silent(store, rows, now, recent, held)
    if not found:
        return found  # the registry is read only when a window could matter
    windows = _registry_windows(now)
    return views.silent(store, rows, now, recent, held, windows) if windows else found


def _silent_json(q: Any) -> dict[str, Any]:
    """A silent job in `--json` (the same keys in `status` and `missed`)."""
    return {
        "job_id": q.job_id,
        "owner": q.owner,
        "last_success_at": cmd_ops.iso(q.last_success),
        "silence_s": round(q.silence_s),
        "max_silence_s": q.max_silence_s,
        "silent_since": cmd_ops.iso(q.silent_since),
    }


def _silent_row(d: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A silent job as a table row: its last success (or "never"), how long without one."""
    from chronoctl.render import age, short_time

    last = short_time(datetime.fromisoformat(d["last_success_at"]), now) if d["last_success_at"] else "never"
    return {
        "job": d["job_id"],
        "owner": d["owner"],
        "last_success": last,
        "no_success_for": age(d["silence_s"]),
        "max_silence": age(d["max_silence_s"]),
    }


SILENT_COLUMNS = (
    "job",
    ("last_success", "LAST SUCCESS"),
    ("no_success_for", "NO SUCCESS FOR", "right"),
    ("max_silence", "MAX SILENCE", "right"),
)


def _node_json(n: Any, info: Any, now: datetime) -> dict[str, Any]:
    """A node as `status --json` shows it (n: chronod.core.health.NodeHealth)."""
    return {
        "name": n.name,
        "hostname": n.hostname,
        "pid": n.pid,
        "up": n.up,
        "state": n.state,
        "why": n.why or None,
        "since": cmd_ops.iso(n.started_at if n.up else (n.stopped_at or n.heartbeat_at)),
        "heartbeat_at": cmd_ops.iso(n.heartbeat_at),
        "token": n.token,
        "lease_age_s": round((now - n.heartbeat_at).total_seconds(), 1),
        "lease_expires_at": cmd_ops.iso(n.lease_expires_at),
        "registry_loaded_at": info.get("registry_loaded_at"),
        "jobs": info.get("jobs"),
        "containment": info.get("containment"),
    }


def _print_overview(d: dict[str, Any], now: datetime, fleet: bool, wide: bool) -> None:
    from chronoctl.render import (
        Column,
        age,
        echo,
        echo_wrapped,
        escape_line,
        print_table,
        short_id,
        short_time,
        warn,
        zone_note,
    )

    def when(text: str | None) -> str | None:
        return short_time(datetime.fromisoformat(text), now) if text else None

    _print_health(d["health"])
    nodes = [
        dict(
            n,
            status={"up": "up", "down": "DOWN", "stopped": "stopped"}[n["state"]],
            since=when(n["since"]),
            lease=age(n["lease_age_s"]),
            runs=len(n["running"]),
        )
        for n in d["nodes"]
    ]
    node_cols = [
        Column("name"),
        Column("status"),
        Column("since", drop=2),
        Column("hostname", drop=4),
        Column("pid", "PID", "right", drop=3),
    ]
    if fleet or wide:
        node_cols.append(Column("token", "TOKEN", "right", drop=5))
    node_cols += [Column("lease", "HEARTBEAT", "right", drop=1), Column("runs", "RUNNING", "right")]
    print_table(
        nodes,
        node_cols,
        title=f"daemons ({zone_note(now)})",
        empty="(no chronod has ever used this database)",
        wide=wide,
    )
    for n in d["nodes"]:
        if n["state"] == "down":
            echo_wrapped(escape_line(f"{n['name']}: down ({_local_times(n['why'], now)})"), "  ")
        elif n["state"] == "up" and n.get("containment"):
            echo_wrapped(escape_line(f"{n['name']}: runs contained by {n['containment']}"), "  ")
    echo()
    if d["spec_disagreements"]:
        rows = [
            dict(r, nodes=", ".join(r["nodes"]), runs="runs" if r["runs"] else "idle") for r in d["spec_disagreements"]
        ]
        print_table(
            rows,
            ("job_id", "spec_hash", Column("nodes", wrap=True), "runs"),
            title="registries disagree (the fleet runs one version: most nodes, then greater hash)",
            wide=wide,
        )
        echo()
    paused = f", {len(d['paused'])} paused ({', '.join(d['paused'])})" if d["paused"] else ""
    echo_wrapped(escape_line(f"jobs: {d['jobs']} registered{paused}"))
    for p in d["pauses"]:
        echo_wrapped(escape_line(_pause_line(p, now)), "  ")
    echo_wrapped(_database_line(d["database"]))
    _print_backfills(d["backfills"])
    echo()
    failing = [
        {
            "job": r["job_id"] + (" (held)" if r["held"] else ""),
            "owner": r["owner"],
            "state": r["state"],
            "exit": r["exit_code"],
            "scheduled": when(r["scheduled_at"]),
            "run_id": short_id(r["run_id"], wide),
        }
        for r in d["failing"]
    ]
    print_table(
        failing,
        (
            "job",
            Column("owner", drop=2),
            "state",
            Column("exit", "EXIT", "right", drop=1),
            "scheduled",
            Column("run_id", "RUN ID"),
        ),
        title="failing (latest run in the last 24h)",
        wide=wide,
    )
    echo()
    silent = [_silent_row(s, now) for s in d["silent"]]
    print_table(
        silent,
        (SILENT_COLUMNS[0], Column("owner", drop=3), *SILENT_COLUMNS[1:]),
        title="silent past max_silence_s",
        wide=wide,
    )
    echo()
    errs = [
        {"node": e.get("node"), "file": e.get("file"), "line": e.get("line"), "message": e.get("message")}
        for e in d["registry_errors"]
    ]
    err_cols = [Column("node", drop=1)] if fleet or wide else []
    print_table(
        errs,
        (*err_cols, Column("file", wrap=True), Column("line", "LINE", "right"), Column("message", wrap=True)),
        title="registry errors",
        wide=wide,
    )
    echo()
    running = [
        {
            "job": r["job_id"],
            "node": r["node"],
            "started": when(r["started_at"]),
            "attempt": r["attempts"],
            "run_id": short_id(r["run_id"], wide),
        }
        for r in d["running"]
    ]
    run_cols = [
        Column("job"),
        *([Column("node", drop=2)] if fleet or wide else []),
        Column("started"),
        Column("attempt", "TRY", "right", drop=1),
        Column("run_id", "RUN ID"),
    ]
    print_table(running, run_cols, title="running now", wide=wide)
    if d["down"]:
        warn("no live chronod: nothing runs until one starts (exit 3)")


def _print_health(h: dict[str, Any]) -> None:
    """The verdict first, with every reason: what an on-call engineer reads at a glance."""
    from chronoctl.render import echo, echo_wrapped, escape_line

    word = {"healthy": "healthy", "degraded": "DEGRADED", "down": "DOWN"}[h["verdict"]]
    echo(f"health: {word} (exit {h['exit_code']})")
    for reason in h["reasons"]:
        echo_wrapped(escape_line(reason), "  ")
    echo()


_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def _local_times(text: str, now: datetime) -> str:
    """`text` with its UTC stamps (2026-12-04T11:59:40Z) as short local times with their age."""
    from chronoctl.render import relative, short_time

    def local(m: Any) -> str:
        at = datetime.fromisoformat(m.group(0).replace("Z", "+00:00"))
        return f"{short_time(at, now)} ({relative(at, now)})"

    return _STAMP.sub(local, text)


# --- runs and logs -------------------------------------------------------------------------------


def runs(
    job: str = typer.Argument(..., metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    since: Optional[str] = typer.Option(
        None,
        "--since",
        metavar="WHEN",
        help="Only runs scheduled since then: a duration back from now (24h, 7d) or a time "
        "(2026-12-01, yesterday 02:00; UTC without an offset).",
    ),
    state: Optional[list[str]] = typer.Option(
        None, "--state", metavar="STATE", help="Only runs in this state (repeatable).", autocompletion=_complete.states
    ),
    limit: int = typer.Option(
        50, "--limit", min=1, max=1_000_000, help="At most this many runs, newest first (up to 1000000)."
    ),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
    wide: bool = cmd_ops.wide_option(),
    utc: bool = cmd_ops.utc_option(),
) -> None:
    """The runs of one job, newest first. Run ids show as 8-character prefixes that every
    command accepts (--wide or --json for the whole ids)."""
    from chronod.core.model import ACTIVE_STATES, TERMINAL_STATES

    known = set(TERMINAL_STATES) | set(ACTIVE_STATES)
    bad = [s for s in state or () if s not in known]
    if bad:
        raise UsageError(f"--state {bad[0]!r} is not a run state", "states: " + ", ".join(sorted(known)))
    now = common.now_utc()
    start = common.parse_since(since, now) if since else None
    with cmd_ops.opened(db) as store:
        cmd_ops.get_job(store, job, removed_ok=True)
        found = store.runs(job, since=start, states=state or None, limit=limit)
        tries = {r.run_id: store.attempts(r.run_id) for r in found if r.attempts}
        fleet = cmd_ops.is_fleet(store)
    if as_json:
        return _print_json(
            [dict(cmd_ops.run_json(r), tries=[_attempt_json(a) for a in tries.get(r.run_id, [])]) for r in found]
        )
    from chronoctl.render import Column, escape_line, print_table, zone_note

    rows = _run_rows(found, now, wide)
    cols = run_columns(rows, fleet, wide)
    if fleet or wide:
        for row, r in zip(rows, found):
            row["tries"] = ", ".join(f"{a.attempt}:{a.node}#{a.token}" for a in tries.get(r.run_id, [])) or None
        cols.append(Column("tries", "ATTEMPT:NODE#TOKEN", drop=8))
    print_table(rows, cols, title=escape_line(f"runs of {job} ({zone_note(now)})"), empty="(no runs match)", wide=wide)


def _attempt_json(a: Any) -> dict[str, Any]:
    """One attempt of a run: where it ran and under which fencing token."""
    return {
        "attempt": a.attempt,
        "node": a.node,
        "token": a.token,
        "state": a.state,
        "started_at": cmd_ops.iso(a.started_at),
        "finished_at": cmd_ops.iso(a.finished_at),
        "exit_code": a.exit_code,
        "error": a.error,
    }


def logs(
    target: str = typer.Argument(
        ...,
        metavar="RUN|JOB",
        help="A run id or a unique prefix of one (as tables show them), or a job id: its running run, "
        "else its latest run that started.",
        autocompletion=_complete.jobs_and_runs,
    ),
    attempt: Optional[int] = typer.Option(
        None, "--attempt", metavar="N", min=1, help="Attempt N of a retried run (default: the latest)."
    ),
    follow: bool = typer.Option(
        False,
        "--follow",
        "-f",
        help="RUN: stream its output until it ends; exit 0 if it succeeded, 1 otherwise. JOB: follow the job "
        "across runs, a header before each, until interrupted (Ctrl-C).",
    ),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """The output of a run, control characters escaped, after a header on stderr (run,
    scheduled, attempt n of m, node, state, exit code or signal, duration, what killed it):
    what a running run has printed so far, or the stored tail of any attempt. Unknown run
    or job: exit 2."""
    import sys

    from chronoctl import output
    from chronoctl.render import escape_control, escape_line

    url = cmd_ops.db_url(db)
    with cmd_ops.opened(db) as store:
        job = store.get_job(target)
        run = _run_or_latest(store, target, waiting_ok=follow and job is not None)
        owner_row = job if job is not None or run is None else store.get_job(run.job_id)
        cmd_ops.check_may_read_output(store, url, owner_row)
        if follow:
            if attempt is not None or as_json:
                raise UsageError("--follow streams the run as it goes: it takes no --attempt or --json")
            from chronoctl.pauses import interrupted_at_pauses

            with interrupted_at_pauses():
                if job is not None:
                    raise typer.Exit(output.follow_job(store, job, run, url))
                assert run is not None  # only a followed job may have no run yet
                output.print_header(store, run, None)
                raise typer.Exit(output.Follower(store, run, url).follow())
        assert run is not None  # only a followed job may have no run yet
        if as_json:
            return _print_json(output.json_of(store, run, attempt, url))
        text, note = output.show(store, run, attempt, url)
        output.print_header(store, run, attempt)
    if note:
        sys.stderr.write(f"chronoctl: {escape_line(note)}\n")
        sys.stderr.flush()
    sys.stdout.write(escape_control(text))
    if text and not text.endswith("\n"):
        sys.stdout.write("\n")


def _run_or_latest(store: "Store", target: str, waiting_ok: bool = False) -> "Run | None":
    """The run `target` names (id or unique prefix), or, when it is a job id, that job's
    running run, else its latest run that started (a skipped run never did). With
    `waiting_ok` (following a job) a job that has not run yet gives None: wait for it."""
    row = store.get_job(target)
    if row is None:
        return cmd_ops.find_run(store, target)
    from chronoctl.output import current_run

    run = current_run(store, target)
    if run is None and not waiting_ok:
        raise UsageError(
            f"job {target!r} has no run that started yet", f"`chronoctl status {target}` shows when it runs next"
        )
    return run


# --- did-it-run ---------------------------------------------------------------------------------


def did_it_run(
    job: str = typer.Argument(..., metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    at: Optional[str] = typer.Option(
        None,
        "--at",
        metavar="TIME",
        help="The occurrence nominally at or just before this time: ISO-8601, 02:00, yesterday 02:00, 2026-12-03 or -2h (no offset: the job's zone).",
    ),
    since: Optional[str] = typer.Option(
        None,
        "--since",
        metavar="WHEN",
        help="Any success among the occurrences since then: a duration (24h) or a time "
        "(yesterday 02:00; no offset: the job's zone).",
    ),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """Exit 0 when the occurrence succeeded; 1 with its state and why when not; 2 for an unknown job.
    Without --at or --since: the latest occurrence due by now."""
    if at and since:
        raise UsageError("give --at or --since, not both")
    now = common.now_utc()
    with cmd_ops.opened(db) as store:
        row = cmd_ops.get_job(store, job)
        answer = _answer(store, row, now, at, since)
    _print_answer(answer, row, now, as_json)
    if not answer.yes:
        raise typer.Exit(EXIT_NO)


def _answer(store: "Store", row: "JobRow", now: datetime, at: str | None, since: str | None) -> Any:
    from chronod.store import audit

    when = common.parse_instant(at, row.spec.timezone, "--at") if at else None
    start = common.parse_since(since, now, row.spec.timezone) if since else None
    return audit.did_it_run(store, row, now, at=when, since=start, schedule=_schedule(row))


def _print_answer(a: Any, row: "JobRow", now: datetime, as_json: bool) -> None:
    occ = a.occurrence
    if as_json:
        return _print_json(
            {
                "job_id": row.job_id,
                "answer": "yes" if a.yes else "no",
                "yes": a.yes,
                "state": a.state,
                "reason": a.reason,
                "scheduled_at": cmd_ops.iso(occ.scheduled_at if occ else (a.run.scheduled_at if a.run else None)),
                "fire_at": cmd_ops.iso(occ.fire_at if occ else (a.run.fire_at if a.run else None)),
                "run_id": occ.run_id if occ else (a.run.run_id if a.run else None),
                "node": occ.node if occ else None,
                "paused": row.paused,
                "paused_reason": row.paused_reason,
                "held": cmd_ops.hold_json(a.hold),
                "run": cmd_ops.run_json(a.run) if a.run else None,
            }
        )
    from chronoctl.render import echo_line, escape_line, human_time

    what = f" (occurrence {human_time(occ.scheduled_at, now)}, run id {occ.run_id})" if occ else ""
    echo_line(escape_line(f"{'yes' if a.yes else 'no'}: {row.job_id} {a.reason}") + what)
    if row.paused and not a.yes and a.hold is None:
        echo_line(escape_line(f"note: {row.job_id} is paused: {row.paused_reason or 'no reason given'}"))


# --- missed -----------------------------------------------------------------------------------


def missed(
    since: str = typer.Option(
        "24h",
        "--since",
        metavar="WHEN",
        help="The window to look back over: a duration (default 24h) or a time (2026-12-01, yesterday 02:00; UTC "
        "without an offset).",
    ),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
    each: bool = typer.Option(False, "--each", help="One row per occurrence instead of one per job."),
    wide: bool = cmd_ops.wide_option(),
    utc: bool = cmd_ops.utc_option(),
) -> None:
    """Every occurrence in the window that did not succeed, every one that fell due with
    no record at all, and every job silent now (no success for longer than its
    max_silence_s), grouped by owner and by job (how many, first and last, the latest
    reason; --each for one row per occurrence). Skips a job's own policy made (overlap,
    pauses, windows) are listed apart. Exit 0 when nothing was missed and nothing is
    silent, 1 otherwise."""
    from chronod.core import history
    from chronod.store import audit

    now = common.now_utc()
    start = common.parse_since(since, now)
    with cmd_ops.opened(db) as store:
        rows = [j for j in store.jobs() if j.removed_at is None]
        found, marks = audit.window(store, start - timedelta(seconds=1), now + timedelta(seconds=1))
        silent = _silent(store, rows, now, marks if marks is not None else found)
        pruned = store.pruned()
        misses = audit.missed(store, rows, start, now, found, marks, pruned)
    _print_misses(misses, silent, start, now, as_json, wide, history.pruned_in(pruned, start), each)
    if misses or silent:
        raise typer.Exit(EXIT_NO)


def _miss_json(m: Any) -> dict[str, Any]:
    return {
        "job_id": m.job_id,
        "owner": m.owner or None,
        "job_key": m.job_key,
        "node": m.node,
        "scheduled_at": cmd_ops.iso(m.scheduled_at),
        "fire_at": cmd_ops.iso(m.fire_at),
        "run_id": m.run_id,
        "state": m.state,
        "by_design": m.state in DESIGNED,
        "reason": m.reason,
        "held": cmd_ops.hold_json(m.hold),
        "run": cmd_ops.run_json(m.run) if m.run else None,
    }


def _by_owner(misses: list[Any], silent: list[Any]) -> dict[str, tuple[list[Any], list[Any]]]:
    """owner -> (its misses, its silent jobs), owners in order."""
    from chronod.core.history import group_by_owner

    groups: dict[str, tuple[list[Any], list[Any]]] = {o: (ms, []) for o, ms in group_by_owner(misses).items()}
    for q in silent:
        groups.setdefault(q.owner, ([], []))[1].append(q)
    return dict(sorted(groups.items()))


def _pruned_json(m: Any) -> dict[str, Any]:
    from chronod.core.retention import pruned_reason

    return {
        "job_id": m.job_id,
        "through": cmd_ops.iso(m.through),
        "kept_s": m.kept_s,
        "reason": pruned_reason(m.kept_s),
    }


def _print_misses(
    misses: list[Any],
    silent: list[Any],
    start: datetime,
    now: datetime,
    as_json: bool,
    wide: bool = False,
    pruned: Sequence[Any] = (),
    each: bool = False,
) -> None:
    groups = _by_owner(misses, silent)
    if as_json:
        return _print_json(
            {
                "since": cmd_ops.iso(start),
                "until": cmd_ops.iso(now),
                "count": len(misses),
                "by_design_count": sum(1 for m in misses if m.state in DESIGNED),
                "silent_count": len(silent),
                "owners": [
                    {"owner": o or None, "missed": [_miss_json(m) for m in ms], "silent": [_silent_json(q) for q in qs]}
                    for o, (ms, qs) in groups.items()
                ],
                "pruned": [_pruned_json(m) for m in pruned],
            }
        )
    from chronoctl.render import Column, echo, escape_line, human_time, print_table, short_id, short_time, zone_note

    if not groups:
        echo(f"nothing missed since {human_time(start, now)} and no job silent")
        _print_pruned(pruned, now)
        return
    echo(zone_note(now))
    for owner, (ms, qs) in groups.items():
        who = owner or "(jobs no longer registered)"
        real = [m for m in ms if m.state not in DESIGNED]
        if not each:
            _print_grouped(real, f"{who}: {len(real)} missed", now, wide)
            _print_grouped(
                [m for m in ms if m.state in DESIGNED],
                f"{who}: skipped by design (overlap, pauses, windows)",
                now,
                wide,
            )
        if ms and each:
            rows = [
                {
                    "job": m.job_key,
                    "scheduled": short_time(m.scheduled_at, now),
                    "state": m.state,
                    "run_id": short_id(m.run_id, wide),
                    "why": m.reason,
                }
                for m in ms
            ]
            print_table(
                rows,
                ("job", "scheduled", "state", Column("run_id", "RUN ID"), Column("why", wrap=True)),
                title=escape_line(f"{who}: {len(ms)} missed"),
                wide=wide,
            )
        if qs:
            print_table(
                [_silent_row(_silent_json(q), now) for q in qs],
                SILENT_COLUMNS,
                title=escape_line(f"{who}: {len(qs)} silent (no success for longer than max_silence_s)"),
                wide=wide,
            )
        echo()
    _print_pruned(pruned, now)


DESIGNED = ("skipped_overlap", "skipped_paused", "skipped_blackout", "deferred", "paused", "waiting")
"""States that are a job's own policy at work, not a failure: `missed` lists them apart."""


def _print_grouped(ms: list[Any], title: str, now: datetime, wide: bool) -> None:
    """One row per job: how many occurrences, the first and the last, the latest state and why."""
    from chronoctl.render import Column, escape_line, print_table, short_id, short_time

    if not ms:
        return
    by_job: dict[str, list[Any]] = {}
    for m in ms:
        by_job.setdefault(m.job_key, []).append(m)
    rows = []
    for key, group in by_job.items():
        group.sort(key=lambda m: m.scheduled_at)
        last = group[-1]
        rows.append(
            {
                "job": key,
                "n": len(group),
                "first": short_time(group[0].scheduled_at, now),
                "last": short_time(last.scheduled_at, now),
                "state": last.state,
                "run_id": short_id(last.run_id, wide),
                "why": last.reason,
            }
        )
    print_table(
        rows,
        (
            "job",
            Column("n", "N", "right"),
            Column("first", drop=3),  # goes first: LATEST's id is what `logs` takes
            Column("last", "LAST"),
            Column("state", drop=1),
            Column("run_id", "LATEST", drop=2),
            Column("why", "WHY (LATEST)", wrap=True),
        ),
        title=escape_line(title),
        wide=wide,
    )


def _print_pruned(pruned: Sequence[Any], now: datetime) -> None:
    """One line per job whose pruned history reaches into the window: not judged, not missed."""
    from chronoctl.render import echo, escape_line, human_time
    from chronod.core.retention import pruned_reason

    for m in pruned:
        echo(
            escape_line(
                f"{pruned_reason(m.kept_s)}: occurrences of {m.job_id} up to "
                f"{human_time(m.through, now)} are not judged"
            )
        )
