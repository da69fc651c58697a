"""`chronoctl db upgrade`, `db check` and `db prune`: the database schema and size by hand.

chronod applies migrations itself when it starts; these commands are for operators who
upgrade a shared PostgreSQL before rolling a new chrono out, and for health checks.
`check` exits 0 when the schema is current, 1 when it is not (an upgrade is pending, or
the database is newer than this chrono), 3 when the database cannot be reached.
`prune` deletes old runs now, as chronod does by itself for each job's `history_days`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from chronoctl.errors import EXIT_NO, Unreachable

if TYPE_CHECKING:
    from datetime import datetime

    from chronod.store.api import Retention, Store

DB_HELP = "Database: an SQLAlchemy URL or an SQLite file path (default: CHRONO_DB, else the per-user default)."

app = typer.Typer(
    name="db",
    help="Inspect and upgrade the database schema; prune old runs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
)


def register(target: typer.Typer) -> None:
    """Add the `db` command group to `target`."""
    target.add_typer(app, name="db")


def _url(option: str | None) -> str:
    if option:
        return option
    from chronod.paths import default_db

    return default_db()


def _status(revision: str | None, head: str, known: tuple[str, ...]) -> str:
    """current | upgrade_pending | too_new."""
    if revision == head:
        return "current"
    return "upgrade_pending" if revision is None or revision in known else "too_new"


def _open(url: str) -> "Store":
    from chronod.store.api import StoreError, open_store

    try:
        return open_store(url, cli=True)
    except StoreError as exc:
        raise Unreachable(str(exc), "check --db / CHRONO_DB") from None


@app.command("upgrade")
def upgrade(db: str = typer.Option(None, "--db", metavar="URL", help=DB_HELP)) -> None:
    """Apply every pending migration (under a lock; safe to run on many hosts at once)."""
    from chronoctl.render import echo_line
    from chronod.store.api import StoreError
    from chronod.store.schema import HEAD_REVISION

    store = _open(_url(db))
    try:
        before = store.schema_revision()
        store.upgrade()
        after = store.schema_revision()
    except StoreError as exc:
        raise Unreachable(str(exc), "check that the database is up and that this user may change its schema") from None
    finally:
        store.close()
    if before == after:
        echo_line(f"{store.url_safe}: schema already at revision {after} (this chrono's head is {HEAD_REVISION})")
    else:
        echo_line(f"{store.url_safe}: schema upgraded from revision {before or 'none'} to {after}")


@app.command("check")
def check(
    db: str = typer.Option(None, "--db", metavar="URL", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: url, revision, head, status."),
) -> None:
    """Say whether the schema is current: exit 0 current, 1 upgrade pending (or too new), 3 unreachable."""
    from chronod.paths import sqlite_path
    from chronod.store.api import StoreError
    from chronod.store.schema import HEAD_REVISION, REVISIONS

    url = _url(db)
    from chronoctl.cmd_ops import check_db_kind

    check_db_kind(url)
    path = sqlite_path(url)
    if path is not None and not path.exists():
        # Opening SQLite would create the file; a check must not. No file is no database,
        # as every other command says.
        raise Unreachable(
            f"no database at {path}", "chronod creates it on its first start; or give --db URL / CHRONO_DB"
        )
    if path is not None and path.is_dir():
        from chronoctl.errors import UsageError

        raise UsageError(
            f"the database {path} is a directory, not a database file",
            "give the file inside it (e.g. chrono.db) with --db PATH or CHRONO_DB",
        )
    if True:
        store = _open(url)
        url_safe = store.url_safe
        try:
            revision = store.schema_revision()
        except StoreError as exc:
            raise Unreachable(str(exc), "check --db / CHRONO_DB and that the database is up") from None
        finally:
            store.close()
    status = _status(revision, HEAD_REVISION, REVISIONS)
    _report(url_safe, revision, HEAD_REVISION, status, as_json)
    if status != "current":
        raise typer.Exit(EXIT_NO)


def _report(url_safe: str, revision: str | None, head: str, status: str, as_json: bool) -> None:
    if as_json:
        doc: dict[str, Any] = {"url": url_safe, "revision": revision, "head": head, "status": status}
        typer.echo(json.dumps(doc, sort_keys=True))
        return
    shown = revision or "none"
    lines = {
        "current": f"{url_safe}: schema at revision {shown}, this chrono's head: up to date",
        "upgrade_pending": (
            f"{url_safe}: schema at revision {shown}, this chrono needs {head}: run `chronoctl db upgrade`"
        ),
        "too_new": (
            f"{url_safe}: schema at revision {shown}, newer than this chrono's {head}: "
            f"this chrono is older than the database; upgrade chrono"
        ),
    }
    from chronoctl.render import echo_line

    echo_line(lines[status])


PRUNE_BATCH = 500


@app.command("prune")
def prune(
    older_than: str = typer.Option(
        ..., "--older-than", metavar="DUR", help="Delete the runs scheduled longer ago than this (30d, 12h)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count what would be deleted; delete nothing."),
    db: str = typer.Option(None, "--db", metavar="URL", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: before, kept_s, dry_run, runs, jobs."),
) -> None:
    """Delete old runs of every job now, in small batches; each job keeps its latest success,
    and the audit says "pruned" for what went, never "missing"."""
    from chronoctl import cmd_ops, common

    kept_s = common.parse_seconds(older_than, "--older-than")
    with cmd_ops.opened(db) as store:
        from chronod.core import retention

        before = retention.cutoff(common.now_utc(), kept_s)
        job_ids = store.job_ids_with_runs_before(before)
        if dry_run:
            counts = store.prunable({job_id: before for job_id in job_ids})
        else:
            counts = {job_id: _prune_job(store, job_id, before, kept_s) for job_id in job_ids}
            counts = {job_id: n for job_id, n in counts.items() if n}
    _prune_report(before, kept_s, dry_run, counts, as_json)


def _prune_job(store: "Retention", job_id: str, before: datetime, kept_s: int) -> int:
    total = 0
    while True:
        n = store.prune_runs(job_id, before, kept_s=kept_s, limit=PRUNE_BATCH)
        total += n
        if n < PRUNE_BATCH:
            return total


def _prune_report(before: Any, kept_s: int, dry_run: bool, counts: dict[str, int], as_json: bool) -> None:
    from chronoctl import cmd_ops, render
    from chronod.core.retention import kept_text

    total = sum(counts.values())
    if as_json:
        render.print_json(
            {
                "before": cmd_ops.iso(before),
                "kept_s": kept_s,
                "dry_run": dry_run,
                "runs": total,
                "jobs": dict(sorted(counts.items())),
            }
        )
        return
    verb = "would delete" if dry_run else "deleted"
    render.echo(
        f"{verb} {total} run(s) of {len(counts)} job(s) scheduled before {cmd_ops.iso(before)} "
        f"(history kept {kept_text(kept_s)}; each job keeps its latest success)"
    )
    for job_id, n in sorted(counts.items()):
        render.echo(f"  {render.escape_line(job_id)}: {n}")
