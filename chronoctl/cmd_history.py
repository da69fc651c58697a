"""`status`, `runs`, `logs`, `did-it-run` and `missed`: the run history, read from the store.

Every query is bounded by job and time window on the store's indexes (job_id,
scheduled_at) so that the answer comes as fast with a million runs as with ten; the
judging itself is `chronod.core.history` (pure).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Optional

import typer

from chronoctl import cmd_ops, common
from chronoctl.cmd_ops import db_option, json_option
from chronoctl.errors import EXIT_NO, UsageError

if TYPE_CHECKING:
    from chronod.store.api import JobRow, Run, Store

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
    return common.compile_or_fail(row.spec.schedule, row.spec.timezone)


def _node_names(store: "Store") -> list[str]:
    return [n.name for n in store.nodes()]


def _run_rows(runs: list["Run"], now: datetime) -> list[dict[str, Any]]:
    from chronoctl.render import age, human_time

    return [{
        "state": r.state,
        "scheduled": human_time(r.scheduled_at, now),
        "started": human_time(r.started_at) if r.started_at else None,
        "duration": age(d) if (d := cmd_ops.duration_s(r)) is not None else None,
        "exit": r.exit_code if r.signal is None else f"sig {r.signal}",
        "attempts": r.attempts,
        "node": r.node,
        "run_id": r.run_id,
        "trigger": None if r.trigger == "schedule" else r.trigger,
    } for r in runs]


RUN_COLUMNS = ("state", "scheduled", "started", "duration", ("exit", "EXIT", "right"),
               ("attempts", "ATT", "right"), "node", ("run_id", "RUN ID"), "trigger")


def _placements(row: "JobRow", nodes: list[str]) -> list[Any]:
    """Where the job's occurrences live: one placement, or one per known node for a job
    that runs on each node (none when no node is known yet)."""
    from chronod.core import occurrence

    return occurrence.placements(row.spec, nodes)


def _occurrence_json(o: Any) -> dict[str, Any]:
    return {"scheduled_at": cmd_ops.iso(o.scheduled_at), "fire_at": cmd_ops.iso(o.fire_at), "node": o.node,
            "run_id": o.run_id}


# --- status ---------------------------------------------------------------------------------


def status(
    job: Optional[str] = typer.Argument(None, metavar="[JOB]", help="A job id; without it, the whole installation."),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """The daemons, failing and silent jobs and what runs now; or one job in detail."""
    now = common.now_utc()
    with cmd_ops.opened(db) as store:
        if job is None:
            data = _overview(store, now)
            _print_json(data) if as_json else _print_overview(data, now)
        else:
            data = _job_status(store, cmd_ops.get_job(store, job), now)
            runs_ = data.pop("_runs")
            _print_json(data) if as_json else _print_job_status(data, runs_, now)


def _print_json(data: Any) -> None:
    from chronoctl.render import print_json

    print_json(data)


def _job_status(store: "Store", row: "JobRow", now: datetime) -> dict[str, Any]:
    from chronod.core import history

    spec, sched = row.spec, _schedule(row)
    recent = store.runs(spec.id, until=now + timedelta(days=1), limit=STREAK_SCAN)
    recent = [r for r in recent if r.state != "pending" or r.fire_at <= now]
    win = next((r for r in recent if r.state == "succeeded"), None)
    win = win or next(iter(store.runs(spec.id, states=["succeeded"], limit=1)), None)
    streak = history.success_streak(recent)
    last_at = (win.finished_at or win.scheduled_at) if win else None
    quiet = history.silence(spec, last_at, now, known_since=row.updated_at)
    silent = history.silent_jobs([row], {spec.id: last_at} if last_at else {}, now)  # as `status` and `missed` list it
    places = _placements(row, _node_names(store))
    spans = store.known_spans([spec.id]).get(spec.id, [])
    nxt = places[0].upcoming(sched, now, 3) if places else []
    return {
        "job_id": spec.id, "owner": spec.owner, "schedule": spec.schedule, "timezone": spec.timezone,
        "schedule_words": sched.describe(), "run_on": spec.run_on.mode,
        "jitter_offset_s": places[0].offset_s if places else None, "tolerance_s": spec.tolerance_s,
        "enabled": spec.enabled, "paused": row.paused, "paused_reason": row.paused_reason,
        "registered_since": cmd_ops.iso(spans[-1][0]) if spans and spans[-1][1] is None else None,
        "paused_at": cmd_ops.iso(row.paused_at), "tags": list(spec.tags),
        "next": [_occurrence_json(o) for o in nxt],
        "nodes": [{"node": p.node, "jitter_offset_s": p.offset_s,
                   "next": [_occurrence_json(o) for o in p.upcoming(sched, now, 1)]} for p in places if p.node],
        "success_streak": streak, "success_streak_capped": streak >= STREAK_SCAN,
        "last_success_at": cmd_ops.iso(last_at),
        "silence_s": round(quiet.age_s) if quiet.age_s is not None else None,
        "max_silence_s": quiet.max_silence_s, "silent": bool(silent),
        "runs": [cmd_ops.run_json(r) for r in recent[:LAST_RUNS]],
        "_runs": recent[:LAST_RUNS],
    }


def _print_job_status(d: dict[str, Any], recent: list["Run"], now: datetime) -> None:
    from chronoctl.render import age, echo, escape_line, human_time, print_table

    echo(f"job       {escape_line(d['job_id'])}   owner {escape_line(d['owner'])}")
    jitter = (f"jitter +{d['jitter_offset_s']}s of tolerance {d['tolerance_s']}s" if d["run_on"] != "each"
              else f"tolerance {d['tolerance_s']}s, run_on: each: each node has its own jitter")
    echo(f"schedule  {escape_line(d['schedule'])}: {escape_line(d['schedule_words'])} "
         f"(zone {escape_line(d['timezone'])}, {jitter})")
    if d["registered_since"]:
        echo(f"known     since {_human(d['registered_since'], now)} (occurrences before it are not expected)")
    if d["paused"]:
        echo(f"paused    since {_human(d['paused_at'], now)}: {escape_line(d['paused_reason'] or 'no reason given')}")
    elif not d["enabled"]:
        echo("disabled  (enabled: false in its file)")
    if d["run_on"] == "each":
        _print_each_next(d, now)
    for i, n in enumerate(d["next"] if d["run_on"] != "each" else []):
        echo(f"{'next' if i == 0 else '':<10}{human_time(datetime.fromisoformat(n['fire_at']), now)}")
    streak = f"{d['success_streak']}{'+' if d['success_streak_capped'] else ''}"
    last = _human(d["last_success_at"], now) if d["last_success_at"] else "never"
    limit = age(d["max_silence_s"]) if d["max_silence_s"] else "none"
    flag = "  SILENT: past max_silence_s" if d["silent"] else ""
    echo(f"success   streak {streak}; last success {last}; max silence {limit}{flag}")
    echo()
    print_table(_run_rows(recent, now), RUN_COLUMNS, title="last runs", empty="(no runs recorded)")


def _print_each_next(d: dict[str, Any], now: datetime) -> None:
    """The next fire of a `run_on: each` job on every node the store knows."""
    from chronoctl.render import echo, escape_line, human_time

    if not d["nodes"]:
        echo("next      no node has run chronod on this database yet: each node fires at its own offset")
    for i, n in enumerate(d["nodes"]):
        when = human_time(datetime.fromisoformat(n["next"][0]["fire_at"]), now) if n["next"] else "never"
        echo(escape_line(f"{'next' if i == 0 else '':<10}{when} on {n['node']} (jitter +{n['jitter_offset_s']}s)"))


def _human(text: str | None, now: datetime) -> str:
    from chronoctl.render import human_time

    return human_time(datetime.fromisoformat(text), now) if text else "-"


def _overview(store: "Store", now: datetime) -> dict[str, Any]:
    rows = store.jobs()
    nodes = store.nodes()
    day = store.runs(since=now - timedelta(days=1), until=now)
    latest: dict[str, Any] = {}
    for r in day:  # newest first: the first terminal run per job is its latest
        if r.state not in ("pending", "running", "retry_wait"):
            latest.setdefault(r.job_id, r)
    failing = [r for r in latest.values() if r.state in FAILING]
    silent = [_silent_json(q) for q in _silent(store, rows, now, day)]
    from chronod.fleet import placement

    running = store.running()
    per_node = {n.name: sorted(r.job_id for r in running if r.node == n.name) for n in nodes}
    return {
        "nodes": [dict(_node_json(n, now), running=per_node[n.name]) for n in nodes],
        "spec_disagreements": placement.report(nodes, now),
        "jobs": len(rows),
        "paused": sorted(j.job_id for j in rows if j.paused),
        "failing": [dict(cmd_ops.run_json(r), owner=_owner(rows, r.job_id)) for r in failing],
        "silent": silent,
        "registry_errors": store.registry_errors(),
        "running": [cmd_ops.run_json(r) for r in running],
    }


def _silent(store: "Store", rows: list["JobRow"], now: datetime, recent: list[Any]) -> list[Any]:
    """The jobs silent now (no success for longer than `max_silence_s`), for `status` and
    `missed` alike; the judging is `history.silent_jobs`. `recent` are the runs or marks
    the command read anyway: a job with a success in them recent enough is not silent,
    and only the others (silent, or close to it, or weekly) are looked up one by one for
    their latest success, however old. A job that never succeeded has its silence counted
    from its last definition change."""
    from chronod.core import history

    suspects = history.silence_suspects(rows, recent, now)
    last: dict[str, datetime] = {}
    for j in suspects:
        last.update(history.latest_successes(store.runs(j.job_id, until=now, states=["succeeded"], limit=1)))
    return history.silent_jobs(suspects, last, now)


def _silent_json(q: Any) -> dict[str, Any]:
    """A silent job in `--json` (the same keys in `status` and `missed`)."""
    return {"job_id": q.job_id, "owner": q.owner, "last_success_at": cmd_ops.iso(q.last_success),
            "silence_s": round(q.silence_s), "max_silence_s": q.max_silence_s,
            "silent_since": cmd_ops.iso(q.silent_since)}


def _silent_row(d: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A silent job as a table row: its last success (or "never"), how long without one."""
    from chronoctl.render import age

    last = _human(d["last_success_at"], now) if d["last_success_at"] else "never"
    return {"job": d["job_id"], "owner": d["owner"], "last_success": last,
            "no_success_for": age(d["silence_s"]), "max_silence": age(d["max_silence_s"])}


SILENT_COLUMNS = ("job", "last_success", ("no_success_for", "NO SUCCESS FOR", "right"),
                  ("max_silence", "MAX SILENCE", "right"))


def _owner(rows: list["JobRow"], job_id: str) -> str | None:
    return next((j.spec.owner for j in rows if j.job_id == job_id), None)


def _node_json(n: Any, now: datetime) -> dict[str, Any]:
    up = cmd_ops.node_alive(n, now)
    down_since = n.stopped_at or n.lease_expires_at
    return {
        "name": n.name, "hostname": n.hostname, "pid": n.pid, "up": up,
        "since": cmd_ops.iso(n.started_at if up else down_since),
        "heartbeat_at": cmd_ops.iso(n.heartbeat_at), "token": n.token,
        "lease_age_s": round((now - n.heartbeat_at).total_seconds(), 1),
        "lease_expires_at": cmd_ops.iso(n.lease_expires_at),
        "registry_loaded_at": (n.info or {}).get("registry_loaded_at"), "jobs": (n.info or {}).get("jobs"),
    }


def _print_overview(d: dict[str, Any], now: datetime) -> None:
    from chronoctl.render import echo, escape_line, print_table

    nodes = [dict(n, status="up" if n["up"] else "DOWN", since=_human(n["since"], now), lease=f"{n['lease_age_s']}s",
                  runs=len(n["running"])) for n in d["nodes"]]
    print_table(nodes, ("name", "status", "since", "hostname", ("pid", "PID", "right"), ("token", "TOKEN", "right"),
                        ("lease", "HEARTBEAT AGO", "right"), ("runs", "RUNNING", "right")), title="daemons",
                empty="(no chronod has ever used this database)")
    echo()
    if d["spec_disagreements"]:
        rows = [dict(r, nodes=", ".join(r["nodes"]), runs="runs" if r["runs"] else "idle")
                for r in d["spec_disagreements"]]
        print_table(rows, ("job_id", "spec_hash", "nodes", "runs"),
                    title="registries disagree (the fleet runs one version: most nodes, then greater hash)")
        echo()
    paused = f", {len(d['paused'])} paused ({', '.join(d['paused'])})" if d["paused"] else ""
    echo(escape_line(f"jobs: {d['jobs']} registered{paused}"))
    echo()
    failing = [{"job": r["job_id"], "owner": r["owner"], "state": r["state"], "exit": r["exit_code"],
                "scheduled": _human(r["scheduled_at"], now), "run_id": r["run_id"]} for r in d["failing"]]
    print_table(failing, ("job", "owner", "state", ("exit", "EXIT", "right"), "scheduled", ("run_id", "RUN ID")),
                title="failing (latest run in the last 24h)")
    echo()
    silent = [_silent_row(s, now) for s in d["silent"]]
    print_table(silent, (SILENT_COLUMNS[0], "owner", *SILENT_COLUMNS[1:]), title="silent past max_silence_s")
    echo()
    errs = [{"node": e.get("node"), "file": e.get("file"), "line": e.get("line"), "message": e.get("message")}
            for e in d["registry_errors"]]
    print_table(errs, ("node", "file", ("line", "LINE", "right"), "message"), title="registry errors")
    echo()
    running = [{"job": r["job_id"], "node": r["node"], "started": _human(r["started_at"], now),
                "attempt": r["attempts"], "run_id": r["run_id"]} for r in d["running"]]
    print_table(running, ("job", "node", "started", ("attempt", "ATT", "right"), ("run_id", "RUN ID")),
                title="running now")


# --- runs and logs -------------------------------------------------------------------------------


def runs(
    job: str = typer.Argument(..., metavar="JOB", help="A job id."),
    since: Optional[str] = typer.Option(None, "--since", metavar="DUR", help="Only runs scheduled in the last DUR (90s, 15m, 24h, 7d)."),
    state: Optional[list[str]] = typer.Option(None, "--state", metavar="STATE", help="Only runs in this state (repeatable)."),
    limit: int = typer.Option(50, "--limit", min=1, help="At most this many runs, newest first."),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """The runs of one job, newest first."""
    from chronod.core.model import ACTIVE_STATES, TERMINAL_STATES

    known = set(TERMINAL_STATES) | set(ACTIVE_STATES)
    bad = [s for s in state or () if s not in known]
    if bad:
        raise UsageError(f"--state {bad[0]!r} is not a run state", "states: " + ", ".join(sorted(known)))
    now = common.now_utc()
    start = cmd_ops.since_start(now, common.parse_seconds(since, "--since")) if since else None
    with cmd_ops.opened(db) as store:
        cmd_ops.get_job(store, job, removed_ok=True)
        found = store.runs(job, since=start, states=state or None, limit=limit)
        tries = {r.run_id: store.attempts(r.run_id) for r in found if r.attempts}
    if as_json:
        return _print_json([dict(cmd_ops.run_json(r), tries=[_attempt_json(a) for a in tries.get(r.run_id, [])])
                            for r in found])
    from chronoctl.render import print_table

    rows = _run_rows(found, now)
    for row in rows:
        row["tries"] = ", ".join(f"{a.attempt}:{a.node}#{a.token}" for a in tries.get(row["run_id"], [])) or None
    print_table(rows, RUN_COLUMNS + (("tries", "ATTEMPT:NODE#TOKEN"),), empty="(no runs match)")


def _attempt_json(a: Any) -> dict[str, Any]:
    """One attempt of a run: where it ran and under which fencing token."""
    return {"attempt": a.attempt, "node": a.node, "token": a.token, "state": a.state,
            "started_at": cmd_ops.iso(a.started_at), "finished_at": cmd_ops.iso(a.finished_at),
            "exit_code": a.exit_code, "error": a.error}


def logs(
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="A run id (from `chronoctl runs` or `status`)."),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """The stored output tail of a run, control characters escaped. Unknown run: exit 2."""
    with cmd_ops.opened(db) as store:
        run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"no run {run_id!r} in the database", "`chronoctl runs JOB` lists run ids")
    if as_json:
        return _print_json(dict(cmd_ops.run_json(run), output_tail=run.output_tail))
    import sys

    from chronoctl.render import escape_control

    tail = run.output_tail or ""
    kept = len(tail.encode("utf-8", "surrogateescape"))
    if run.output_bytes > kept:
        sys.stderr.write(f"chronoctl: showing the last {kept} of {run.output_bytes} bytes of output\n")
    sys.stdout.write(escape_control(tail))
    if tail and not tail.endswith("\n"):
        sys.stdout.write("\n")


# --- did-it-run ---------------------------------------------------------------------------------


def did_it_run(
    job: str = typer.Argument(..., metavar="JOB", help="A job id."),
    at: Optional[str] = typer.Option(None, "--at", metavar="ISO", help="The occurrence nominally at or just before this time (no offset: the job's zone)."),
    since: Optional[str] = typer.Option(None, "--since", metavar="DUR", help="Any success among the occurrences of the last DUR."),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """Exit 0 when the occurrence succeeded; 1 with its state and why when not; 2 for an unknown job.
    Without --at or --since: the latest occurrence due by now."""
    if at and since:
        raise UsageError("give --at or --since, not both")
    now = common.now_utc()
    seconds = common.parse_seconds(since, "--since") if since else None
    with cmd_ops.opened(db) as store:
        row = cmd_ops.get_job(store, job)
        answer = _answer(store, row, now, at, seconds)
    _print_answer(answer, row, now, as_json)
    if not answer.yes:
        raise typer.Exit(EXIT_NO)


def _answer(store: "Store", row: "JobRow", now: datetime, at: str | None, seconds: int | None) -> Any:
    from chronod.core import history

    sched = _schedule(row)
    nodes = _node_names(store) if row.spec.run_on.each else []
    spans = store.known_spans([row.job_id]).get(row.job_id, [])
    if seconds is not None:
        start = cmd_ops.since_start(now, seconds)
        found = store.runs(row.job_id, since=start - timedelta(seconds=1), until=now)
        return history.did_it_run(row.spec, found, now=now, since=start, schedule=sched, nodes=nodes, spans=spans)
    when = common.parse_instant(at, row.spec.timezone, "--at") if at else None
    nominal = sched.prev_at_or_before(when or now) if sched.kind != "reboot" else None
    if sched.kind == "reboot":
        found = store.runs(row.job_id, limit=1)
    elif nominal is None:
        found = []
    else:
        before = sched.prev_at_or_before(nominal - timedelta(seconds=1)) or nominal
        found = store.runs(row.job_id, since=before - timedelta(seconds=1), until=nominal + timedelta(seconds=1))
    return history.did_it_run(row.spec, found, now=now, at=when, schedule=sched, nodes=nodes, spans=spans)


def _print_answer(a: Any, row: "JobRow", now: datetime, as_json: bool) -> None:
    occ = a.occurrence
    if as_json:
        return _print_json({
            "job_id": row.job_id, "answer": "yes" if a.yes else "no", "yes": a.yes, "state": a.state,
            "reason": a.reason,
            "scheduled_at": cmd_ops.iso(occ.scheduled_at if occ else (a.run.scheduled_at if a.run else None)),
            "fire_at": cmd_ops.iso(occ.fire_at if occ else (a.run.fire_at if a.run else None)),
            "run_id": occ.run_id if occ else (a.run.run_id if a.run else None),
            "node": occ.node if occ else None,
            "paused": row.paused, "paused_reason": row.paused_reason,
            "run": cmd_ops.run_json(a.run) if a.run else None,
        })
    from chronoctl.render import echo, escape_line, human_time

    what = f" (occurrence {human_time(occ.scheduled_at, now)}, run id {occ.run_id})" if occ else ""
    echo(escape_line(f"{'yes' if a.yes else 'no'}: {row.job_id} {a.reason}") + what)
    if row.paused and not a.yes:
        echo(escape_line(f"note: {row.job_id} is paused: {row.paused_reason or 'no reason given'}"))


# --- missed -----------------------------------------------------------------------------------


def missed(
    since: str = typer.Option("24h", "--since", metavar="DUR", help="The window to look back over (default 24h)."),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """Every occurrence in the window that did not succeed, every one that fell due with
    no record at all, and every job silent now (no success for longer than its
    max_silence_s), grouped by owner. Exit 0 when nothing was missed and nothing is
    silent, 1 otherwise."""
    from chronod.core import history

    now = common.now_utc()
    start = cmd_ops.since_start(now, common.parse_seconds(since, "--since"))
    with cmd_ops.opened(db) as store:
        rows = [j for j in store.jobs() if j.removed_at is None]
        found, marks = _window(store, start - timedelta(seconds=1), now + timedelta(seconds=1))
        nodes = _node_names(store)
        silent = _silent(store, rows, now, marks if marks is not None else found)
        known = store.known_spans([j.job_id for j in rows])
    misses = history.missed([j.spec for j in rows], found, since=start, now=now, nodes=nodes,
                            known={j.job_id: known.get(j.job_id, []) for j in rows}, marks=marks)
    _print_misses(misses, silent, start, now, as_json)
    if misses or silent:
        raise typer.Exit(EXIT_NO)


def _window(store: "Store", since: datetime, until: datetime) -> tuple[list["Run"], list[Any] | None]:
    """The runs `missed` judges: with the store's slim `run_marks`, full rows only for runs
    that did not succeed (few) and marks for the rest; otherwise every run in full."""
    from chronod.core.history import Mark
    from chronod.core.model import ACTIVE_STATES, TERMINAL_STATES

    if not hasattr(store, "run_marks"):
        return store.runs(since=since, until=until), None
    marks = list(map(Mark._make, store.run_marks(since=since, until=until)))
    unhappy = [s for s in (*TERMINAL_STATES, *ACTIVE_STATES) if s != "succeeded"]
    return store.runs(since=since, until=until, states=unhappy), marks


def _miss_json(m: Any) -> dict[str, Any]:
    return {
        "job_id": m.job_id, "owner": m.owner or None, "job_key": m.job_key, "node": m.node,
        "scheduled_at": cmd_ops.iso(m.scheduled_at), "fire_at": cmd_ops.iso(m.fire_at), "run_id": m.run_id,
        "state": m.state, "reason": m.reason, "run": cmd_ops.run_json(m.run) if m.run else None,
    }


def _by_owner(misses: list[Any], silent: list[Any]) -> dict[str, tuple[list[Any], list[Any]]]:
    """owner -> (its misses, its silent jobs), owners in order."""
    from chronod.core.history import group_by_owner

    groups = {o: (ms, []) for o, ms in group_by_owner(misses).items()}
    for q in silent:
        groups.setdefault(q.owner, ([], []))[1].append(q)
    return dict(sorted(groups.items()))


def _print_misses(misses: list[Any], silent: list[Any], start: datetime, now: datetime, as_json: bool) -> None:
    groups = _by_owner(misses, silent)
    if as_json:
        return _print_json({
            "since": cmd_ops.iso(start), "until": cmd_ops.iso(now), "count": len(misses),
            "silent_count": len(silent),
            "owners": [{"owner": o or None, "missed": [_miss_json(m) for m in ms],
                        "silent": [_silent_json(q) for q in qs]} for o, (ms, qs) in groups.items()],
        })
    from chronoctl.render import echo, escape_line, human_time, print_table

    if not groups:
        echo(f"nothing missed since {human_time(start, now)} and no job silent")
        return
    for owner, (ms, qs) in groups.items():
        who = owner or "(jobs no longer registered)"
        if ms:
            rows = [{"job": m.job_key, "scheduled": human_time(m.scheduled_at, now), "state": m.state,
                     "run_id": m.run_id, "why": m.reason} for m in ms]
            print_table(rows, ("job", "scheduled", "state", ("run_id", "RUN ID"), "why"),
                        title=escape_line(f"{who}: {len(ms)} missed"))
        if qs:
            print_table([_silent_row(_silent_json(q), now) for q in qs], SILENT_COLUMNS,
                        title=escape_line(f"{who}: {len(qs)} silent (no success for longer than max_silence_s)"))
        echo()
