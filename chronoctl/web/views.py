"""The console's pages. Each asks the store through the functions chronoctl's commands
use and hands their answers to a template."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from flask import Flask, abort, current_app, g, jsonify, redirect, render_template, request, session, url_for

from chronoctl.web import heatmap
from chronoctl.web.app import LIVE_CHUNK, PAGE, STATES, check_csrf, day_bounds
from chronod.core.escape import escape_control

if TYPE_CHECKING:
    from chronod.store.api import Store

WAITING = ("pending", "retry_wait")  # not a run's outcome yet: `chronoctl list` looks past them


def _store() -> Any:
    return current_app.extensions["chrono"]["store"]


def _actions_on() -> bool:
    return bool(current_app.extensions["chrono"]["actions"])


def register(app: Flask) -> None:
    app.add_url_rule("/", "overview", overview)
    app.add_url_rule("/job/<path:job_id>/day/<day>", "day", day_page)
    app.add_url_rule("/job/<path:job_id>/pause", "pause", pause, methods=["POST"])
    app.add_url_rule("/job/<path:job_id>/resume", "resume", resume, methods=["POST"])
    app.add_url_rule("/job/<path:job_id>/trigger", "trigger", trigger, methods=["POST"])
    app.add_url_rule("/job/<path:job_id>", "job", job_page)
    app.add_url_rule("/run/<run_id>", "run", run_page)
    app.add_url_rule("/run/<run_id>/live", "live", run_live)
    app.add_url_rule("/missed", "missed", missed_page)
    app.add_url_rule("/backfills", "backfills", backfills_page)
    app.add_url_rule("/login", "login", login, methods=["GET", "POST"])
    app.add_url_rule("/logout", "logout", logout, methods=["POST"])
    app.register_error_handler(400, _error)
    app.register_error_handler(401, _error)
    app.register_error_handler(403, _error)
    app.register_error_handler(404, _error)
    app.register_error_handler(405, _error)
    app.register_error_handler(409, _error)
    app.register_error_handler(421, _error)
    from sqlalchemy.exc import SQLAlchemyError

    from chronod.store.api import StoreError

    app.register_error_handler(StoreError, _store_failed)
    app.register_error_handler(SQLAlchemyError, _store_failed)


def _error(e: Any) -> Any:
    return render_template("error.html", code=e.code, message=e.description), e.code


def _store_failed(e: Exception) -> Any:
    """The database failed (unreachable, locked, a schema another chrono changed): say which
    database and what it said, without its password; the next request tries again."""
    from chronoctl.cmd_ops import _safe

    first = (str(e).splitlines() or [type(e).__name__])[0]
    message = f"the database {_store().url_safe} failed: {_safe(first)}"
    current_app.logger.error(message)
    return render_template("error.html", code=503, message=message), 503


# --- the overview ---------------------------------------------------------------------------


def overview() -> Any:
    from chronoctl import cmd_registry
    from chronod.store import status
    from chronod.store.audit import pauses

    store, now = _store(), g.now
    q = request.args.get("q", "").strip()
    tag = request.args.get("tag", "").strip()
    owner = request.args.get("owner", "").strip()
    state = request.args.get("state", "all")
    if state not in STATES:
        state = "all"
    page = max(1, request.args.get("page", 1, type=int) or 1)

    rows = _jobs(store)
    all_tags = sorted({t for r in rows for t in r.spec.tags})
    all_owners = sorted({r.spec.owner for r in rows})
    chosen = [
        r
        for r in rows
        if (not tag or tag in r.spec.tags)
        and (not owner or r.spec.owner == owner)
        and (not q or q.lower() in r.job_id.lower() or q.lower() in (r.spec.description or "").lower())
    ]
    nodes = store.nodes()
    health = status.health(store, now)
    running = {r.job_id for r in store.running()}
    in_force = status.pauses_in_force(store, rows, now)
    # Each job's row (last run, next fire, hold) costs a little: the states that a cheap
    # fact decides are filtered first, and only the page shown is computed in full.
    if state == "held":
        held = status.held_jobs(rows, in_force)
        chosen = [r for r in chosen if r.job_id in held]
    elif state == "running":
        chosen = [r for r in chosen if r.job_id in running]
    elif state == "disabled":
        chosen = [r for r in chosen if not r.spec.enabled]
    if state in ("failing", "ok", "never"):  # decided by each job's last run: its state, for them all
        states = _last_states(store, [r.job_id for r in chosen], now)
        chosen = [r for r in chosen if _last_matches(states.get(r.job_id), r, state, in_force)]
    pages = max(1, -(-len(chosen) // PAGE))
    page = min(page, pages)
    shown = chosen[(page - 1) * PAGE : page * PAGE]
    last = _last_runs(store, [r.job_id for r in shown], now)
    shared = {
        "pauses": pauses(store),  # as `chronoctl list`: a pause holds the next fire it covers
        "node_names": sorted(n.name for n in nodes),
        "last": last,
        "windows": [],
    }
    listed = [cmd_registry._list_row(r.spec, "database", shared, now) for r in shown]
    for row in listed:
        row["running"] = row["job_id"] in running
        row["next_at"] = datetime.fromisoformat(row["next_fire_at"]) if row["next_fire_at"] else None
        row["last_at"] = (
            datetime.fromisoformat(row["last_started_at"] or row["last_scheduled_at"])
            if row["last_scheduled_at"]
            else None
        )
    return render_template(
        "overview.html",
        health=health,
        jobs=listed,
        matched=len(chosen),
        total=len(rows),
        page=page,
        pages=pages,
        all_tags=all_tags,
        all_owners=all_owners,
        states=STATES,
        f={"q": q, "tag": tag, "owner": owner, "state": state},
        running_count=len(running),
    )


def _jobs(store: Any) -> list[Any]:
    """The registered jobs, sorted by id. While the jobs table is unchanged (the store's
    `jobs_version`: any definition, removal or pause changes it) and no pause read has
    since run out, the rows of the last request are reused; otherwise the specs unchanged
    since then are (the store compares their hashes) rather than parsed again."""
    chrono = current_app.extensions["chrono"]
    version = store.jobs_version() if hasattr(store, "jobs_version") else None
    cached = chrono.get("jobs")
    if version is not None and cached is not None and cached[0] == version:
        if not any(r.paused and r.paused_until is not None and r.paused_until <= g.now for r in cached[1]):
            return list(cached[1])
    known = {r.job_id: r.spec for r in cached[1]} if cached else None
    rows = sorted(store.jobs(known=known), key=lambda r: r.job_id)
    chrono["jobs"] = (version, rows)
    return list(rows)


def _last_runs(store: "Store", job_ids: list[str], now: datetime) -> dict[str, Any]:
    """Each job's latest run that is not waiting, as `chronoctl list` shows it."""
    return dict(store.last_runs(job_ids, until=now, skip=WAITING))


def _last_states(store: "Store", job_ids: list[str], now: datetime) -> dict[str, str]:
    """The state of each job's run `_last_runs` gives."""
    return dict(store.last_states(job_ids, until=now, skip=WAITING))


def _last_matches(last_state: str | None, row: Any, state: str, in_force: Any) -> bool:
    from chronod.store.status import FAILING, held_jobs

    if state == "never":
        return last_state is None
    if state == "failing":
        return last_state in FAILING
    return last_state == "succeeded" and row.job_id not in held_jobs([row], in_force)


# --- a job ----------------------------------------------------------------------------------


def _row(job_id: str) -> Any:
    row = _store().get_job(job_id)
    if row is None:
        abort(404, f"no job {job_id!r} in the database")
    return row


def job_page(job_id: str) -> Any:
    from chronod.core.report import TooLong
    from chronod.store import audit, status

    store, now = _store(), g.now
    row = _row(job_id)
    js = status.job_status(store, row, now)
    sched = audit.schedule_of(row.spec)
    cells: list[Any] = []
    totals: dict[str, int] = {}
    too_long = None
    shown = heatmap.days_shown(sched, now)
    start, end = heatmap.period(now.date(), shown)
    try:
        rep = audit.report(store, row.spec, start, end, now, schedule=sched)
        cells, totals = heatmap.days(rep.lines, start, end), rep.totals
    except TooLong as e:
        too_long = str(e)
    answer = audit.did_it_run(store, row, now, schedule=sched)
    since = now - timedelta(days=1)
    found = store.runs(job_id, since=since - timedelta(seconds=1), until=now + timedelta(seconds=1))
    misses = audit.missed(store, [row], since, now, found, None, store.pruned([job_id]))
    runs = store.runs(job_id, until=now + timedelta(days=1), limit=50)
    return render_template(
        "job.html",
        row=row,
        js=js,
        spec=row.spec,
        spec_json=_spec_shown(row.spec),
        weeks=heatmap.weeks(cells),
        days=cells,
        totals=totals,
        too_long=too_long,
        shown=shown,
        start=start,
        end=end,
        answer=answer,
        misses=misses,
        runs=runs,
    )


def _spec_shown(spec: Any) -> list[tuple[str, str]]:
    """The spec as chrono runs it, one field a line; `env` values are not shown (a job's
    environment may hold secrets; `chronoctl show` reads it where the file may be read)."""
    import json

    d = spec.to_json_dict()
    if d.get("env"):
        d["env"] = {k: "(hidden)" for k, _ in spec.env}
    out = []
    for k, v in d.items():
        if v in (None, "", [], {}, ()):
            continue
        out.append((k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)))
    return out


def day_page(job_id: str, day: str) -> Any:
    from chronod.store import audit

    store, now = _store(), g.now
    row = _row(job_id)
    try:
        d = date.fromisoformat(day)
    except ValueError:
        abort(404, f"{day!r} is not a date (YYYY-MM-DD)")
    start, end = day_bounds(d)
    rep = audit.report(store, row.spec, start, end, now)
    return render_template("day.html", row=row, day=d, rep=rep, lines=rep.lines, totals=rep.totals)


# --- a run ----------------------------------------------------------------------------------


def _run(run_id: str) -> Any:
    store = _store()
    run = store.get_run(run_id)
    if run is None:
        found = store.runs_by_prefix(run_id, limit=2) if len(run_id) >= 4 else []
        if len(found) == 1:
            return found[0]
        abort(404, f"no run {run_id!r} in the database")
    return run


def run_page(run_id: str) -> Any:
    from chronoctl import cmd_ops

    store = _store()
    run = _run(run_id)
    attempts = store.attempts(run.run_id)
    return render_template(
        "run.html",
        run=run,
        attempts=attempts,
        took=cmd_ops.duration_s(run),
        live=run.state == "running",
    )


def run_live(run_id: str) -> Any:
    """What a running attempt has printed from `offset` on (JSON for static/live.js)."""
    from chronoctl import output
    from chronoctl.errors import CliError

    store = _store()
    run = _run(run_id)
    offset = max(0, request.args.get("offset", 0, type=int) or 0)
    attempt = request.args.get("attempt", run.attempts, type=int) or run.attempts
    data, note = b"", ""
    if run.state == "running" and attempt == run.attempts:
        try:
            path = output.live_file(store, run, attempt, current_app.extensions["chrono"]["db_url"])
            data = output.read_live(path, offset)[:LIVE_CHUNK]
        except CliError as e:
            note = e.message
    elif attempt >= 1:
        tail, total = output.stored(store, run, attempt)
        shown, lost = output.missing_part(tail, total, offset)
        shown = escape_control(shown)
        return jsonify(
            {
                "text": shown,
                "offset": total,
                "state": run.state,
                "done": True,
                "note": f"{lost} bytes not kept" if lost else "",
            }
        )
    data = _whole_characters(data)
    text = escape_control(data.decode("utf-8", "backslashreplace"))
    return jsonify({"text": text, "offset": offset + len(data), "state": run.state, "done": False, "note": note})


def _whole_characters(data: bytes) -> bytes:
    """`data` without a UTF-8 character cut at its end (the next poll reads it whole)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.reason == "unexpected end of data":
            return data[: e.start]
    return data


# --- missed and backfills -------------------------------------------------------------------


def missed_page() -> Any:
    from chronoctl import common
    from chronoctl.cmd_history import _silent
    from chronoctl.errors import CliError
    from chronod.core import history
    from chronod.store import audit

    store, now = _store(), g.now
    since_text = request.args.get("since", "24h").strip() or "24h"
    try:
        start = common.parse_since(since_text, now)
    except CliError as e:
        abort(400, e.message)
    rows = [j for j in store.jobs() if j.removed_at is None]
    found, marks = audit.window(store, start - timedelta(seconds=1), now + timedelta(seconds=1))
    silent = _silent(store, rows, now, marks if marks is not None else found)
    pruned = store.pruned()
    misses = audit.missed(store, rows, start, now, found, marks, pruned)
    groups = history.group_by_owner(misses)
    return render_template(
        "missed.html", since=start, since_text=since_text, groups=groups, silent=silent, count=len(misses)
    )


def backfills_page() -> Any:
    store = _store()
    return render_template("backfills.html", backfills=store.backfills())


# --- actions --------------------------------------------------------------------------------


def _may_act() -> str:
    if not _actions_on():
        abort(403, "refused: this console is read-only (start it with --allow-actions to pause, resume, trigger)")
    if g.user is None:
        abort(403, "refused: actions need a signed-in user (--token-file or --trusted-proxy)")
    check_csrf()
    return str(g.user)


def pause(job_id: str) -> Any:
    by = _may_act()
    store = _store()
    row = _row(job_id)
    reason = (request.form.get("reason") or "").strip()
    if not reason:
        abort(400, "a pause needs a reason (it is shown by status and did-it-run)")
    reason = reason[:500]
    if not row.paused:
        store.set_paused(row.job_id, True, reason, by=by, until=None)
        _wake()
    return redirect(url_for("job", job_id=row.job_id))


def resume(job_id: str) -> Any:
    _may_act()
    store = _store()
    row = _row(job_id)
    if row.paused:
        store.set_paused(row.job_id, False, None)
        _wake()
    return redirect(url_for("job", job_id=row.job_id))


def trigger(job_id: str) -> Any:
    from chronoctl import cmd_ops
    from chronod.core.occurrence import manual_run_id

    by = _may_act()
    store, now = _store(), g.now
    row = _row(job_id)
    if not cmd_ops.live_nodes(store, now):
        abort(409, "no chronod is running against this database; nothing was queued")
    rid = None if row.spec.run_on.each else manual_run_id(row.job_id, now)
    payload = {"requested_at": cmd_ops.iso(now), "force": False, "run_id": rid, "user": by}
    store.add_request("trigger", row.job_id, payload)
    _wake(cmd_ops.SIG_REQUESTS)
    return redirect(url_for("job", job_id=row.job_id))  # the manual run shows in its runs once taken


def _wake(sig: int | None = None) -> None:
    from chronoctl import cmd_ops

    store = _store()
    cmd_ops.wake(cmd_ops.local_daemon(store, g.now), sig if sig is not None else cmd_ops.SIG_REQUESTS)


# --- signing in -----------------------------------------------------------------------------


def login() -> Any:
    from flask import current_app as app

    access = app.extensions["chrono"]["access"]
    if not access.tokens:
        return redirect(url_for("overview"))
    error = None
    if request.method == "POST":
        check_csrf()
        name = access.name_for_token((request.form.get("token") or "").strip())
        if name is not None:
            csrf = session.get("csrf")
            session.clear()
            session["user"] = name
            session["csrf"] = csrf
            nxt = request.args.get("next", "/")
            return redirect(nxt if nxt.startswith("/") and not nxt.startswith("//") else "/")
        error = "that token is not one of this console's"
    return render_template("login.html", error=error), (401 if error else 200)


def logout() -> Any:
    check_csrf()
    session.clear()
    return redirect(url_for("login"))
