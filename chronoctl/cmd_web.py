"""`web`: the web console over the store (chronoctl.web), served by waitress."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from chronoctl.cmd_ops import db_option

DEFAULT_LISTEN = "127.0.0.1:8470"


def register(app: typer.Typer) -> None:
    """Add `web` to `app`."""
    app.command("web")(web)


def web(
    listen: str = typer.Option(
        DEFAULT_LISTEN,
        "--listen",
        metavar="HOST:PORT",
        help="Where to listen (default 127.0.0.1:8470). A non-loopback address needs --token-file or "
        "--trusted-proxy with --user-header.",
    ),
    token_file: Optional[Path] = typer.Option(
        None,
        "--token-file",
        metavar="FILE",
        help="Sign-in tokens, one `NAME TOKEN` a line (mode 600); NAME is recorded for actions.",
    ),
    trusted_proxy: Optional[List[str]] = typer.Option(
        None,
        "--trusted-proxy",
        metavar="ADDR",
        help="The address of a reverse proxy that authenticates users (repeatable); with --user-header.",
    ),
    user_header: Optional[str] = typer.Option(
        None, "--user-header", metavar="NAME", help="The header the trusted proxy puts the user name in."
    ),
    proxy_user: Optional[List[str]] = typer.Option(
        None,
        "--proxy-user",
        metavar="USER",
        help="The account a trusted proxy on a loopback address runs as (repeatable): only its "
        "connections are believed; required for such a proxy.",
    ),
    allow_actions: bool = typer.Option(
        False, "--allow-actions", help="Offer pause, resume and run-now to signed-in users (read-only otherwise)."
    ),
    threads: int = typer.Option(4, "--threads", min=1, max=64, help="Requests served at once."),
    db: Optional[str] = db_option(),
) -> None:
    """Serve the web console: jobs, nodes' health, each job's 90-day heat map, runs and their
    output, missed occurrences and backfills. Loopback only and read-only unless told otherwise."""
    from chronoctl import cmd_ops
    from chronoctl.errors import UsageError
    from chronoctl.render import echo
    from chronoctl.web.access import check_listen, make_access, parse_listen

    host, port = parse_listen(listen)
    access = make_access(token_file, list(trusted_proxy or []), user_header, list(proxy_user or []))
    check_listen(host, access)
    if allow_actions and not access.configured:
        raise UsageError(
            "--allow-actions needs to know who acts: add --token-file FILE (or --trusted-proxy with --user-header)",
            "a console nobody signs in to stays read-only",
        )
    url = cmd_ops.db_url(db)
    with cmd_ops.opened(db) as store:
        from waitress.server import create_server

        from chronoctl.web.app import create_app

        app = create_app(store, access=access, allow_actions=allow_actions, db_url=url)
        try:
            server = create_server(app, host=host, port=port, threads=threads, ident="chrono")
        except OSError as exc:
            raise UsageError(f"--listen {listen}: {exc.strerror or exc}", "choose another port with --listen") from None
        shown = f"[{host}]" if ":" in host else host
        real_port = server.effective_port
        how = "read-only" if not allow_actions else "actions allowed"
        who = "loopback, no sign-in" if not access.configured else "sign-in required"
        echo(f"chrono web console on http://{shown}:{real_port}/ ({how}; {who}); database {store.url_safe}", sys.stderr)
        sys.stderr.flush()
        try:
            server.run()
        except KeyboardInterrupt:
            pass
        finally:
            server.close()
