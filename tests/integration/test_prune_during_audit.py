"""Pruning while an audit reads: `report`, `did-it-run` and `missed` run in-process while
retention deletes the old history between any two of their store calls. Whatever point
the deletion lands at, an occurrence that had a run is reported as run or as pruned, never
as missing, and the one occurrence that truly has no row is still missing.

The history is the one of test_retention_cli: a daily job at 03:00 UTC with 60 days of
runs, none 50 and 5 days ago; retention keeps 30 days.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from chronoctl import main as cli
from chronod.store import api
from tests.integration.test_retention_cli import _day, db  # noqa: F401 - the fixture

KEPT_S = 30 * 86400
OPEN_STORE = api.open_store  # the real one, for the pruning side


class PruneAfter:
    """A store that, right after its `k`-th call, lets retention delete everything past
    30 days (through a second connection, as chronod's pruner would)."""

    def __init__(self, store, url: str, k: int):
        self._store, self._url, self._k, self.calls = store, url, k, 0

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if not callable(attr) or name.startswith("_") or name == "close":
            return attr

        def call(*args, **kwargs):
            result = attr(*args, **kwargs)
            self.calls += 1
            if self.calls == self._k:
                _prune(self._url)
            return result

        return call


def _prune(url: str) -> None:
    other = OPEN_STORE(url)
    try:
        before = _day(0) - timedelta(seconds=KEPT_S)
        while other.prune_runs("ledger", before, kept_s=KEPT_S, limit=7):
            pass
    finally:
        other.close()


def _run(monkeypatch, capsys, url: str, k: int, *args: str) -> tuple[int, str, int]:
    real = OPEN_STORE
    wrapped: list[PruneAfter] = []

    def opening(*a, **kw):
        wrapped.append(PruneAfter(real(*a, **kw), url, k))
        return wrapped[-1]

    monkeypatch.setattr(api, "open_store", opening)
    code = cli.main([*args, "--db", url])
    monkeypatch.setattr(api, "open_store", real)
    out, err = capsys.readouterr()
    assert code in (0, 1) and out, f"exit {code}: {err}"
    return code, out, wrapped[0].calls


AUDITS = {
    "report": (
        "report",
        "ledger",
        "--from",
        _day(59).date().isoformat(),
        "--to",
        _day(0).date().isoformat(),
        "--format",
        "json",
    ),
    "missed": ("missed", "--since", "60d", "--json"),
    "did-it-run 40 days ago": ("did-it-run", "ledger", "--at", _day(40).isoformat(), "--json"),
}


@pytest.mark.parametrize("audit", sorted(AUDITS))
def test_pruning_between_any_two_store_calls_never_makes_a_run_missing(db, monkeypatch, capsys, audit):  # noqa: F811
    args = AUDITS[audit]
    _, _, calls = _run(monkeypatch, capsys, db, 0, *args)  # k=0: no pruning; counts the calls
    assert calls >= 2
    for k in range(1, calls + 1):
        # a fresh copy of the unpruned history for each interleaving
        code, out, _ = _run(monkeypatch, capsys, _fresh(db, k), k, *args)
        doc = json.loads(out)
        where = f"{audit}, pruned after store call {k} of {calls}"
        if audit == "report":
            by_day = {o["scheduled_at"][:10]: o["state"] for o in doc["jobs"][0]["occurrences"]}
            assert by_day[_day(5).date().isoformat()] == "missing", where
            no_row = {_day(5).date().isoformat(), _day(50).date().isoformat()}
            wrong = {d: s for d, s in by_day.items() if s == "missing" and d not in no_row}
            assert wrong == {}, where
            assert by_day[_day(50).date().isoformat()] in ("missing", "pruned"), where  # no row either way
        elif audit == "missed":
            days = [m["scheduled_at"][:10] for o in doc["owners"] for m in o["missed"] if m["job_id"] == "ledger"]
            assert _day(5).date().isoformat() in days, where
            assert set(days) <= {
                _day(5).date().isoformat(),
                _day(50).date().isoformat(),
                _day(45).date().isoformat(),
            }, where  # day 45 failed: a miss until pruned
        else:
            assert doc["state"] in ("succeeded", "pruned"), where
            assert code in (0, 1), where


def _fresh(url: str, k: int) -> str:
    """A copy of the SQLite file for interleaving `k`."""
    import shutil
    from pathlib import Path

    src = Path(url)
    dst = src.with_name(f"k{k}-{src.name}")
    shutil.copy(src, dst)
    return str(dst)
