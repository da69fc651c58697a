"""The web console: Flask views over the store's query functions.

Every answer comes from the functions chronoctl's commands use (chronod.store.status,
chronod.store.audit, chronod.core.report, chronoctl.cmd_registry's list rows, chronoctl.output
for a run's output): the console renders them as HTML and judges nothing itself.
Templates auto-escape; text from jobs, files and output also has its control characters
escaped (chronod.core.escape) so it reads as it does in a terminal.
"""

from __future__ import annotations

import os
import secrets
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Callable

from flask import Flask, abort, g, redirect, request, session, url_for
from markupsafe import Markup

from chronoctl.web import heatmap
from chronoctl.web.access import LOOPBACK_NAMES, Access
from chronod.core.escape import escape_control

HERE = Path(__file__).parent
LIVE_CHUNK = 64 * 1024  # the most output bytes one live poll returns
PAGE = 200  # jobs per overview page
STATES = ("all", "failing", "held", "running", "ok", "never", "disabled")

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def create_app(
    store: Any,
    *,
    access: Access | None = None,
    allow_actions: bool = False,
    clock: Callable[[], datetime] | None = None,
    db_label: str | None = None,
    db_url: str | None = None,
) -> Flask:
    """The console over `store` (an open Store); `clock` gives now (UTC) for tests."""
    from chronoctl import common

    app = Flask(__name__, template_folder=str(HERE / "templates"), static_folder=str(HERE / "static"))
    app.secret_key = secrets.token_bytes(32)  # sessions last as long as the process
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_NAME="chrono_session",
        MAX_CONTENT_LENGTH=64 * 1024,
    )
    access = access or Access()
    now_of = clock or common.now_utc
    app.extensions["chrono"] = {
        "store": store,
        "access": access,
        "actions": allow_actions,
        "db_url": db_url or store.url_safe,
    }

    app.jinja_env.filters["t"] = lambda v: "" if v is None else escape_control(v)
    app.jinja_env.filters["when"] = _when
    app.jinja_env.filters["took"] = _took
    app.jinja_env.filters["short"] = lambda rid: (rid or "")[:8]
    app.jinja_env.globals["LEVEL_WORDS"] = heatmap.LEVEL_WORDS

    @app.before_request
    def _who() -> Any:
        g.now = now_of()
        g.user = None
        g.via_bearer = False
        if request.endpoint == "static":
            return None
        if not access.configured:
            if host_name(request.host or "") not in LOOPBACK_NAMES:
                abort(421, "this console answers only to a loopback address (localhost, 127.0.0.1, [::1])")
            if not access.local_user_allowed(request.environ):
                abort(
                    403,
                    f"this console has no sign-in, so it answers only to {_console_user()} on this host "
                    "(the ledger is private); ask for a console with --token-file",
                )
            return None
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and access.tokens:
            g.user = access.name_for_token(auth[7:].strip())
            g.via_bearer = g.user is not None
        if g.user is None:
            g.user = access.proxy_user(request.remote_addr, request.headers, request.environ.get("REMOTE_PORT"))
        if g.user is None and session.get("user") and access.tokens:
            g.user = session["user"]
        if g.user is None and request.endpoint not in ("login",):
            if access.tokens:
                return redirect(url_for("login", next=request.full_path if request.method == "GET" else "/"))
            abort(401, "sign in through the reverse proxy")
        return None

    @app.after_request
    def _headers(resp: Any) -> Any:
        h = resp.headers
        h["Content-Security-Policy"] = CSP
        h["X-Frame-Options"] = "DENY"
        h["X-Content-Type-Options"] = "nosniff"
        h["Referrer-Policy"] = "same-origin"  # no-referrer would make browsers send `Origin: null` on our own forms
        h["Cross-Origin-Opener-Policy"] = "same-origin"
        if request.endpoint != "static":
            h["Cache-Control"] = "no-store"
        return resp

    @app.context_processor
    def _common() -> dict[str, Any]:
        return {
            "now": g.get("now"),
            "user": g.get("user"),
            "actions": allow_actions and g.get("user") is not None,
            "csrf": lambda: Markup(f'<input type="hidden" name="csrf" value="{_csrf_token()}">'),
            "db_label": db_label or store.url_safe,
        }

    from chronoctl.web import views

    views.register(app)
    return app


def _console_user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _csrf_token() -> str:
    tok = session.get("csrf")
    if not tok:
        tok = session["csrf"] = secrets.token_urlsafe(32)
    return str(tok)


def check_csrf() -> None:
    """A POST from a browser must carry the session's CSRF token and, when it says where
    it comes from, come from this origin (a request with a bearer token needs neither)."""
    import hmac

    if g.get("via_bearer"):
        return
    from urllib.parse import urlsplit

    origin = request.headers.get("Origin")
    # host and port only: behind a TLS proxy the scheme the browser used is not ours
    if origin and urlsplit(origin).netloc != request.host:
        abort(403, "refused: the request came from another site (Origin does not match)")
    given = request.form.get("csrf", "")
    want = session.get("csrf", "")
    if not given or not want or not hmac.compare_digest(str(given), str(want)):
        abort(403, "refused: the form's CSRF token is missing or stale; reload the page and try again")


def host_name(host: str) -> str:
    """The name in a Host header, without its port (`[::1]:8470` -> `[::1]`)."""
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0]


def _when(at: datetime | None) -> str:
    if at is None:
        return "—"
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def _took(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    from chronoctl.render import age

    return str(age(seconds))


def day_bounds(d: date) -> tuple[datetime, datetime]:
    start, _ = heatmap.period(d, 1)
    return start, start + timedelta(days=1)
