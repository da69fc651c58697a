"""An unreachable database is named once, with a hint (it was named twice, with none)."""

from __future__ import annotations

from tests.inprocess import chronoctl


def test_an_unreachable_database_is_named_once_with_a_hint():
    url = "postgresql://nobody@127.0.0.1:1/nothing"  # no server listens on port 1
    out = chronoctl("status", "--db", url)
    assert out.returncode == 3, out.stderr
    first = out.stderr.splitlines()[0]
    assert first.count("127.0.0.1:1/nothing") == 1, first
    assert "failed: connection failed" in first or "Connection refused" in first, first
    assert "hint: check that the database server runs" in out.stderr
