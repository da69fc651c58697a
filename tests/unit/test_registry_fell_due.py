"""What a start records for a job it removes (`Registry.fell_due`, handed to the store's
`sync_jobs`): the occurrences after its stored one that fell due, cancelled; nothing for
a `run_on: each` job (its offline runs are in the spool, replayed after the removal) and
nothing, with a warning, for a stored definition that no longer compiles (the removal
must not fail: every start would fail on it)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from chronod.core.model import JobSpec, RunOn
from chronod.daemon.registry import REMOVED_UNRUN, Registry

AFTER = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SPEC = JobSpec("gone", "ops", "*/5 * * * *", "true", "idempotent")


def fake() -> SimpleNamespace:
    logged: list[tuple] = []
    return SimpleNamespace(node="n1", logged=logged, log=lambda *a, **kw: logged.append((a, kw)))


def test_the_occurrences_after_the_stored_one_up_to_the_removal_are_cancelled():
    me = fake()
    runs = Registry.fell_due(me, SPEC, AFTER, AFTER + timedelta(minutes=17))  # type: ignore[arg-type]
    assert [r.scheduled_at.strftime("%H:%M") for r in runs] == ["12:05", "12:10", "12:15"]
    assert {(r.state, r.error) for r in runs} == {("cancelled", REMOVED_UNRUN)}


def test_nothing_for_an_each_job_or_a_definition_that_no_longer_compiles():
    me = fake()
    each = replace(SPEC, run_on=RunOn(mode="each"))
    assert Registry.fell_due(me, each, AFTER, AFTER + timedelta(hours=1)) == []  # type: ignore[arg-type]
    gone_zone = replace(SPEC, timezone="Europe/Gone")
    assert Registry.fell_due(me, gone_zone, AFTER, AFTER + timedelta(hours=1)) == []  # type: ignore[arg-type]
    ((args, kw),) = me.logged
    assert args[0] == "registry.removed_unrecorded" and kw["job"] == "gone" and "Europe/Gone" in kw["why"]
