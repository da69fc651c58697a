"""A database that is full refuses a run's output, not its outcome: the write is tried
once more without the output, with a note, and never again with it."""

from __future__ import annotations

import random
import sqlite3
from datetime import datetime, timezone
from types import SimpleNamespace

import sqlalchemy.exc

from chronod.core.clock import FakeClock
from chronod.core.model import JobSpec
from chronod.daemon.endings import Endings
from chronod.daemon.outage import Connectivity
from chronod.runner.api import Outcome
from chronod.store.api import Run

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
FULL = sqlalchemy.exc.OperationalError("UPDATE runs", {}, sqlite3.OperationalError("database or disk is full"))


class FullStore:
    """Refuses every write that carries output; records the others."""

    def __init__(self):
        self.tries: list[list] = []

    def finish_many(self, endings, token):
        self.tries.append(list(endings))
        if any(e.output_tail for e in endings):
            raise FULL
        return {e.run_id for e in endings}

    def finish(self, run_id, attempt, state, **fields):
        self.tries.append([dict(run_id=run_id, **fields)])
        if fields["output_tail"]:
            raise FULL
        return True


class Metric:
    def labels(self, *a):
        return self

    def inc(self, *a):
        pass

    def set(self, *a):
        pass


def test_an_ending_whose_output_does_not_fit_is_stored_without_it_and_says_so():
    store, logged = FullStore(), []
    metrics = SimpleNamespace(runs=Metric(), last_success=Metric())
    endings = Endings(
        clock=FakeClock(NOW),
        store=store,
        lease=SimpleNamespace(token=1),
        log=lambda *a, **k: logged.append((a, k)),
        metrics=metrics,
        rng=random.Random(1),
        timeline=None,
        carried=lambda job_id: True,
    )
    spec = JobSpec(id="big", owner="t", schedule="@every 2s", command="true", idempotency_class="idempotent")
    run = Run(run_id="r1", job_id="big", job_key="big", scheduled_at=NOW, fire_at=NOW, state="running", attempts=1)
    outcome = Outcome(
        run_id="r1",
        attempt=1,
        state="succeeded",
        exit_code=0,
        signal=None,
        started_at=NOW,
        finished_at=NOW,
        error=None,
        output_tail="x" * 5000,
        output_bytes=16_000_000,
    )
    done = endings.record_outcomes([(SimpleNamespace(spec=spec), run, outcome)])
    assert done == {"r1"}
    assert len(store.tries) == 2  # once with the output, once without: never again
    stored = store.tries[-1][0]
    assert stored.output_tail is None and stored.error == "output dropped: database full"
    assert stored.output_bytes == 16_000_000 and stored.state == "succeeded"
    assert any(a[0] == "store.full" for a, _ in logged)


def test_a_spooled_outcome_replayed_into_a_full_database_is_stored_without_its_output():
    store, logged = FullStore(), []
    me = SimpleNamespace(store=store, lease=SimpleNamespace(token=1), log=lambda *a, **k: logged.append(a))
    rec = dict(
        run_id="r1",
        attempt=1,
        state="failed",
        exit_code=1,
        signal=None,
        output_tail="y" * 100,
        output_bytes=100,
        error="exit code 1",
        finished_at=NOW,
    )
    assert Connectivity.replay_finish(me, rec) is True
    assert [t[0]["output_tail"] for t in store.tries] == ["y" * 100, None]
    assert store.tries[-1][0]["error"] == "exit code 1; output dropped: database full"
