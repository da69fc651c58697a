"""`register`, `unregister` and `list`: putting job files into the registry and taking
jobs out, then making the daemon reload and confirming that it took the change.

Files are written the way the root daemon's checks want them (docs/reference.md, What a root daemon accepts): a temporary
dotfile in the registry directory (the daemon skips dotfiles), fsync, the owner and mode
the file had (a new file: those of the file registered, else root and 0644), then an
atomic rename and an fsync of the directory. What is written is first read as the daemon
would read it from a file of that owner: a rewrite never hands a user's jobs to root.

`unregister` removes the job's file when the job is its only one. A file with several jobs
is rewritten only with `--force`, because rewriting YAML loses its comments and layout:
without it the command refuses and says which file to edit.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from chronoctl import cmd_ops, common
from chronoctl import complete as _complete
from chronoctl.cmd_ops import WAIT_MAX_S, db_option, json_option
from chronoctl.errors import EXIT_NO, CliError, InvalidInput, UsageError
from chronod import fsutil

if TYPE_CHECKING:
    from chronod.core.model import JobSpec

REGISTRY_HELP = "Registry directory (default: CHRONO_REGISTRY, else /etc/chrono/jobs.d for root)."


def register(app: typer.Typer) -> None:
    """Add `register`, `unregister` and `list` to `app`."""
    app.command("register")(register_file)
    app.command("unregister")(unregister)
    app.command("list")(list_jobs)


def _registry_option() -> Any:
    return typer.Option(None, "--registry", metavar="DIR", help=REGISTRY_HELP)


def _wait_option() -> Any:
    return typer.Option(
        10.0, "--wait", metavar="SECONDS", min=0, max=WAIT_MAX_S, help="How long to wait for the daemon to confirm."
    )


# --- writing files ------------------------------------------------------------------------


def write_atomically(
    target: Path, data: bytes, *, like: os.stat_result | None = None, check: bool = True, mode: int | None = None
) -> None:
    """Replace `target` with `data` durably, never widening what the file may do.

    An existing file keeps its owner and mode (less group and world write, which the
    daemon refuses); a new one takes the owner and mode of `like` (the file `register`
    copies), else root and 0644. Before writing, `data` is read as a root daemon would
    read it from a file of that owner (`check`): a file owned by a user may only hold
    that user's jobs, so a rewrite can never hand a delegated file's jobs to root.
    A link in the registry is refused, as the daemon refuses it. `mode` is a new root-owned
    file's mode instead of 0644 (`import` keeps a private crontab's `env:` private)."""
    mode, owner = check_write(target, data, like=like, check=check, mode=mode)
    fsutil.write_atomically(target, data, mode=mode, owner=owner)


def check_write(
    target: Path, data: bytes, *, like: os.stat_result | None = None, check: bool = True, mode: int | None = None
) -> tuple[int, tuple[int, int]]:
    """The (mode, (uid, gid)) `write_atomically` gives `target`, after its checks (raises
    CliError when the write must not happen); `import` asks it of every file first."""
    import stat as _stat

    try:
        st: os.stat_result | None = os.lstat(target)
    except FileNotFoundError:
        st = None
    if st is not None and not _stat.S_ISREG(st.st_mode):
        raise CliError(
            f"{target} is not a regular file (a link?); chronod refuses it and chronoctl will not write through it",
            "replace it with a regular file, or remove it",
        )
    shape = st or like
    if shape is not None:
        mode, owner = _stat.S_IMODE(shape.st_mode) & ~0o022, (shape.st_uid, shape.st_gid)
    else:
        mode, owner = (0o644 if mode is None else mode), (0, 0)
    if check:
        _check_as_owned(target, data, owner[0])
    return mode, owner


def _check_as_owned(target: Path, data: bytes, uid: int) -> None:
    from chronod.specfile import load_as_owned_by

    refused = [
        p
        for p in load_as_owned_by(data, str(target), uid, now=common.now_utc()).problems
        if p.severity == "error" and p.path in ("user", "group")
    ]
    if refused:
        from chronoctl.render import escape_line

        p = refused[0]
        raise InvalidInput(
            escape_line(f"{target}:{p.line}: job {p.job_id}: {p.message}; nothing was written"),
            escape_line(p.hint) if p.hint else None,
        )


def _remove(target: Path) -> None:
    fsutil.remove_durably(target)


# --- register -------------------------------------------------------------------------------


def register_file(
    file: Path = typer.Argument(..., metavar="FILE", help="A job file (*.yaml or *.yml)."),
    replace: bool = typer.Option(
        False,
        "--replace",
        help="Replace a registry file of the same name, and take over ids "
        "defined in other files whose jobs all move to FILE.",
    ),
    registry: Optional[Path] = _registry_option(),
    db: Optional[str] = db_option(),
    wait: float = _wait_option(),
    as_json: bool = json_option(),
) -> None:
    """Validate FILE, copy it into the registry atomically, make the daemon reload, and
    confirm that it took the jobs (or say that no daemon is running)."""
    from chronod.specfile import load_file, skip_decision

    common.check_paths_exist([file], "job file")
    now = common.now_utc()
    loaded = load_file(file, now=now, secure=False)
    _refuse_problems(loaded.problems)
    if not loaded.specs:
        raise InvalidInput(f"{file} defines no jobs", "a job file has a top-level `jobs:` list")
    reg_dir = common.registry_dir(registry)
    target = reg_dir / file.name
    ok, why = skip_decision(file.name)
    if not ok:
        raise UsageError(
            f"{file.name!r} cannot be a registry file name{': ' + why if why else ''}",
            "name it like billing.yaml: letters, digits, '_', '.', '-', ending in .yaml or .yml",
        )
    takeover = _collisions(reg_dir, target, loaded.specs, now, replace)
    reg_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    data, like = _read_with_owner(file)
    write_atomically(target, data, like=like)
    for other in takeover:
        _remove(other)
    ids = {s.id: s.spec_hash() for s in loaded.specs}
    outcome = _reload_and_confirm(db, lambda store, now: _took(store, ids), wait)
    _report("registered", target, sorted(ids), takeover, outcome, as_json)


def _read_with_owner(file: Path) -> tuple[bytes, os.stat_result]:
    """The bytes of `file` and the status (owner, mode) of the very file they were read
    from: one descriptor for both. Read by path twice, the file's owner could replace it by
    a link to a root-owned file between the read and the look at its owner, and a root
    `register` would then give their bytes (jobs without `user:`) to root."""
    import stat as _stat

    from chronod.specfile import MAX_FILE_BYTES

    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise CliError(f"cannot read {file}: {e.strerror}", "check the path and its permissions") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not _stat.S_ISREG(st.st_mode):
            raise CliError(f"{file} is not a regular file", "give a job file")
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise InvalidInput(f"{file} is larger than {MAX_FILE_BYTES} bytes", "split the jobs across several files")
    return data, st


def _refuse_problems(problems: list[Any]) -> None:
    errors = [p for p in problems if p.severity == "error"]
    if not errors:
        return
    import sys

    from chronoctl.render import escape_line

    for p in errors:
        where = f"{p.file}:{p.line}" if p.line else f"{p.file}"
        job = f" job {p.job_id}:" if p.job_id else ""
        field = f" {p.path}:" if p.path else ""
        sys.stderr.write(escape_line(f"{where}:{job}{field} {p.message}") + "\n")
        if p.hint:
            sys.stderr.write("  hint: " + escape_line(p.hint) + "\n")
    raise InvalidInput(
        f"{len(errors)} error(s); nothing was registered", "fix the file; `chronoctl validate FILE` checks it"
    )


def _collisions(reg_dir: Path, target: Path, specs: tuple["JobSpec", ...], now: datetime, replace: bool) -> list[Path]:
    """Other registry files to remove for `--replace`; refuse anything else that collides."""
    if target.exists() and not replace:
        raise CliError(f"{target} already exists", "give --replace to replace it")
    if not reg_dir.is_dir():
        return []
    existing = common.load([reg_dir], now, secure=False)
    ours = {s.id for s in specs}
    clashes: dict[str, list[str]] = {}
    for job_id, spec in existing.jobs.items():
        if job_id in ours and Path(spec.source_file) != target:
            clashes.setdefault(spec.source_file, []).append(job_id)
    if not clashes:
        return []
    described = "; ".join(f"{', '.join(ids)} in {f}" for f, ids in sorted(clashes.items()))
    if not replace:
        raise CliError(
            f"job id(s) already registered by other files: {described}",
            "rename the jobs, `chronoctl unregister` them first, or give --replace",
        )
    partial = [f for f, ids in clashes.items() if set(ids) != {s.id for s in existing.files[f].specs}]
    if partial:
        raise CliError(
            f"--replace would take only some jobs of {', '.join(sorted(partial))}: {described}",
            "move or unregister those jobs first; their files hold other jobs too",
        )
    return [Path(f) for f in sorted(clashes)]


def _took(store: Any, hashes: dict[str, str]) -> bool:
    for job_id, want in hashes.items():
        row = store.get_job(job_id)
        if row is None or row.removed_at is not None or row.spec_hash != want:
            return False
    return True


def _reload_and_confirm(db: str | None, done: Any, wait: float) -> dict[str, Any]:
    """Queue a reload, SIGHUP the local daemon, then poll `done(store, now)`."""
    try:
        with cmd_ops.opened(db) as store:
            now = common.now_utc()
            node = cmd_ops.local_daemon(store, now)
            live = cmd_ops.live_nodes(store, now)
            store.add_request("reload", None, {"requested_at": cmd_ops.iso(now)})
            woke = cmd_ops.wake(node, cmd_ops.SIG_RELOAD)
            if not live:
                return {"daemon": "none", "confirmed": False, "woke_local_daemon": False}
            confirmed = bool(cmd_ops.wait_for(lambda: done(store, common.now_utc()), wait, 0.2))
            return {"daemon": node.name if node else live[0].name, "confirmed": confirmed, "woke_local_daemon": woke}
    except CliError as exc:
        return {"daemon": "unknown", "confirmed": False, "woke_local_daemon": False, "database": exc.message}


def _report(
    verb: str, target: Path, ids: list[str], removed: list[Path], outcome: dict[str, Any], as_json: bool
) -> None:
    if as_json:
        from chronoctl.render import print_json

        return print_json(
            {"action": verb, "file": str(target), "jobs": ids, "removed_files": [str(p) for p in removed], **outcome}
        )
    from chronoctl.render import echo, escape_line

    echo(escape_line(f"{verb} {', '.join(ids)} ({target})"))
    for p in removed:
        moved = f"its jobs moved to {target.name}" if verb == "registered" else "it held no other job"
        echo(escape_line(f"removed {p} ({moved})"))
    if outcome["confirmed"]:
        echo(escape_line(f"chronod on {outcome['daemon']} took it"))
    elif outcome["daemon"] == "none":
        echo("no chronod is running; the change applies when chronod starts")
    elif outcome["daemon"] == "unknown":
        echo(
            escape_line(
                f"could not check the daemon ({outcome.get('database')}); the change applies on its next reload"
            )
        )
    else:
        echo(
            escape_line(
                f"chronod on {outcome['daemon']} has not confirmed yet; check `chronoctl status` for registry errors"
            )
        )
        raise typer.Exit(EXIT_NO)


# --- unregister ----------------------------------------------------------------------------------


def unregister(
    job: str = typer.Argument(..., metavar="JOB", help="A job id.", autocompletion=_complete.job_ids),
    force: bool = typer.Option(False, "--force", help="Rewrite a file that holds other jobs too (loses its comments)."),
    registry: Optional[Path] = _registry_option(),
    db: Optional[str] = db_option(),
    wait: float = _wait_option(),
    as_json: bool = json_option(),
) -> None:
    """Take a job out of the registry (its file, when it is the file's only job), reload, confirm."""
    now = common.now_utc()
    reg_dir = common.registry_dir(registry)
    spec = common.find_job(reg_dir, job, now)
    source = Path(spec.source_file)
    siblings = common.load([source], now, secure=False).files[str(source)].specs
    if len(siblings) == 1:
        _remove(source)
        removed = [source]
    elif not force:
        raise CliError(
            f"{source} holds {len(siblings)} jobs; rewriting it would lose its comments",
            f"delete job {job!r} from {source} by hand, or give --force to rewrite the file without it",
        )
    else:
        write_atomically(source, _without(source, job))
        removed = []
    outcome = _reload_and_confirm(db, lambda store, now: _gone(store, job), wait)
    _report("unregistered", source, [job], removed, outcome, as_json)


def _without(source: Path, job_id: str) -> bytes:
    import yaml

    doc = yaml.safe_load(source.read_bytes())
    doc["jobs"] = [j for j in doc.get("jobs") or [] if not (isinstance(j, dict) and j.get("id") == job_id)]
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True).encode()


def _gone(store: Any, job_id: str) -> bool:
    row = store.get_job(job_id)
    return row is None or row.removed_at is not None


# --- list ---------------------------------------------------------------------------------------


def list_jobs(
    registry: Optional[Path] = _registry_option(),
    db: Optional[str] = db_option(),
    as_json: bool = json_option(),
    wide: bool = cmd_ops.wide_option(),
    utc: bool = cmd_ops.utc_option(),
) -> None:
    """The overview: per job its schedule in words, last run (state, time, how long it
    took), next fire (local time and how soon), owner, tags. Jobs come from the registry
    and the database (a fleet's other nodes). Warns when no chronod has a fresh heartbeat."""
    now = common.now_utc()
    reg_dir = common.registry_dir(registry)
    specs: dict[str, Any] = {}
    problems = []
    windows: list[Any] = []
    if reg_dir.is_dir():
        loaded = common.load([reg_dir], now, secure=False)
        specs.update({i: (s, "registry") for i, s in loaded.jobs.items()})
        problems = [p for p in loaded.problems if p.severity == "error"]
        windows = list(loaded.blackouts)
    state = _db_state(db, now, specs)
    state["windows"] = windows
    rows = [_list_row(spec, where, state, now) for _, (spec, where) in sorted(specs.items())]
    if as_json:
        from chronoctl.render import print_json

        return print_json(
            {"jobs": rows, "registry": str(reg_dir), "database": state.get("error"), "registry_errors": len(problems)}
        )
    _print_list(rows, now, state, problems, wide)


def _db_state(db: str | None, now: datetime, specs: dict[str, Any]) -> dict[str, Any]:
    try:
        with cmd_ops.opened(db) as store:
            for row in store.jobs():
                specs.setdefault(row.job_id, (row.spec, "database"))
            from chronod.core.history import hold_of
            from chronod.store import status as views
            from chronod.store.audit import pauses

            paused = store.paused_jobs()
            last, waiting = {}, {}
            for job_id in specs:
                found = store.runs(job_id, until=now, limit=5)
                done = [r for r in found if r.state not in ("pending", "retry_wait")]
                if done:
                    last[job_id] = done[0]
                for r in found:  # an occurrence due and waiting in its resource's line
                    hold = hold_of(r, None, (), now)
                    if hold is not None and hold.kind == "resource":
                        waiting[job_id] = hold
                        break
            nodes = store.nodes()
            health = views.health(store, now)
            return {
                "paused": paused,
                "pauses": pauses(store),
                "health": health,
                "last": last,
                "waiting": waiting,
                "alive": health.exit_code != 3,
                "nodes": len(nodes),
                "node_names": sorted(n.name for n in nodes),
                "heartbeat": max((n.heartbeat_at for n in nodes), default=None),
            }
    except CliError as exc:
        return {"paused": {}, "pauses": [], "last": {}, "node_names": [], "error": exc.message}


def _list_row(spec: Any, where: str, state: dict[str, Any], now: datetime) -> dict[str, Any]:
    from chronod.core import occurrence
    from chronod.core.blackout import held

    sched = common.schedule_of(spec)
    places = occurrence.placements(spec, state["node_names"]) or [common.placement(spec, None)]
    per_node = [(p, p.next_after(sched, now) if spec.enabled else None) for p in places]
    upcoming = [o for _, o in per_node if o is not None]
    nxt = min(upcoming, key=lambda o: o.fire_at) if upcoming else None
    last = state["last"].get(spec.id)
    hold = held(spec, state["pauses"], state.get("windows", ()), nxt.fire_at) if nxt else None
    hold = hold or state.get("waiting", {}).get(spec.id)  # a due occurrence waits for a slot
    return {
        "job_id": spec.id,
        "owner": spec.owner,
        "schedule": spec.schedule,
        "timezone": spec.timezone,
        "schedule_words": sched.describe(),
        "enabled": spec.enabled,
        "run_on": spec.run_on.mode,
        "next_fire_at": cmd_ops.iso(nxt.fire_at) if nxt else None,
        "next_node": nxt.node if nxt else None,
        "nodes": [
            {"node": p.node, "jitter_offset_s": p.offset_s, "next_fire_at": cmd_ops.iso(o.fire_at) if o else None}
            for p, o in per_node
            if p.node
        ],
        "last_state": last.state if last else None,
        "last_scheduled_at": cmd_ops.iso(last.scheduled_at) if last else None,
        "last_started_at": cmd_ops.iso(last.started_at) if last else None,
        "last_duration_s": cmd_ops.duration_s(last) if last else None,
        "last_run_id": last.run_id if last else None,
        "tags": list(spec.tags),
        "paused": hold is not None and hold.kind == "pause",
        "paused_reason": hold.reason if hold is not None and hold.kind == "pause" else None,
        "held": cmd_ops.hold_json(hold),
        "source": where,
        "file": spec.source_file or None,
    }


def _table_row(r: dict[str, Any], now: datetime) -> dict[str, Any]:
    from chronoctl.render import age, relative, short_time

    nxt = datetime.fromisoformat(r["next_fire_at"]) if r["next_fire_at"] else None
    last_at = r["last_started_at"] or r["last_scheduled_at"]
    hold = r["held"]
    when = "disabled" if not r["enabled"] else (relative(nxt, now) if nxt else "never")
    if hold:
        when = {"pause": "HELD", "resource": "WAITING"}.get(hold["kind"], "WINDOW")
    elif nxt and r["next_node"]:
        when += f" on {r['next_node']}"  # a job on each node: the node that fires first
    return dict(
        r,
        schedule_words=_shorten(r["schedule_words"], SCHEDULE_WORDS),
        next=short_time(nxt, now) if nxt else None,
        due=when,
        last_at=short_time(datetime.fromisoformat(last_at), now) if last_at else None,
        took=age(r["last_duration_s"]) if r["last_duration_s"] is not None else None,
        tags=",".join(r["tags"]) or None,
        last=r["last_state"],
    )


SCHEDULE_WORDS = 28  # a schedule in words longer than this is shortened in `list` (whole in `show`)


def _shorten(text: str, width: int) -> str:
    """`text`, or its first words that fit in `width` with an ellipsis after them."""
    if len(text) <= width:
        return text
    cut = text[: width - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "\u2026"


def _print_list(
    rows: list[dict[str, Any]], now: datetime, state: dict[str, Any], problems: list[Any], wide: bool
) -> None:
    from chronoctl.render import Column, echo_wrapped, escape_line, print_table, warn, zone_note

    # On a narrow terminal NEXT, IN and OWNER stay (what an on-call engineer reads first);
    # tags, how long the last run took and when it ran go first.
    cols = (
        Column("job_id", "ID"),
        Column("schedule_words", "SCHEDULE", drop=4),
        Column("last", "LAST", drop=5),
        Column("last_at", "AT", drop=7),
        Column("took", "TOOK", "right", drop=8),
        Column("next", "NEXT", drop=1),
        Column("due", "IN"),
        Column("owner", drop=2),
        Column("tags", drop=9),
    )
    table = [_table_row(r, now) for r in rows]
    if wide:
        table = [dict(t, schedule_words=r["schedule_words"]) for t, r in zip(table, rows)]
    print_table(table, cols, title=f"jobs ({zone_note(now)})", empty="(no jobs)", wide=wide)
    for r in rows:
        if r["held"]:
            echo_wrapped(escape_line(f"{r['job_id']}: {cmd_ops.held_text(r['held'], now)}"))
    if state.get("error"):
        warn(f"{state['error']}: last states and pauses unknown")
    elif not state.get("alive"):
        health = state["health"]
        why = "; ".join(health.reasons[1:]) or "no chronod has ever run on this database"
        warn(f"no live chronod, the daemon is down ({why}): nothing runs until one starts; NEXT is when jobs would run")
    if problems:
        warn(f"{len(problems)} registry error(s): run `chronoctl validate` on the registry")
