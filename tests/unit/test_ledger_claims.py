"""A wake-up's claims by job (chronod.daemon.ledger): what the overlap rule asks at each
due occurrence, answered from an index, not by a scan of every claim."""

from __future__ import annotations

from datetime import datetime, timezone

from chronod.core.model import JobSpec
from chronod.daemon.ledger import Ledger
from chronod.daemon.runs import Job, new_run

AT = datetime(2026, 12, 6, 12, 0, 0, tzinfo=timezone.utc)


class Watched(list):
    """A list that counts the walks over it."""

    walks = 0

    def __iter__(self):
        Watched.walks += 1
        return super().__iter__()


def job(i: int) -> Job:
    spec = JobSpec(id=f"j{i:04d}", owner="t", schedule="@every 10s", command="true", idempotency_class="idempotent")
    return Job.on(spec, "n0")


def test_a_job_s_claims_in_a_carried_backlog_are_found_without_walking_every_claim():
    jobs = [job(i) for i in range(2000)]
    carried = Watched((j, new_run(j, AT)) for j in jobs)
    ledger = Ledger(store=None, node="n0", lease=None, metrics=None, log=None)  # type: ignore[arg-type]
    ledger.open(carried)
    later = new_run(jobs[7], AT.replace(second=10))
    ledger.claim(jobs[7], later)
    Watched.walks = 0
    for j in jobs:
        assert ledger.claims_of(j.spec.id) == (2 if j is jobs[7] else 1)
        assert ledger.claim_ids(j.spec.id) == {r.run_id for r in ledger.claim_runs(j.spec.id)}
    assert [r.run_id for r in ledger.claim_runs(jobs[7].spec.id)] == [new_run(jobs[7], AT).run_id, later.run_id]
    assert ledger.claim_ids("nobody") == set() and ledger.claim_runs("nobody") == []
    assert Watched.walks == 0  # before: one walk over the 2,001 claims for each call
