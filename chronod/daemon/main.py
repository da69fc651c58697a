"""chronod's composition root: parse options, wire clock, store, runner and loop, run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from chronod import __version__, fsutil, paths

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_CONFIG = 78  # EX_CONFIG: systemd will not restart-loop on a configuration error


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="chronod", description="Run chrono jobs: DST-correct schedules, a history that survives crashes.")
    p.add_argument("--registry", action="append", type=Path,
                   help="registry directory or file (repeatable; default: $CHRONO_REGISTRY or the §8 path)")
    p.add_argument("--db", default=None, help="SQLAlchemy URL or SQLite file path (default: $CHRONO_DB)")
    p.add_argument("--node", default=None, help="this node's name (default: the short host name)")
    p.add_argument("--metrics-addr", default=os.environ.get("CHRONO_METRICS_ADDR"),
                   help="serve Prometheus metrics on HOST:PORT")
    p.add_argument("--state-dir", type=Path, default=None,
                   help="where run supervisors leave their result files (default: beside the SQLite file)")
    p.add_argument("--lease-ttl", type=float, default=None,
                   help="lease time-to-live in seconds (default: 600 on SQLite, 15 on PostgreSQL)")
    p.add_argument("--insecure-registry", action="store_true",
                   help="skip the ownership and mode checks on registry files even when running as root")
    p.add_argument("--version", action="version", version=f"chronod {__version__}")
    return p.parse_args(argv)


def fail(message: str, code: int) -> int:
    sys.stderr.write(f"chronod: error: {message}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    """Start chronod in the foreground; returns the process exit status."""
    args = parse_args(argv)
    registry = args.registry or [paths.default_registry()]
    db = args.db or paths.default_db()
    node = args.node or paths.default_node()
    for r in registry:
        if not r.exists():
            return fail(f"registry {r} does not exist: create it (mkdir -p {r}) or pass --registry DIR", EXIT_CONFIG)
    from chronod.core.clock import Clock
    from chronod.daemon import kernel
    from chronod.daemon.log import Log
    from chronod.daemon.loop import Daemon
    from chronod.daemon.waker import Waker
    from chronod.daemon.metrics import Metrics
    from chronod.daemon.sysd import Notifier
    from chronod.runner.runner import Runner
    from chronod.specfile import FileCache, load_registry
    from chronod.store.api import NodeConflict, SchemaTooNew, SchemaTooOld, StoreError, open_store

    log = Log(timestamps="JOURNAL_STREAM" not in os.environ)
    clock = Clock()
    secure = os.geteuid() == 0 and not args.insecure_registry
    try:
        store = open_store(db)
        try:
            store.check_schema()
        except SchemaTooOld:
            store.upgrade()  # under a lock: several nodes may start at once
    except SchemaTooNew as e:
        return fail(str(e), EXIT_CONFIG)
    except StoreError as e:
        return fail(str(e), EXIT_UNAVAILABLE)
    state_dir = args.state_dir or paths.default_state_dir(db)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ttl = args.lease_ttl or (600.0 if store.dialect == "sqlite" else 15.0)
    metrics = Metrics()
    files = FileCache()  # a reload re-validates only the files that changed
    if args.metrics_addr:
        metrics.serve(args.metrics_addr)
    daemon = Daemon(
        clock=clock, store=store, runner=Runner(state_dir, zygote=True),
        load_registry=lambda: load_registry(registry, now=clock.now(), secure=secure, cache=files),
        node=node, metrics=metrics, notifier=Notifier(), log=log,
        waker=Waker(kernel.WallTimer(), kernel.DirWatch(registry), log),
        boot_id=fsutil.boot_id(), boot_time=kernel.boot_time(), lease_ttl_s=ttl,
    )
    log("daemon.starting", version=__version__, node=node, db=store.url_safe,
        registry=",".join(map(str, registry)), state_dir=str(state_dir))
    notifier = notify_service(store, clock, log, node, metrics)
    daemon.notify_service = notifier  # the loop calls notifier.wake() after recording an outcome
    try:
        daemon.start()
        notifier.start()
        daemon.run_forever()
    except NodeConflict as e:
        return fail(str(e), EXIT_CONFIG)
    except StoreError as e:
        log("daemon.store_error", "error", message=str(e))
        return fail(str(e), EXIT_UNAVAILABLE)
    finally:
        notifier.stop()
    return 0


def notify_service(store, clock, log, node: str, metrics):
    """The notifier (chronod.notify.service): its own thread, woken by the loop, never blocking it."""
    from chronod.notify.service import NotifyService

    return NotifyService(store, clock, log, node, metrics=metrics, version=__version__)


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
