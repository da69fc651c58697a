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

import getpass
from typing import Optional

import typer

from chronoctl import cmd_ops, common
from chronoctl import complete as _complete
from chronoctl.cmd_ops import WAIT_MAX_S, db_option, json_option
from chronoctl.errors import CliError, UnknownJob, Unreachable, UsageError


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
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def pause(
    job: str = typer.Argument(..., metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    reason: str = typer.Option(..., "--reason", metavar="TEXT", help="Why (shown by status and did-it-run)."),
    db: Optional[str] = db_option(),
) -> None:
    """Pause a job: occurrences that fall due while paused are recorded skipped_paused."""
    if not reason.strip():
        raise UsageError("--reason must say why the job is paused", "e.g. --reason 'INC-123: upstream down'")
    _set_paused(job, True, reason.strip(), db)


def resume(
    job: str = typer.Argument(..., metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    db: Optional[str] = db_option(),
) -> None:
    """Resume a paused job: its next occurrence runs as scheduled."""
    _set_paused(job, False, None, db)


def _set_paused(job: str, paused: bool, reason: str | None, db: str | None) -> None:
    from chronoctl.render import echo, escape_line

    now = common.now_utc()
    with cmd_ops.opened(db) as store:
        row = cmd_ops.get_job(store, job)
        if not paused and not row.paused:
            echo(escape_line(f"{job} is not paused; nothing changed"))
            return
        if paused and row.paused:
            since = f" since {cmd_ops.iso(row.paused_at)}" if row.paused_at else ""
            raise CliError(
                f"{job} is already paused{since}: {row.paused_reason or 'no reason given'}",
                f"`chronoctl resume {job}` first to pause it for another reason",
            )
        if not store.set_paused(job, paused, reason):
            raise UnknownJob(job, f"the database {store.url_safe}")
        cmd_ops.wake(cmd_ops.local_daemon(store, now), cmd_ops.SIG_REQUESTS)
    if paused:
        echo(
            escape_line(
                f"paused {job}: {reason}; occurrences that fall due are recorded skipped_paused "
                f"until `chronoctl resume {job}`"
            )
        )
    else:
        echo(escape_line(f"resumed {job}"))
