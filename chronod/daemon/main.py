"""chronod's composition root: parse options, wire clock, store, runner and loop, run."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Sequence

from chronod import __version__, fsutil, paths, private

if TYPE_CHECKING:
    from chronod.core.blackout import Window
    from chronod.core.clock import Clock
    from chronod.daemon.log import Log
    from chronod.daemon.loop import Daemon
    from chronod.daemon.metrics import Metrics
    from chronod.daemon.pruner import Pruner
    from chronod.daemon.seams import Runner
    from chronod.notify.service import NotifyService
    from chronod.specfile import FileCache, RegistryResult
    from chronod.store.api import Store

    MakeRunner = Callable[[Path], Runner]  # the runner over a state directory

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_SOFTWARE = 70  # EX_SOFTWARE: a bug in chronod
EXIT_CONFIG = 78  # EX_CONFIG: systemd will not restart-loop on a configuration error


class StartupError(Exception):
    """A reason chronod cannot start, said in one line, with its exit status."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="chronod", description="Run chrono jobs: DST-correct schedules, a history that survives crashes."
    )
    p.add_argument(
        "--registry",
        action="append",
        type=Path,
        help="registry directory or file (repeatable; default: $CHRONO_REGISTRY, else /etc/chrono/jobs.d for root, else $XDG_CONFIG_HOME/chrono/jobs.d)",
    )
    p.add_argument("--db", default=None, help="SQLAlchemy URL or SQLite file path (default: $CHRONO_DB)")
    p.add_argument("--node", default=None, help="this node's name (default: the short host name)")
    p.add_argument(
        "--metrics-addr", default=os.environ.get("CHRONO_METRICS_ADDR"), help="serve Prometheus metrics on HOST:PORT"
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where run supervisors leave their result files (default: beside the SQLite file)",
    )
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=None,
        help="lease time-to-live in seconds (default: 600 on SQLite, 15 on PostgreSQL)",
    )
    p.add_argument(
        "--max-starts",
        type=_starts_per_s,
        default=os.environ.get("CHRONO_MAX_STARTS"),
        metavar="N",
        help="start at most N runs a second on this node; runs past it wait, or are skipped "
        "by their catch-up rule (default: $CHRONO_MAX_STARTS, else 1000; 0: no limit)",
    )
    p.add_argument(
        "--insecure-registry",
        action="store_true",
        help="skip the ownership and mode checks on registry files even when running as root",
    )
    p.add_argument("--version", action="version", version=f"chronod {__version__}")
    return p.parse_args(argv)


def _starts_per_s(text: str) -> float:
    """A start limit: a number of runs per second, 0 for none."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of runs per second (0 for no limit)")
    return value


def fail(message: str, code: int) -> int:
    sys.stderr.write(f"chronod: error: {message}\n")
    return code


def check_registry(path: Path) -> None:
    """A registry path must exist and be readable by this process: a typo, an unmounted
    file system or a wrong mode would otherwise run no jobs at all, silently."""
    try:
        if path.is_dir():
            os.listdir(path)
        else:
            with open(path, "rb"):
                pass
    except FileNotFoundError:
        raise StartupError(
            f"registry {path} does not exist: create it (mkdir -p {path}) or pass --registry DIR", EXIT_CONFIG
        ) from None
    except OSError as e:
        raise StartupError(
            f"registry {path} cannot be read ({e.strerror}): give this user read access to it, or pass --registry DIR",
            EXIT_CONFIG,
        ) from None


def main(argv: list[str] | None = None, *, make_runner: MakeRunner | None = None) -> int:
    """Start chronod in the foreground; returns the process exit status. Every reason not
    to start is one `chronod: error:` line and an exit status documented in chronod(8).

    `make_runner` replaces the runner that starts jobs; only a program that builds the
    daemon itself passes one (the fleet benchmark's launches without processes). The
    `chronod` command never does, and no option or variable of it reaches this."""
    args = parse_args(argv)
    try:
        return serve(args, make_runner)
    except StartupError as e:
        return fail(str(e), e.code)


def serve(args: argparse.Namespace, make_runner: MakeRunner | None = None) -> int:
    registry = args.registry or [paths.default_registry()]
    db = args.db or paths.default_db()
    node = args.node or paths.default_node()
    for r in registry:
        check_registry(r)
    from chronod.daemon.metrics import AddressError, parse_addr

    if args.metrics_addr:
        try:
            parse_addr(args.metrics_addr)
        except AddressError as e:
            raise StartupError(str(e), EXIT_CONFIG) from None
    try:
        daemon, services = start(args, registry, db, node, make_runner)
    except (StartupError, KeyboardInterrupt):
        raise
    except Exception as e:  # the boundary: anything else at start-up is a bug, said in one line
        if os.environ.get("CHRONO_TRACEBACK"):
            raise
        raise StartupError(
            f"unexpected {type(e).__name__} while starting: {e} (a bug in chronod; CHRONO_TRACEBACK=1 shows where)",
            EXIT_SOFTWARE,
        ) from None
    from chronod.store.api import NodeConflict, StoreError

    try:
        daemon.run_forever()
    except NodeConflict as e:
        return fail(str(e), EXIT_CONFIG)
    except StoreError as e:
        daemon.log("daemon.store_error", "error", message=str(e))
        return fail(str(e), EXIT_UNAVAILABLE)
    finally:
        for service in services:
            service.stop()
    return 0


def start(
    args: argparse.Namespace, registry: list[Path], db: str, node: str, make_runner: MakeRunner | None = None
) -> tuple[Daemon, tuple[NotifyService, Pruner]]:
    """Open the store, listen for metrics, build the daemon and run its start-up (lease,
    first load, adoption, READY=1). Returns the daemon and its background services (the
    notifier, the pruner), all running."""
    from chronod.daemon import kernel

    with kernel.collections_held():  # start-up builds the heap the daemon keeps
        return _start(args, registry, db, node, make_runner)


def _start(
    args: argparse.Namespace, registry: list[Path], db: str, node: str, make_runner: MakeRunner | None = None
) -> tuple[Daemon, tuple[NotifyService, Pruner]]:
    from chronod.core.clock import Clock
    from chronod.daemon import kernel
    from chronod.daemon.accounts import NoAccounts, ShadowAccounts
    from chronod.daemon.filestore import StoredFiles, node_key
    from chronod.daemon.log import Log
    from chronod.daemon.loop import Daemon
    from chronod.daemon.metrics import AddressError, Metrics
    from chronod.daemon.pruner import Pruner
    from chronod.daemon.reloads import ThreadReloads
    from chronod.daemon.startlimit import DEFAULT_MAX_STARTS_PER_S
    from chronod.daemon.sysd import Notifier
    from chronod.daemon.waker import Waker
    from chronod.runner.runner import Runner, launchers
    from chronod.specfile import FileCache
    from chronod.store.api import NodeConflict, SchemaTooNew, SchemaTooOld, StoreError, open_store

    kernel.share_malloc_arena()  # before any thread: one arena, not one per thread to fragment
    kernel.favour_the_loop()  # the loop gets the interpreter back within 0.5 ms of asking
    log = Log(timestamps="JOURNAL_STREAM" not in os.environ)
    clock = Clock()
    secure = os.geteuid() == 0 and not args.insecure_registry
    db_file = paths.sqlite_path(db)
    try:
        if db_file is not None:
            private.secure_db_file(db_file)
    except private.NotPrivate as e:
        raise StartupError(str(e), EXIT_CONFIG) from None
    try:
        store = open_store(db)
        try:
            store.check_schema()
        except SchemaTooOld:
            store.upgrade()  # under a lock: several nodes may start at once
    except SchemaTooNew as e:
        raise StartupError(str(e), EXIT_CONFIG) from None
    except StoreError as e:
        raise StartupError(str(e), EXIT_UNAVAILABLE) from None
    # absolute: supervisors run in the job's workdir and must still find their files
    state_dir = (args.state_dir or paths.default_state_dir(db)).absolute()
    try:
        private.own_directory(state_dir)
    except private.NotPrivate as e:
        raise StartupError(str(e), EXIT_CONFIG) from None
    ttl = args.lease_ttl or (600.0 if store.dialect == "sqlite" else 15.0)
    metrics = Metrics()
    # a reload or a restart validates only the files that changed
    stored = StoredFiles(store, node, node_key(state_dir))
    files = FileCache(stored)
    if args.metrics_addr:
        try:
            metrics.serve(args.metrics_addr)
        except AddressError as e:
            raise StartupError(str(e), EXIT_CONFIG) from None
    waker = Waker(kernel.WallTimer(), kernel.DirWatch(registry), log)

    def carried() -> dict[str, Any]:  # the loop's specs, for the threads that read every job
        return {j.spec.id: j.spec for j in dict(daemon.jobs).values()}

    notifier = notify_service(
        store,
        clock,
        log,
        node,
        metrics,
        known_specs=carried,
        known_windows=lambda: daemon.gate.windows(),
        building=kernel.collections_held,
    )
    daemon = Daemon(
        clock=clock,
        store=store,
        runner=make_runner(state_dir)
        if make_runner
        else Runner(state_dir, zygote=True, many=True, launchers=launchers()),
        load_registry=lambda: load_files(registry, clock, secure, files, log, node),
        node=node,
        metrics=metrics,
        notifier=Notifier(),
        log=log,
        waker=waker,
        reloads=ThreadReloads(waker.poke),  # a reload never holds the firing loop
        boot_id=fsutil.boot_id(),
        boot_time=kernel.boot_time(),
        lease_ttl_s=ttl,
        max_starts_per_s=DEFAULT_MAX_STARTS_PER_S if args.max_starts is None else args.max_starts,
        notify_service=notifier,  # the loop wakes it after recording outcomes
        accounts=ShadowAccounts() if os.geteuid() == 0 else NoAccounts(),
    )
    # a restart whose definitions match the last check reads its stored occurrences unchecked
    daemon.registry.marks = stored
    log(
        "daemon.starting",
        version=__version__,
        node=node,
        db=store.url_safe,
        registry=",".join(map(str, registry)),
        state_dir=str(state_dir),
    )
    if args.db and _has_password(args.db):
        log(
            "db.password_in_argv",
            "warning",
            db=store.url_safe,
            why="every local user can read a password given with --db in /proc/PID/cmdline and ps",
            hint="give --db without the password and put it in ~/.pgpass (or PGPASSFILE), or set PGPASSWORD "
            "or CHRONO_DB in an environment file the unit reads (EnvironmentFile=, mode 0600)",
        )
    pruner = Pruner(store, clock, log, node, metrics=metrics, known_specs=carried)
    try:
        daemon.start()
        notifier.start()
        pruner.start()
    except NodeConflict as e:
        raise StartupError(str(e), EXIT_CONFIG) from None
    except StoreError as e:
        log("daemon.store_error", "error", message=str(e))
        raise StartupError(str(e), EXIT_UNAVAILABLE) from None
    return daemon, (notifier, pruner)


def load_files(
    registry: list[Path], clock: Clock, secure: bool, files: FileCache, log: Log, node: str
) -> RegistryResult:
    """The daemon's read of its registry: the files to validate are validated on every CPU
    it may use (`load_registry`'s workers), each new job's first occurrence on this node
    computed beside its validation. Should a worker fail (killed for memory, say), the
    error is logged and the files are validated here instead: a load gives every file's
    result or raises, never part of them."""
    from chronod.specfile import load_registry
    from chronod.workers import WorkerFailed, usable_cpus

    try:
        return load_registry(registry, now=clock.now(), secure=secure, cache=files, workers=usable_cpus(), node=node)
    except WorkerFailed as e:
        log(
            "registry.workers_failed",
            "error",
            message=str(e),
            note="validating the job files in the daemon's process instead",
        )
    return load_registry(registry, now=clock.now(), secure=secure, cache=files, node=node)


def notify_service(
    store: Store,
    clock: Clock,
    log: Callable[..., None],
    node: str,
    metrics: Metrics,
    known_specs: Callable[[], dict[str, Any]] | None = None,
    known_windows: Callable[[], Sequence[Window]] | None = None,
    building: Callable[[], ContextManager[None]] = nullcontext,
) -> NotifyService:
    """The notifier (chronod.notify.service): its own thread, woken by the loop, never blocking it.
    It reads the fleet's jobs from the store and shares the specs this node carries
    (`known_specs`, a copy of the loop's taken under the GIL) instead of parsing them again,
    and the registry's maintenance windows (`known_windows`): a job inside one is held, not silent."""
    from chronod.notify.service import NotifyService

    return NotifyService(
        store,
        clock,
        log,
        node,
        metrics=metrics,
        version=__version__,
        known_specs=known_specs,
        known_windows=known_windows,
        boot_id=fsutil.boot_id(),
        building=building,
    )


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()


def _has_password(url: str) -> bool:
    """Whether a database URL carries a password (in its user information or its query)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return False
    userinfo = rest.rpartition("@")[0] if "@" in rest else ""
    return ":" in userinfo or "password=" in rest.lower()
