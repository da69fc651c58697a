"""`backfill`: run a job's past occurrences again, recorded against each occurrence.

chronoctl chooses the occurrences (chronod.core.backfill.choose, from the same history
`missed` reads), stores the backfill in the database and wakes the daemon, which starts
them oldest first (chronod.daemon.backfills). The backfill is stored, not held by this
command: interrupting the wait, or restarting chronod, does not stop it. `--dry-run`
stores nothing and needs no daemon.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Optional

import typer

from chronoctl import cmd_ops, common
from chronoctl import complete as _complete
from chronoctl.cmd_ops import db_option, json_option
from chronoctl.errors import EXIT_NO, InvalidInput, Unreachable, UsageError
from chronoctl.pauses import interrupted_at_pauses, pause

if TYPE_CHECKING:
    from chronod.core.backfill import Choice
    from chronod.store.api import JobRow, Leases, Store

POLL_S = 0.2
BAR_WIDTH = 30


def register(app: typer.Typer) -> None:
    """Add `backfill` to `app`."""
    app.command("backfill")(backfill)


def backfill(
    job: Optional[str] = typer.Argument(
        None, metavar="JOB", help="A job id (not with --cancel).", autocompletion=_complete.job_ids
    ),
    start: Optional[str] = typer.Option(
        None, "--from", metavar="TIME", help="The first occurrence to consider (included; required)."
    ),
    end: Optional[str] = typer.Option(
        None, "--to", metavar="TIME", help="The last occurrence to consider (included; required)."
    ),
    only: str = typer.Option(
        "missed", "--only", metavar="missed|failed|all", help="Which occurrences of the range run (default missed)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would run; store nothing."),
    max_concurrency: int = typer.Option(
        1, "--max-concurrency", metavar="N", min=1, max=64, help="At most N at once (overlap: allow jobs only)."
    ),
    allow_unsafe: bool = typer.Option(False, "--allow-unsafe", help="Backfill an unsafe job (needs --reason)."),
    reason: Optional[str] = typer.Option(
        None, "--reason", metavar="TEXT", help="Why (required with --allow-unsafe; recorded with --cancel)."
    ),
    no_wait: bool = typer.Option(False, "--no-wait", help="Store the backfill and return; chronod runs it."),
    cancel: Optional[str] = typer.Option(
        None,
        "--cancel",
        metavar="ID|JOB",
        help="Cancel a running backfill (its id, or a job id: each of that job's): chronod starts none of its "
        "occurrences any more; those running finish.",
    ),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """Run the job's occurrences between --from and --to again, oldest first, each under
    its own run id and CHRONO_SCHEDULED_AT, with the job's overlap policy and resource.
    Waits with a progress bar until every one has ended (--no-wait: return at once).
    Exit 0 when all succeeded (or nothing needed to run), 1 when one did not or the
    backfill was cancelled, 3 when no chronod is running. With --cancel ID|JOB: exit 0
    when a running backfill was cancelled, 1 when none was running."""
    from chronod.core import backfill as core

    if cancel is not None:
        given = [name for name, v in (("JOB", job), ("--from", start), ("--to", end)) if v]
        if given or dry_run or allow_unsafe:
            raise UsageError(
                f"--cancel names the backfill itself: it takes no {(given or ['--dry-run/--allow-unsafe'])[0]}",
                "chronoctl backfill --cancel ID|JOB [--reason TEXT]",
            )
        return _cancel(cancel, reason, db, as_json)
    if job is None or start is None or end is None:
        raise UsageError(
            "a backfill needs JOB, --from and --to", "chronoctl backfill JOB --from T1 --to T2 (or --cancel ID|JOB)"
        )
    if only not in core.ONLY:
        raise UsageError(f"--only {only!r} is not one of {', '.join(core.ONLY)}", "e.g. --only failed")
    now = common.now_utc()
    with cmd_ops.opened(db) as store:
        row = cmd_ops.get_job(store, job)
        t1 = common.parse_instant(start, row.spec.timezone, "--from", now)
        t2 = common.parse_instant(end, row.spec.timezone, "--to", now)
        why = core.refusal(row.spec, allow_unsafe=allow_unsafe, reason=reason)
        if why:
            raise InvalidInput(why, "see chronoctl(1), BACKFILL")
        choice = _choose(store, row, t1, t2, only, now)
        if dry_run:
            return _print_plan(row.job_id, t1, t2, only, choice, now, as_json)
        live = cmd_ops.live_nodes(store, now)
        if not live:
            raise Unreachable(
                f"no chronod is running against {store.url_safe}; nothing was stored",
                "start chronod (systemctl start chronod), then backfill again",
            )
        bf_id = store.add_backfill(
            row.job_id,
            from_at=t1,
            to_at=t2,
            only=only,
            max_concurrency=max_concurrency,
            allow_unsafe=allow_unsafe,
            reason=(reason or "").strip() or None,
            requested_by=_user(),
            items=[
                (p.occurrence.run_id, p.occurrence.job_key, p.occurrence.scheduled_at, p.occurrence.fire_at)
                for p in choice.picks
            ],
        )
        store.add_request("backfill", row.job_id, {"backfill_id": bf_id})
        cmd_ops.wake(cmd_ops.local_daemon(store, now), cmd_ops.SIG_REQUESTS)
        if max_concurrency > 1 and row.spec.overlap != "allow" and not as_json:
            from chronoctl.render import warn

            warn(f"{row.job_id} has overlap: {row.spec.overlap}: its occurrences run one at a time")
        if not as_json and not no_wait:
            _print_plan(row.job_id, t1, t2, only, choice, now, False, header_only=True, backfill_id=bf_id)
        data = backfill_json(store, store.get_backfill(bf_id)) if no_wait else _wait(store, bf_id, as_json)
    if as_json:
        from chronoctl.render import print_json

        print_json(data)
    elif no_wait:
        from chronoctl.render import echo

        echo(
            f"backfill {bf_id} of {row.job_id} stored: {len(choice.picks)} occurrence(s); `chronoctl status` shows its progress"
        )
    else:
        _print_summary(data)
    if data["state"] == "cancelled" or (data["state"] == "done" and data["progress"]["not_succeeded"]):
        raise typer.Exit(EXIT_NO)


def _cancel(target: str, reason: str | None, db: str | None, as_json: bool) -> None:
    """`backfill --cancel ID|JOB`: end the running backfill(s) `cancelled`, with who and why."""
    from chronoctl.render import echo, escape_line, print_json

    who = _user()
    why = "cancelled" + (f" by {who}" if who else "") + (f": {reason.strip()}" if reason and reason.strip() else "")
    with cmd_ops.opened(db) as store:
        if target.isdigit():
            found = store.get_backfill(int(target))
            if found is None:
                raise UsageError(f"no backfill {target}", "`chronoctl status` lists the running backfills by id")
            chosen = [found]
        else:
            cmd_ops.get_job(store, target, removed_ok=True)
            chosen = store.backfills(active_only=True, job_id=target)
        ended: dict[int, list[str]] = {}
        for bf in chosen:
            was_running, ids = store.cancel_backfill(bf.id, why) if bf.state == "running" else (False, [])
            if was_running:
                ended[bf.id] = ids
        data = [dict(backfill_json(store, store.get_backfill(bf.id)), cancelled_now=bf.id in ended) for bf in chosen]
    if as_json:
        print_json(
            {
                "cancelled": [d for d in data if d["cancelled_now"]],
                "not_running": [d for d in data if not d["cancelled_now"]],
            }
        )
    for d in [] if as_json else data:
        p = d["progress"]
        if d["cancelled_now"]:
            stopped = len(ended[d["id"]])
            echo(
                escape_line(
                    f"backfill {d['id']} of {d['job_id']} cancelled: {p['total'] - p['started']} not started will not run"
                    + (f", {stopped} waiting to start cancelled" if stopped else "")
                    + f", {p['in_flight']} running finish; {d['error']}"
                )
            )
        else:
            echo(escape_line(f"backfill {d['id']} of {d['job_id']} is not running: it ended {d['state']}"))
    if not as_json and not data:
        echo(escape_line(f"{target} has no running backfill"))
    if not ended:
        raise typer.Exit(EXIT_NO)


def _choose(store: "Store", row: "JobRow", t1: datetime, t2: datetime, only: str, now: datetime) -> "Choice":
    from chronod.core import backfill as core
    from chronod.core.schedule import compile_schedule

    spec = row.spec
    schedule = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
    runs = store.runs(spec.id, since=t1, until=t2 + timedelta(seconds=1))
    nodes = _each_nodes(store, now) if spec.run_on.each else []
    spans = store.known_spans([spec.id]).get(spec.id, [])
    mark = store.pruned([spec.id]).get(spec.id)
    try:
        return core.choose(
            spec, schedule, runs, start=t1, end=t2, only=only, now=now, nodes=nodes, spans=spans, pruned=mark
        )
    except core.Refused as e:
        raise UsageError(
            str(e), "give --from before --to; a backfill runs at most 10,000 occurrences, of a range of at most 100,000"
        ) from None


def _each_nodes(store: "Leases", now: datetime) -> list[str]:
    """The nodes whose occurrences of a `run_on: each` job a backfill runs: the live ones
    (each runs its own); with none live (a dry run), every node the database knows."""
    live = [n.name for n in cmd_ops.live_nodes(store, now)]
    return live or [n.name for n in store.nodes()]


def _user() -> str | None:
    return common.asking_user()


def _occ_json(occ: Any, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": occ.run_id,
        "job_key": occ.job_key,
        "scheduled_at": cmd_ops.iso(occ.scheduled_at),
        **extra,
    }


def plan_json(job_id: str, t1: datetime, t2: datetime, only: str, choice: "Choice") -> dict[str, Any]:
    """What a backfill would run and what it leaves out (`--dry-run --json`)."""
    return {
        "job_id": job_id,
        "from": cmd_ops.iso(t1),
        "to": cmd_ops.iso(t2),
        "only": only,
        "dry_run": True,
        "would_run": [_occ_json(p.occurrence, was=p.was) for p in choice.picks],
        "left_out": [_occ_json(x.occurrence, state=x.state, reason=x.reason) for x in choice.left],
    }


def _print_plan(
    job_id: str,
    t1: datetime,
    t2: datetime,
    only: str,
    choice: "Choice",
    now: datetime,
    as_json: bool,
    *,
    header_only: bool = False,
    backfill_id: int | None = None,
) -> None:
    from chronoctl.render import echo, escape_line, human_time, print_json

    if as_json:
        return print_json(plan_json(job_id, t1, t2, only, choice))
    n = len(choice.picks)
    verb = f"backfill {backfill_id} of {job_id} runs" if backfill_id else f"would run {job_id}:"
    echo(
        escape_line(
            f"{verb} {n} occurrence{'' if n == 1 else 's'} (--only {only}) between {cmd_ops.iso(t1)} and {cmd_ops.iso(t2)}"
        )
    )
    if header_only:
        return
    for p in choice.picks:
        o = p.occurrence
        echo(escape_line(f"  run   {human_time(o.scheduled_at, now)}  {o.run_id}  (was: {p.was})"))
    for x in choice.left:
        o = x.occurrence
        echo(escape_line(f"  leave {human_time(o.scheduled_at, now)}  {o.run_id}  {x.reason}"))


def backfill_json(store: "Store", bf: Any) -> dict[str, Any]:
    """A stored backfill with its progress (`--json`, `status --json`)."""
    from chronod.core import backfill as core

    states = store.run_states(bf.run_ids)
    return {
        "id": bf.id,
        "job_id": bf.job_id,
        "from": cmd_ops.iso(bf.from_at),
        "to": cmd_ops.iso(bf.to_at),
        "only": bf.only,
        "max_concurrency": bf.max_concurrency,
        "allow_unsafe": bf.allow_unsafe,
        "reason": bf.reason,
        "requested_by": bf.requested_by,
        "state": bf.state,
        "error": bf.error,
        "created_at": cmd_ops.iso(bf.created_at),
        "finished_at": cmd_ops.iso(bf.finished_at),
        "progress": core.progress(states, bf.run_ids, bf.started),
        "runs": [
            {"run_id": rid, "scheduled_at": cmd_ops.iso(at), "state": states.get(rid) if i < bf.started else "waiting"}
            for i, (rid, _, at, _) in enumerate(bf.items)
        ],
    }


def _wait(store: "Store", bf_id: int, quiet: bool) -> dict[str, Any]:
    with interrupted_at_pauses():
        return _wait_on(store, bf_id, quiet)


def _wait_on(store: "Store", bf_id: int, quiet: bool) -> dict[str, Any]:
    """Poll the stored backfill until it is done, drawing a progress bar on a terminal."""
    from chronoctl.render import is_terminal

    bar = not quiet and is_terminal(sys.stderr)
    last = None
    try:
        while True:
            data = backfill_json(store, store.get_backfill(bf_id))
            line = progress_line(data)
            if bar:
                sys.stderr.write("\r" + line)
                sys.stderr.flush()
            elif not quiet and line != last:
                sys.stderr.write(line + "\n")
            last = line
            if data["state"] != "running":
                if bar:
                    sys.stderr.write("\n")
                return data
            pause(POLL_S)
    except KeyboardInterrupt:
        if bar:
            sys.stderr.write("\n")
        sys.stderr.write(
            f"chronoctl: stopped waiting; backfill {bf_id} goes on in chronod (`chronoctl status` shows it)\n"
        )
        raise


def progress_line(data: dict[str, Any]) -> str:
    """`[#####.....] 5/10 done, 1 running, 0 not succeeded`: one line of a backfill's progress."""
    p = data["progress"]
    total = p["total"] or 1
    filled = BAR_WIDTH * p["done"] // total
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    return (
        f"backfill {data['id']} [{bar}] {p['done']}/{p['total']} done, {p['in_flight']} running, "
        f"{p['not_succeeded']} not succeeded"
    )


def _print_summary(data: dict[str, Any]) -> None:
    from chronoctl.render import echo, escape_line

    p = data["progress"]
    echo(
        escape_line(
            f"backfill {data['id']} of {data['job_id']} {data['state']}: {p['succeeded']} succeeded, "
            f"{p['not_succeeded']} did not, of {p['total']}"
        )
    )
    for r in data["runs"]:
        if r["state"] not in ("succeeded", "waiting"):
            echo(escape_line(f"  {r['scheduled_at']}  {r['run_id']}  {r['state']}  (chronoctl logs {r['run_id'][:8]})"))
