"""Shared fixtures: PostgreSQL for the tests that need it, and a `store` on every backend.

PostgreSQL comes from, in order: `CHRONO_TEST_PG_DSN` (an SQLAlchemy URL of a database
on a server where that user may CREATE DATABASE), the local server on 127.0.0.1:5432 as
user postgres, or a throwaway cluster started with the `initdb`/`pg_ctl` found in PATH or
/usr/lib/postgresql/*/bin. Only when none works are PostgreSQL tests skipped, loudly.

Test databases are cheap: one template database is migrated once per session and every
test that wants a fresh database gets `CREATE DATABASE ... TEMPLATE` (as procrastinate does).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.xdist_groups import pytest_collection_modifyitems  # noqa: F401  (a hook)

LOCAL_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
_SESSION_STARTED = pytest.StashKey[float]()
_PG_SKIP_REASON: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Compile chrono's modules once, in the process that starts the workers, before any
    test starts a `chronod` or `chronoctl`: the suite starts hundreds of them, and with
    PYTHONDONTWRITEBYTECODE set (as on CI hosts) each one compiled all it imports from
    source, about a third of a second of CPU each. py_compile writes the files whatever
    that variable says; every interpreter reads them."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    config.stash[_SESSION_STARTED] = time.time()  # for the cgroup clean-up at the end
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in ("chronod", "chronoctl", "migrate"):
        compileall.compile_dir(root / package, quiet=2, workers=1)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _admin_engine(url: str):
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    return sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)


def _try_admin(url: str) -> bool:
    import sqlalchemy as sa

    engine = _admin_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return True
    except Exception:
        return False
    finally:
        engine.dispose()


class _Cluster:
    """A throwaway PostgreSQL cluster in a temp dir, run as a non-root user when we are root
    (initdb refuses root). Also what `own_pg_cluster` hands to tests that restart the server."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="chrono-pg-"))
        self.port = _free_port()
        self.user = None
        if os.geteuid() == 0:
            import pwd

            for candidate in ("postgres", "nobody"):
                try:
                    pwd.getpwnam(candidate)
                    self.user = candidate
                    break
                except KeyError:
                    continue
            shutil.chown(self.dir, self.user)
        self.data = self.dir / "data"
        self.opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"

    def _run(self, *argv: str) -> None:
        cmd = list(argv)
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
        except subprocess.CalledProcessError as e:
            raise RuntimeError(
                f"{' '.join(argv[:1] + argv[-1:])} failed (exit {e.returncode}): "
                f"{(e.stderr or b'').decode(errors='replace').strip()}"
            ) from None

    def start(self) -> str:
        self._run(_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        self.start_server()
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start_server(self) -> None:
        """`pg_ctl start`, waiting until the server accepts connections."""
        # -l also keeps the server off our output pipe, which subprocess.run would wait on
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-o", self.opts, "-l", str(self.dir / "log"), "-w", "start")

    def stop_server(self, mode: str = "immediate") -> None:
        """`pg_ctl stop -m MODE`; the data directory stays for `start_server`."""
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "immediate") -> None:
        """`pg_ctl restart -m MODE`, waiting until the server accepts connections again."""
        self._run(
            _pg_bin("pg_ctl"),
            "-D",
            str(self.data),
            "-m",
            mode,
            "-o",
            self.opts,
            "-l",
            str(self.dir / "log"),
            "-w",
            "restart",
        )

    def stop(self) -> None:
        """Stop the server (if it runs) and remove the cluster."""
        try:
            if (self.data / "postmaster.pid").exists():  # not when a test left it stopped
                self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin_url():
    """An SQLAlchemy URL of a database on a server where we may create databases."""
    env = os.environ.get("CHRONO_TEST_PG_DSN")
    if env:
        from chronod.store.sql import normalize_url

        url = normalize_url(env)
        if _try_admin(url):
            yield url
            return
        _skip_pg("CHRONO_TEST_PG_DSN is set but that server does not answer")
    if not os.environ.get("CHRONO_TEST_PG_THROWAWAY") and _port_open("127.0.0.1", 5432) and _try_admin(LOCAL_ADMIN):
        yield LOCAL_ADMIN
        return
    if _pg_bin("initdb") and _pg_bin("pg_ctl"):
        cluster = _Cluster()
        try:
            url = cluster.start()
        except Exception as e:
            cluster.stop()
            _skip_pg(f"could not start a throwaway PostgreSQL cluster: {e}")
        try:
            yield url
        finally:
            cluster.stop()
        return
    _skip_pg("no CHRONO_TEST_PG_DSN, nothing on 127.0.0.1:5432, and no initdb/pg_ctl to start one")


@pytest.fixture
def own_pg_cluster():
    """A PostgreSQL server of this test's own, for tests that restart or stop it (never the
    shared one on 5432): a `_Cluster` with `admin_url` and `url`, the latter a database
    migrated to head. Costs a few seconds (initdb)."""
    from chronod.store.sql import SqlStore

    if not (_pg_bin("initdb") and _pg_bin("pg_ctl")):
        _skip_pg("no initdb/pg_ctl to start a server that the test may restart")
    cluster = _Cluster()
    try:
        cluster.admin_url = cluster.start()
        cluster.url = create_pg_database(cluster.admin_url, "chrono")
        store = SqlStore(cluster.url)
        try:
            store.upgrade()
        finally:
            store.close()
    except Exception as e:
        cluster.stop()
        _skip_pg(f"could not start a PostgreSQL cluster of the test's own: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


def _skip_pg(reason: str) -> None:
    message = f"POSTGRESQL TESTS SKIPPED: {reason}. The fleet half of chrono is NOT tested."
    if message not in _PG_SKIP_REASON:
        _PG_SKIP_REASON.append(message)
    pytest.skip(message)


def pytest_sessionfinish(session, exitstatus):
    """Remove the empty run cgroups this session's daemons and runners left: one subtree per
    state directory, each test has its own, all under this session's temporary directory.

    Only the process that started the workers does it, once every worker is done: the
    subtrees of this session's state directories, and those made since it started that no
    run's cgroup is left in (state directories made outside its temporary directory).
    Never every `chrono-runs.*` of the shared cgroup: a worker that finished early
    once swept every `chrono-runs.*` under the shared cgroup, and the cgroup a busy
    worker's daemon had just made for a run vanished before the job could enter it (the
    run failed: "cannot place the job in its cgroup ...: No such file or directory")."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from chronod.runner import contain

    probe = contain.detect("/nonexistent-probe-only")
    if probe.base is None:
        return
    contain.remove(probe.base)  # detect made it
    parent = os.path.dirname(probe.base)
    left = {name for name in os.listdir(parent) if name.startswith("chrono-runs.")}
    factory = getattr(session.config, "_tmp_path_factory", None)
    if not left or factory is None:
        return
    for dirpath, dirnames, _ in os.walk(factory.getbasetemp()):
        for d in dirnames:
            name = contain.subtree_name(os.path.join(dirpath, d))
            if name in left:
                left.discard(name)
                contain.sweep(os.path.join(parent, name))
                contain.remove(os.path.join(parent, name))
    # subtrees of state directories made elsewhere (tempfile, the working directory) during
    # this session: removed only when no run's cgroup is left in them (rmdir refuses)
    started = session.config.stash.get(_SESSION_STARTED, None)
    for name in left:
        path = os.path.join(parent, name)
        with contextlib.suppress(OSError):
            if started is not None and os.stat(path).st_mtime >= started:
                contain.remove(path)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for message in _PG_SKIP_REASON:
        terminalreporter.write_sep("!", message, red=True, bold=True)


def _db_url(admin_url: str, name: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def create_pg_database(admin_url: str, name: str, template: str | None = None) -> str:
    """Create database `name` (optionally a copy of `template`); returns its URL."""
    import sqlalchemy as sa

    engine = _admin_engine(admin_url)
    try:
        with engine.connect() as conn:
            # WAL_LOG (PostgreSQL 15's default) copies the template through the WAL; FILE_COPY
            # forces a checkpoint per database, 2 s of a test's time on a busy host
            clause = f' TEMPLATE "{template}" STRATEGY WAL_LOG' if template else ""
            conn.execute(sa.text(f'CREATE DATABASE "{name}"{clause}'))
    finally:
        engine.dispose()
    return _db_url(admin_url, name)


def drop_pg_database(admin_url: str, name: str) -> None:
    """Drop a test database, closing whatever still holds it."""
    import sqlalchemy as sa

    engine = _admin_engine(admin_url)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


def pg_connections(admin_url: str, name: str, settle_s: float = 5.0) -> int:
    """How many sessions are connected to database `name` (leak check). A backend leaves
    pg_stat_activity a moment after its client closed the connection (a CI run counted one
    such), so the count is read again until it is 0 or `settle_s` has passed: a leaked
    session stays."""
    import time

    import sqlalchemy as sa

    engine = _admin_engine(admin_url)
    deadline = time.monotonic() + settle_s
    try:
        with engine.connect() as conn:
            while True:
                n = conn.execute(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = :d"), {"d": name}
                ).scalar_one()
                if n == 0 or time.monotonic() >= deadline:
                    return n
                time.sleep(0.05)
    finally:
        engine.dispose()


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def pg_dsn(pg_admin_url):
    """The URL of a fresh, empty PostgreSQL database for this session (dropped at the end)."""
    name = _unique("chrono_test")
    url = create_pg_database(pg_admin_url, name)
    yield url
    drop_pg_database(pg_admin_url, name)


@pytest.fixture(scope="session")
def pg_template(pg_admin_url):
    """Name of a database migrated to head once per session, to copy from."""
    from chronod.store.sql import SqlStore

    name = _unique("chrono_tpl")
    store = SqlStore(create_pg_database(pg_admin_url, name))
    try:
        store.upgrade()
    finally:
        store.close()
    yield name
    drop_pg_database(pg_admin_url, name)


@pytest.fixture
def new_pg_database(pg_admin_url, pg_template):
    """Factory: `new_pg_database(migrated=True)` returns the URL of a new database, a copy
    of the migrated template (or empty); every one is dropped after the test."""
    made: list[str] = []

    def make(migrated: bool = True) -> str:
        name = _unique("chrono_t")
        made.append(name)
        return create_pg_database(pg_admin_url, name, pg_template if migrated else None)

    yield make
    for name in made:
        drop_pg_database(pg_admin_url, name)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A path for a new SQLite database."""
    return str(tmp_path / "state" / "chrono.db")


@pytest.fixture(scope="session")
def _pg_shared(pg_admin_url, pg_template):
    """One migrated PostgreSQL database that `store_url` empties before each test."""
    name = _unique("chrono_shared")
    url = create_pg_database(pg_admin_url, name, pg_template)
    yield url
    drop_pg_database(pg_admin_url, name)


def reset_pg_database(url: str) -> None:
    """Empty every chrono table and put the schema back at head (cheaper than a new database)."""
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    from chronod.store import schema

    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            tables = ", ".join(t.name for t in schema.metadata.sorted_tables)
            conn.execute(sa.text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
            conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": schema.HEAD_REVISION})
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path) -> str:
    """The URL of a migrated, empty database, once per backend (PostgreSQL: one shared
    database emptied before each test; use `new_pg_database` for a database of your own)."""
    from chronod.store.sql import SqlStore

    if request.param == "postgres":
        url = request.getfixturevalue("_pg_shared")
        reset_pg_database(url)
        return url
    url = str(tmp_path / "state" / "chrono.db")
    store = SqlStore(url)
    try:
        store.upgrade()
    finally:
        store.close()
    return url


@pytest.fixture
def store(store_url, request):
    """A migrated SqlStore on each backend; teardown checks that no connection leaked."""
    from chronod.store.sql import SqlStore

    st = SqlStore(store_url)
    yield st
    leaked = st.engine.pool.checkedout()
    st.close()
    assert leaked == 0, f"{leaked} connection(s) still checked out of the pool"
    if st.dialect == "postgresql":
        from sqlalchemy.engine import make_url

        name = make_url(store_url).database
        admin = request.getfixturevalue("pg_admin_url")
        assert pg_connections(admin, name) == 0, "the store left sessions open after close()"
