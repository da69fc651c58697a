"""What the operating commands share: opening the store, finding a job in it, the JSON
shape of a run, and finding and waking the chronod on this host.

chronoctl never talks to the daemon directly: it writes a request into the store and
sends the local daemon a signal (SIGHUP: reload the registry; SIGUSR1: requests are
waiting). A daemon on another host of a fleet finds requests on its next wake.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import typer

from chronoctl.errors import EXIT_UNREACHABLE, CliError, UnknownJob, Unreachable, UsageError
from chronod import fsutil

if TYPE_CHECKING:
    from chronod.store.api import JobRow, Leases, Node, Run, Store

DB_HELP = "Database: an SQLAlchemy URL or an SQLite file path (default: CHRONO_DB, else the per-user default)."
JSON_HELP = "Print JSON (stable keys, ISO-8601 times with offsets) instead of a table."
WAIT_MAX_S = 3600
"""The longest --wait a command accepts (an hour)."""


def db_option() -> Any:
    """The `--db URL` option every store command takes."""
    return typer.Option(None, "--db", metavar="URL", help=DB_HELP)


def json_option() -> Any:
    """The `--json` option every command that shows data takes."""
    return typer.Option(False, "--json", help=JSON_HELP)


def db_url(option: str | None) -> str:
    """`--db`, else `CHRONO_DB`, else the default path for this user (docs/reference.md, Files and paths)."""
    if option:
        return option
    from chronod.paths import default_db

    return default_db()


def _safe(url: str) -> str:
    from chronoctl.render import redact_secrets

    return redact_secrets(url)


def check_db_kind(url: str) -> None:
    """UsageError (exit 2) for a URL of a database chrono does not speak: only SQLite
    paths and PostgreSQL URLs are stores."""
    import re

    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", url)
    if m and m.group(1).split("+")[0].lower() not in ("sqlite", "postgresql", "postgres"):
        raise UsageError(
            f"--db {_safe(url)}: chrono stores its state in SQLite or PostgreSQL, not {m.group(1)}",
            "give an SQLite file path or a postgresql:// URL",
        )


def check_readable(path: Path) -> None:
    """A private database (0600 in a 0700 directory, docs/reference.md, Security model)
    that this user may not open is said as such, with the fix, before SQLite says
    `unable to open database file`."""

    def refuse(what: Path) -> None:
        raise Unreachable(
            f"permission denied: {what} is private to its owner (the ledger holds every job's output and env)",
            "run this command as root (sudo chronoctl ...) or as the user who runs chronod",
        )

    for parent in reversed(path.absolute().parents):
        try:
            os.stat(parent)
        except PermissionError:
            refuse(parent)
        except OSError:
            return
        if parent.is_dir() and not os.access(parent, os.X_OK):
            refuse(parent)
    if path.exists() and not os.access(path, os.R_OK):
        refuse(path)


def check_may_read_output(store: "Store", url: str, job: "JobRow | None") -> None:
    """A job's output is for root, the user the job runs as, and the owner of the ledger
    (a per-user daemon's own database): the same people who may read its file. Anyone
    else who can open the database (a group given read access) is refused."""
    import pwd

    from chronod.paths import sqlite_path

    me = os.geteuid()
    if me == 0 or job is None:
        return
    path = sqlite_path(url)
    try:
        if path is not None and os.stat(path).st_uid == me:
            return
        name = pwd.getpwuid(me).pw_name
    except (OSError, KeyError):
        name = str(me)
    runs_as = job.spec.user or "the user who runs chronod"
    if job.spec.user == name:
        return
    raise CliError(
        f"permission denied: job {job.job_id!r} runs as {runs_as}; its output is for that user and root",
        f"run this command as root (sudo chronoctl logs {job.job_id})",
        EXIT_UNREACHABLE,
    )


@contextmanager
def opened(option: str | None) -> Iterator["Store"]:
    """The store at `--db`, schema checked; store failures become exit 3 with the URL
    shown without its password; a schema that is too old names `chronoctl db upgrade`."""
    from chronod.paths import sqlite_path
    from chronod.store.api import SchemaTooNew, SchemaTooOld, StoreError, open_store

    url = db_url(option)
    check_db_kind(url)
    path = sqlite_path(url)
    if path is not None and path.is_dir():
        raise UsageError(
            f"the database {path} is a directory, not a database file",
            "give the file inside it (e.g. chrono.db) with --db PATH or CHRONO_DB",
        )
    if path is not None:
        check_readable(path)
    if path is not None and not path.exists():
        raise Unreachable(
            f"no database at {path}", "chronod creates it on its first start; or give --db URL / CHRONO_DB"
        )
    try:
        store = open_store(url, cli=True)
    except StoreError as exc:
        raise Unreachable(f"cannot open the database {_safe(url)}: {_safe(str(exc))}") from exc
    try:
        try:
            store.check_schema()
        except SchemaTooOld as exc:
            raise CliError(
                f"the database {store.url_safe} has an older schema than this chronoctl",
                f"run `chronoctl db upgrade --db {store.url_safe}`",
                EXIT_UNREACHABLE,
            ) from exc
        except SchemaTooNew as exc:
            raise CliError(
                f"the database {store.url_safe} has a newer schema than this chronoctl",
                "upgrade chrono on this host",
                EXIT_UNREACHABLE,
            ) from exc
        yield store
    except StoreError as exc:
        # (the store's error names the database already: said once)
        why = _safe(str(exc)).removeprefix(f"database {store.url_safe}: ")
        raise Unreachable(f"the database {store.url_safe} failed: {why}", _unreachable_hint(store.url_safe)) from exc
    except Exception as exc:
        if type(exc).__module__.split(".")[0] in ("sqlalchemy", "psycopg", "sqlite3"):
            why = _safe(str(exc)).splitlines()[0]
            raise Unreachable(
                f"the database {store.url_safe} failed: {why}", _unreachable_hint(store.url_safe)
            ) from exc
        raise
    finally:
        store.close()


def _unreachable_hint(url: str) -> str:
    if url.startswith("sqlite"):
        return "check the database file's path and that this user may read and write it and its directory (--db or CHRONO_DB)"
    return "check that the database server runs and is reachable from here, and the URL (--db or CHRONO_DB)"


def get_job(store: "Store", job_id: str, *, removed_ok: bool = False) -> "JobRow":
    """The registered job (not removed, unless `removed_ok`: its history stays readable),
    or UnknownJob (exit 2)."""
    row = store.get_job(job_id)
    if row is None or (row.removed_at is not None and not removed_ok):
        gone = " (it was unregistered)" if row is not None else ""
        known = [] if row is not None else [j.job_id for j in store.jobs()]
        raise UnknownJob(
            job_id,
            f"the database {store.url_safe}{gone}",
            "`chronoctl list` shows the registered jobs; a job registered while no "
            "chronod ran reaches the database when chronod starts",
            known=known,
        )
    return row


MIN_PREFIX = 4


def find_run(store: "Store", text: str) -> "Run":
    """The run `text` names: its whole id, or a unique prefix of at least 4 characters
    (tables show 8). No such run, or a prefix several runs share, is a UsageError
    (exit 2); the ambiguous case lists the candidates, as git does."""
    text = text.strip()
    run = store.get_run(text)
    if run is not None:
        return run
    found = store.runs_by_prefix(text, limit=6) if len(text) >= MIN_PREFIX else []
    if len(found) == 1:
        return found[0]
    if not found:
        short = f" (a prefix needs at least {MIN_PREFIX} characters)" if len(text) < MIN_PREFIX else ""
        raise UsageError(
            f"no run {text!r} in the database {store.url_safe}{short}",
            "`chronoctl runs JOB` lists run ids; any unique prefix of one works",
        )
    from chronoctl.render import escape_line

    listed = "; ".join(f"{r.run_id} ({escape_line(r.job_id)}, {iso(r.scheduled_at)})" for r in found[:5])
    more = " and more" if len(found) > 5 else ""
    raise UsageError(f"run id prefix {text!r} is ambiguous: {listed}{more}", "give more characters of the run id")


def iso(at: datetime | None) -> str | None:
    """ISO-8601 with offset (UTC), or None."""
    from chronoctl.render import iso as _iso

    return _iso(at) if at is not None else None


def duration_s(run: "Run") -> float | None:
    """Seconds from start to finish, or None while unknown."""
    if run.started_at and run.finished_at:
        return round((run.finished_at - run.started_at).total_seconds(), 3)
    return None


def run_json(run: "Run") -> dict[str, Any]:
    """A run as JSON, keys fixed (docs/reference.md plus error, signal, output_bytes, token, trigger)."""
    return {
        "run_id": run.run_id,
        "job_id": run.job_id,
        "job_key": run.job_key,
        "scheduled_at": iso(run.scheduled_at),
        "fire_at": iso(run.fire_at),
        "state": run.state,
        "attempts": run.attempts,
        "node": run.node,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "duration_s": duration_s(run),
        "exit_code": run.exit_code,
        "signal": run.signal,
        "error": run.error,
        "output_bytes": run.output_bytes,
        "token": run.token,
        "trigger": run.trigger,
        "next_attempt_at": iso(run.next_attempt_at),
    }


def hold_json(h: Any) -> dict[str, Any] | None:
    """What holds an occurrence, as every command's `--json` carries it (`held`): a window
    (`kind` window, `name`, `reason`, `until` its end), a pause (`kind` pause, `name` its
    scope: job, tag T or resource R; `by`; `until` null until resumed), or the line of a
    resource (`kind` resource, `name` the resource, `since` when the wait began, `until`
    when it gives up)."""
    if h is None:
        return None
    out = {"kind": h.kind, "name": h.name, "reason": h.reason, "by": h.by, "until": iso(h.until)}
    if h.kind == "resource":
        out["since"] = iso(h.since)
    return out


def held_text(h: dict[str, Any], now: datetime) -> str:
    """A `hold_json` in words: `paused until 08:00 (in 3h) (tag batch, by alice: INC-7)`,
    `window mw90 until 14:00 (in 2h): switch upgrade`."""
    from chronoctl.render import escape_line, relative, short_time

    until = datetime.fromisoformat(h["until"]) if h["until"] else None
    if h["kind"] == "resource":
        since = datetime.fromisoformat(h["since"]) if h.get("since") else None
        began = f" since {short_time(since, now)} ({relative(since, now)})" if since else ""
        gives_up = f", skipped at {short_time(until, now)} without one" if until else ""
        return escape_line(f"waiting for a slot of resource {h['name']}{began} ({h['reason']}){gives_up}")
    end = f"until {short_time(until, now)} ({relative(until, now)})" if until else "until resumed"
    if h["kind"] == "window":
        return escape_line(f"window {h['name']} {end}: {h['reason']}")
    who = f", by {h['by']}" if h["by"] else ""
    return escape_line(f"paused {end} ({h['name']}{who}: {h['reason']})")


# --- the daemon ------------------------------------------------------------------------


def node_alive(node: "Node", now: datetime) -> bool:
    """A node is up when it did not stop cleanly and its lease has not expired."""
    return node.stopped_at is None and node.lease_expires_at > now


def live_nodes(store: "Leases", now: datetime) -> list["Node"]:
    """Every node whose lease is live."""
    return [n for n in store.nodes() if node_alive(n, now)]


def local_daemon(store: "Leases", now: datetime) -> "Node | None":
    """The live node on this host whose process exists (newest heartbeat first)."""
    here = {socket.gethostname(), socket.gethostname().split(".")[0]}
    for node in live_nodes(store, now):
        if node.hostname in here and fsutil.pid_alive(node.pid):
            return node
    return None


def wake(node: "Node | None", sig: int) -> bool:
    """Send `sig` to the daemon of `node`; False when there is none or it is gone."""
    if node is None:
        return False
    try:
        os.kill(node.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


SIG_RELOAD = signal.SIGHUP
SIG_REQUESTS = signal.SIGUSR1


def wait_for(check: Callable[[], Any], timeout_s: float, step_s: float = 0.1) -> Any:
    """Call `check` until it returns something truthy or `timeout_s` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(step_s)


def wide_option() -> Any:
    """`--wide`: whole run ids and every column, however wide the terminal."""
    return typer.Option(False, "--wide", help="Whole run ids and every column, however wide the terminal.")


def utc_option() -> Any:
    """`--utc`: times in UTC instead of the local zone."""
    return typer.Option(False, "--utc", help="Show times in UTC instead of the local zone.", callback=_set_utc)


def _set_utc(value: bool) -> bool:
    from chronoctl.render import use_utc

    use_utc(bool(value))
    return value


def is_fleet(store: "Leases") -> bool:
    """True when more than one node has used the database: only then do tables show
    which node ran what, and under which fencing token."""
    return len(store.nodes()) > 1
