"""What of a run's output is stored: the host's budget, and a database that is full."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy.exc

from chronod.core import outputs


@pytest.mark.parametrize(
    "text,want",
    [
        (None, outputs.DEFAULT_OUTPUT_BUDGET),
        ("", outputs.DEFAULT_OUTPUT_BUDGET),
        ("1000", 1000),
        ("64K", 64 * 1024),
        ("16M", 16 * 1024**2),
        ("2GiB", 2 * 1024**3),
        ("lots", None),
        ("-5", None),
    ],
)
def test_the_host_budget_reads_bytes_and_binary_units(text, want):
    assert outputs.parse_budget(text) == want


def test_output_over_the_budget_keeps_its_last_bytes_whole_characters_and_says_so():
    tail, note = outputs.within_budget("a" * 10 + "é" * 10, 9)
    assert tail == "é" * 4 and "output budget (9 bytes" in note
    assert outputs.within_budget("short", 9) == ("short", None)
    assert outputs.within_budget(None, 9) == (None, None)


def test_a_full_database_is_recognised_through_the_store_errors_wrapping():
    raw = sqlite3.OperationalError("database or disk is full")
    wrapped = sqlalchemy.exc.OperationalError("UPDATE runs", {}, raw)
    try:
        try:
            raise wrapped
        except Exception as e:
            raise RuntimeError("database sqlite:///x.db: unreachable") from e
    except RuntimeError as outer:
        assert outputs.is_database_full(outer)

    class PgFull(Exception):
        sqlstate = "53100"

    assert outputs.is_database_full(PgFull("could not write"))
    assert not outputs.is_database_full(sqlite3.OperationalError("database is locked"))
    assert outputs.with_note("exit 1", outputs.DB_FULL_NOTE) == "exit 1; output dropped: database full"
