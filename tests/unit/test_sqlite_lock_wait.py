"""SQLite writers wait for the write lock instead of failing: up to the busy timeout, and
a write that asks for patience (the notifier's) tries BEGIN IMMEDIATE again until its
own deadline. Another connection holds the lock as a burst of chronoctl writes would."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from chronod.store.api import StoreError
from chronod.store.sql import SqlStore


@pytest.fixture
def store(tmp_path):
    s = SqlStore(str(tmp_path / "chrono.db"), busy_timeout_s=0.2)
    s.upgrade()
    yield s
    s.close()


def holder(path: str) -> tuple[sqlite3.Connection, threading.Event]:
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    done = threading.Event()

    def release() -> None:
        done.wait(30)
        other.execute("COMMIT")
        other.close()

    threading.Thread(target=release, daemon=True).start()
    return other, done


def test_a_write_past_its_busy_timeout_fails_with_database_is_locked(store, tmp_path):
    _, done = holder(str(tmp_path / "chrono.db"))
    with pytest.raises(StoreError, match="database is locked"):
        with store.database.tx() as c:
            c.exec_driver_sql("SELECT 1")
    done.set()


def test_a_patient_write_tries_begin_immediate_again_until_the_lock_is_free(store, tmp_path):
    _, done = holder(str(tmp_path / "chrono.db"))
    threading.Timer(1.0, done.set).start()  # five busy timeouts later
    with store.database.tx(patience_s=60) as c:
        assert c.exec_driver_sql("SELECT 1").scalar() == 1
    assert done.is_set()
