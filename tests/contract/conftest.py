"""The contract's `store`: one suite, three stores (SQLite, PostgreSQL, the memory store).

A test that takes `store` runs on each. The few that are inherently SQL (migrations, the
schema revision, query plans, engines racing, file permissions) take `store_url` or an
engine and are skipped on the memory store with `sql_only`, which says why."""

from __future__ import annotations

import pytest

from chronod.store.memory import MemoryOutbox, MemoryStore
from chronod.store.outbox import Outbox
from tests.conftest import pg_connections, reset_pg_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_url(backend, request, tmp_path) -> str:
    """The URL of a migrated, empty database (SQLite or PostgreSQL); the memory store has none."""
    from chronod.store.sql import SqlStore

    if backend == "memory":
        pytest.skip("an SQL database's URL: the memory store has none")
    if backend == "postgres":
        url = request.getfixturevalue("_pg_shared")
        reset_pg_database(url)
        return url
    url = str(tmp_path / "state" / "chrono.db")
    st = SqlStore(url)
    try:
        st.upgrade()
    finally:
        st.close()
    return url


@pytest.fixture
def store(backend, request):
    """A migrated SqlStore on SQLite and PostgreSQL (teardown checks that no connection
    leaked), or a MemoryStore."""
    if backend == "memory":
        yield MemoryStore()
        return
    from chronod.store.sql import SqlStore

    url = request.getfixturevalue("store_url")
    st = SqlStore(url)
    yield st
    leaked = st.engine.pool.checkedout()
    st.close()
    assert leaked == 0, f"{leaked} connection(s) still checked out of the pool"
    if st.dialect == "postgresql":
        from sqlalchemy.engine import make_url

        admin = request.getfixturevalue("pg_admin_url")
        assert pg_connections(admin, make_url(url).database) == 0, "the store left sessions open after close()"


def outbox(store) -> Outbox | MemoryOutbox:
    """The notifier's store over `store`."""
    return MemoryOutbox(store) if isinstance(store, MemoryStore) else Outbox(store)


def sql_only(store, why: str) -> None:
    """Skip on the memory store: what the test pins down exists only in an SQL database."""
    if isinstance(store, MemoryStore):
        pytest.skip(f"SQL only: {why}")
