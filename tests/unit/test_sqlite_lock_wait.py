"""SQLite writers wait for the write lock instead of failing: up to the busy timeout, and
a write that asks for patience (the notifier's) tries BEGIN IMMEDIATE again until its
own deadline. Another connection holds the lock as a burst of chronoctl writes would."""

from __future__ import annotations

import sqlite3
import threading
import time

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


def test_back_to_back_patient_writes_let_an_urgent_write_in_between(store):
    """The notifier saves its states a transaction after another; the loop's write, asked
    for meanwhile, waits for the transaction in progress only, not for all of them (SQLite
    alone let the patient writer take its lock again at once, 30 times over)."""
    db = store.database
    asked, stop = threading.Event(), threading.Event()
    chunks = []

    def patient_chunks() -> None:
        for i in range(30):
            if stop.is_set():
                return
            with db.tx(patience_s=60) as c:
                c.exec_driver_sql("SELECT 1")
                if i == 2:
                    asked.set()
                time.sleep(0.02)  # a chunk of states holds the write lock this long
            chunks.append(time.monotonic())

    saver = threading.Thread(target=patient_chunks)
    saver.start()
    try:
        assert asked.wait(5)
        t = time.monotonic()
        with db.tx() as c:  # the loop's: no patience
            c.exec_driver_sql("SELECT 1")
        waited = time.monotonic() - t
    finally:
        stop.set()
        saver.join(10)
    assert waited < 0.15, f"the urgent write waited {waited:.2f} s behind {len(chunks)} patient chunks"
