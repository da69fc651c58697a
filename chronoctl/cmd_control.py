"""`trigger`, `pause` and `resume`: an operator's hand on a job, through the store.

`trigger` queues a request that a live chronod takes (the local one is woken with
SIGUSR1; a fleet node elsewhere finds it on its next wake). The daemon applies the job's
overlap policy unless the request says `force`. The manual run's id is
`sha256((job_key + "|manual|" + T).encode()).hexdigest()[:16]`, T the request time in UTC
as `YYYY-MM-DDTHH:MM:SSZ` (`chronod.core.occurrence.manual_run_id`); it is in the request's
payload as `run_id` for jobs that run once per fleet; for a job that runs on each node,
each node computes it with its own key from the payload's `requested_at`. With no live chronod at all nothing
is queued and the command exits 3: a manual run that starts hours later, when a daemon
finally comes up, surprises more than it helps.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Optional

import typer

from chronoctl import cmd_ops, common
from chronoctl import complete as _complete
from chronoctl.cmd_ops import WAIT_MAX_S, db_option, json_option
from chronoctl.errors import CliError, UnknownJob, Unreachable, UsageError

if TYPE_CHECKING:
    from chronod.store.api import OperatorState, PauseRow


def register(app: typer.Typer) -> None:
    """Add `trigger`, `pause` and `resume` to `app`."""
    app.command("trigger")(trigger)
    app.command("pause")(pause)
    app.command("resume")(resume)


def trigger(
    job: str = typer.Argument(..., metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    force: bool = typer.Option(False, "--force", help="Start even if a run is going (ignore the overlap policy)."),
    wait: float = typer.Option(
        5.0, "--wait", metavar="SECONDS", min=0, max=WAIT_MAX_S, help="How long to wait for the daemon to take it."
    ),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """Run a job now, as a manual run with its own run id. Exit 3 when no chronod is running."""
    from chronod.core.occurrence import manual_run_id

    now = common.now_utc()
    with cmd_ops.opened(db) as store:
        row = cmd_ops.get_job(store, job)
        live = cmd_ops.live_nodes(store, now)
        if not live:
            raise Unreachable(
                f"no chronod is running against {store.url_safe}; nothing was queued",
                "start chronod (systemctl start chronod), then trigger again",
            )
        rid = None if row.spec.run_on.each else manual_run_id(row.job_id, now)
        payload = {"requested_at": cmd_ops.iso(now), "force": force, "run_id": rid, "user": _user()}
        request_id = store.add_request("trigger", row.job_id, payload)
        woke = cmd_ops.wake(cmd_ops.local_daemon(store, now), cmd_ops.SIG_REQUESTS)
        run = cmd_ops.wait_for(lambda: store.get_run(rid), wait) if rid and wait > 0 else None
    data = {
        "job_id": row.job_id,
        "request_id": request_id,
        "run_id": rid,
        "force": force,
        "requested_at": cmd_ops.iso(now),
        "woke_local_daemon": woke,
        "state": run.state if run else "queued",
        "run": cmd_ops.run_json(run) if run else None,
    }
    if as_json:
        from chronoctl.render import print_json

        return print_json(data)
    from chronoctl.render import echo, escape_line

    how = "woke the local chronod" if woke else f"a chronod on {', '.join(n.name for n in live)} will take it"
    if run is None:
        echo(
            escape_line(
                f"queued a manual run of {row.job_id} (request {request_id}; {how})"
                + (f"; run id {rid}" if rid else "")
            )
        )
    else:
        echo(escape_line(f"manual run {rid} of {row.job_id}: {run.state}" + (f" ({run.error})" if run.error else "")))


def _user() -> str | None:
    return common.asking_user()


def pause(
    job: Optional[str] = typer.Argument(None, metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    tag: Optional[str] = typer.Option(None, "--tag", metavar="TAG", help="Pause every job with this tag."),
    resource: Optional[str] = typer.Option(None, "--resource", metavar="NAME", help="Pause every job of a resource."),
    reason: str = typer.Option(..., "--reason", metavar="TEXT", help="Why (shown by status and did-it-run)."),
    for_: Optional[str] = typer.Option(
        None, "--for", metavar="DUR", help="End the pause by itself after 90s, 15m, 2h, 1d."
    ),
    until: Optional[str] = typer.Option(
        None,
        "--until",
        metavar="TIME",
        help="End the pause by itself at this time: tomorrow, tomorrow 08:00, +12h, in 2h, 02:00 (the next "
        "one), monday, ISO-8601 (UTC without an offset).",
    ),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
) -> None:
    """Pause a job, a tag or a resource: occurrences that fall due meanwhile are recorded
    skipped_paused. Until `resume`, or by itself with --for or --until."""
    kind, target = _target(job, tag, resource, "pause")
    if not reason.strip():
        raise UsageError("--reason must say why it is paused", "e.g. --reason 'INC-123: upstream down'")
    now = common.now_utc()
    end = _end(for_, until, now)
    with cmd_ops.opened(db) as store:
        affected = _affected(store, kind, target)
        current = _current(store, kind, target)
        if current is not None:
            since = f" since {_z(current.since)}" if current.since else ""
            who = f" by {current.by}" if current.by else ""
            raise CliError(
                f"{_name(kind, target)} is already paused{since}{who}: {current.reason or 'no reason given'}",
                f"`chronoctl resume {_flag(kind, target)}` first to pause it for another reason",
            )
        by = _user()
        if kind == "job":
            if not store.set_paused(target, True, reason.strip(), by=by, until=end):
                raise UnknownJob(target, f"the database {store.url_safe}")
        else:
            store.set_group_pause(kind, target, reason.strip(), by=by, until=end)
        cmd_ops.wake(cmd_ops.local_daemon(store, now), cmd_ops.SIG_REQUESTS)
    data = {
        "kind": kind,
        "target": target,
        "reason": reason.strip(),
        "by": by,
        "until": _z(end) if end else None,
        "jobs": affected,
    }
    if as_json:
        from chronoctl.render import print_json

        return print_json(data)
    from chronoctl.render import echo, escape_line, warn

    if kind != "job" and not affected:
        warn(f"no registered job has {kind} {target!r} yet; the pause holds the ones that come")
    scope = "" if kind == "job" else f" ({_jobs_text(affected)})"
    ends = f"until {_z(end)} (it ends by itself) or " if end else "until "
    echo(
        escape_line(
            f"paused {_name(kind, target)}{scope}: {reason.strip()}; occurrences that fall due are recorded "
            f"skipped_paused {ends}`chronoctl resume {_flag(kind, target)}`"
        )
    )


def resume(
    job: Optional[str] = typer.Argument(None, metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    tag: Optional[str] = typer.Option(None, "--tag", metavar="TAG", help="Resume a paused tag."),
    resource: Optional[str] = typer.Option(None, "--resource", metavar="NAME", help="Resume a paused resource."),
    db: Optional[str] = db_option(),
) -> None:
    """Resume a paused job, tag or resource: the next occurrences run as scheduled."""
    from chronoctl.render import echo, escape_line

    kind, target = _target(job, tag, resource, "resume")
    now = common.now_utc()
    with cmd_ops.opened(db) as store:
        if kind == "job":
            cmd_ops.get_job(store, target)
        current = _current(store, kind, target)
        if current is None:
            held = _held_by_group(store, target) if kind == "job" else None
            more = (
                f" (it is held by the pause of {_name(held.kind, held.target)}: `chronoctl resume {_flag(held.kind, held.target)}`)"
                if held
                else ""
            )
            echo(escape_line(f"{_name(kind, target)} is not paused; nothing changed{more}"))
            return
        if kind == "job":
            store.set_paused(target, False, None)
        else:
            store.clear_group_pause(kind, target)
        cmd_ops.wake(cmd_ops.local_daemon(store, now), cmd_ops.SIG_REQUESTS)
    echo(escape_line(f"resumed {_name(kind, target)}"))


def _target(job: str | None, tag: str | None, resource: str | None, verb: str) -> tuple[str, str]:
    given = [(k, v) for k, v in (("job", job), ("tag", tag), ("resource", resource)) if v is not None]
    if len(given) != 1:
        raise UsageError(
            f"{verb} takes one of JOB, --tag TAG or --resource NAME" + (f", not {len(given)}" if given else ""),
            f"e.g. chronoctl {verb} nightly-backup" + (" --reason 'INC-123'" if verb == "pause" else ""),
        )
    kind, target = given[0]
    if not target.strip():
        raise UsageError(f"{verb}: the {kind} is empty", f"name a {kind}")
    if verb == "pause":  # resume still lifts a pause stored before this rule
        _check_name(kind, target.strip())
    return kind, target.strip()


def _check_name(kind: str, target: str) -> None:
    """Refuse a tag or resource name that no job file may give (it would pause nothing, ever)."""
    import re

    from chronod.core.validate import RESOURCE_PATTERN, TAG_PATTERN

    rules = {
        "tag": (TAG_PATTERN, "letters, digits and . _ : / -"),
        "resource": (RESOURCE_PATTERN, "letters, digits and . _ -"),
    }
    if kind in rules and not re.fullmatch(rules[kind][0], target):
        pattern, chars = rules[kind]
        raise UsageError(
            f"pause: no job can have the {kind} {target!r}: a {kind} is {chars}, starting with a letter or digit, at most 63",
            "check its spelling against the job files (`chronoctl show JOB` lists a job's tags and resource)",
        )


def _end(for_: str | None, until: str | None, now: datetime) -> datetime | None:
    if for_ is not None and until is not None:
        raise UsageError("--for and --until both say when the pause ends", "give one of them")
    now = now.replace(microsecond=0)
    if for_ is not None:
        return now + timedelta(seconds=common.parse_seconds(for_, "--for"))
    if until is None:
        return None
    return common.parse_instant(until, "UTC", "--until", now, direction="future", strict=True)


def _current(store: OperatorState, kind: str, target: str) -> PauseRow | None:
    """The pause that holds this job, tag or resource itself now, or None."""
    return next((p for p in store.pauses() if p.kind == kind and p.target == target), None)


def _held_by_group(store: Any, job_id: str) -> Any:
    row = store.get_job(job_id)
    if row is None:
        return None
    for p in store.pauses():
        if (p.kind == "tag" and p.target in row.spec.tags) or (p.kind == "resource" and p.target == row.spec.resource):
            return p
    return None


def _affected(store: Any, kind: str, target: str) -> list[str]:
    """The registered jobs a pause of this target holds."""
    if kind == "job":
        return [cmd_ops.get_job(store, target).job_id]
    if kind == "tag":
        return [r.job_id for r in store.jobs() if target in r.spec.tags]
    return [r.job_id for r in store.jobs() if r.spec.resource == target]


def _z(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _jobs_text(jobs: list[str]) -> str:
    if not jobs:
        return "no registered job yet"
    more = f", and {len(jobs) - 10} more" if len(jobs) > 10 else ""
    return f"{len(jobs)} job{'s' if len(jobs) != 1 else ''}: {', '.join(jobs[:10])}{more}"


def _name(kind: str, target: str) -> str:
    return target if kind == "job" else f"{kind} {target}"


def _flag(kind: str, target: str) -> str:
    return target if kind == "job" else f"--{kind} {target}"
