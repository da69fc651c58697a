"""Fair shares of starts between owners, then jobs (chronod.core.shares), and the start
limit that uses them (policy.start_admission)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from chronod.core import policy, shares
from chronod.core.model import JobSpec

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)

entries = st.lists(st.tuples(st.sampled_from(["", "alice", "bob", "carol"]), st.integers(0, 5)), max_size=60)


def owner(e):
    return e[0][0]


def job(e):
    return e[0]


@settings(max_examples=300, deadline=None)
@given(entries)
def test_fair_order_is_a_permutation_keeping_each_jobs_order_and_every_prefix_is_a_fair_share(raw):
    line = [((o, f"{o}.{j}"), i) for i, (o, j) in enumerate(raw)]
    out = shares.fair_order(line, owner, job)
    assert sorted(out, key=lambda e: e[1]) == line
    for j in {job(e) for e in line}:
        assert [e for e in out if job(e) == j] == [e for e in line if job(e) == j]
    total = Counter(owner(e) for e in line)
    for k in range(len(out) + 1):
        got = Counter(owner(e) for e in out[:k])
        # an owner with entries left never trails another owner by more than one start
        for a in total:
            if got[a] < total[a]:
                assert all(got[b] <= got[a] + 1 for b in total), (k, got)
        # and within one owner, its jobs with entries left are as fair to each other
        for o in total:
            per_job = Counter(job(e) for e in out[:k] if owner(e) == o)
            jobs_total = Counter(job(e) for e in line if owner(e) == o)
            for a in jobs_total:
                if per_job[a] < jobs_total[a]:
                    assert all(per_job[b] <= per_job[a] + 1 for b in jobs_total), (o, k, per_job)


@settings(max_examples=200, deadline=None)
@given(entries, st.integers(0, 70))
def test_fair_split_starts_n_and_leaves_the_rest_in_line_order(raw, n):
    line = [((o, f"{o}.{j}"), i) for i, (o, j) in enumerate(raw)]
    go, rest, _ = shares.fair_split(line, n, owner, job)
    assert len(go) == min(n, len(line))
    assert sorted(go + rest, key=lambda e: e[1]) == line
    assert rest == sorted(rest, key=lambda e: e[1])


def _spec(job_id: str, user: str | None) -> JobSpec:
    return JobSpec(
        id=job_id, owner="team", schedule="* * * * * *", command="true", idempotency_class="idempotent", user=user
    )


def test_under_the_start_limit_roots_job_starts_every_second_whatever_a_delegated_flood_asks():
    """400 jobs of one account and one of root, 10 starts a second: root's run is among
    the starts every second; the flood shares the rest."""
    flood = [_spec(f"nb.t{i:03d}", "nobody") for i in range(400)]
    root = _spec("zz.root", None)  # sorts last by id: line order alone would never reach it
    budget = policy.Budget(10.0, 0.0)
    started = Counter()
    for second in range(60):
        at = NOW + timedelta(seconds=second)
        line = [policy.Candidate(f"{s.id}@{second}", s, at, at) for s in [*flood, root]]
        a = policy.start_admission(10, budget, line, at, float(second))
        budget = a.budget
        budget.turns.update(a.served)
        assert len(a.start) == 10
        started.update(c.spec.id for c in a.start)
    assert started["zz.root"] == 60
    assert sum(started.values()) == 600


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["", "alice", "bob"]), min_size=1, max_size=3, unique=True), st.integers(1, 3))
def test_one_start_at_a_time_the_turn_carries_over_and_every_owner_asking_is_served_in_turn(owners, per_owner_jobs):
    """A limit that lets one run through per decision, the same line each time (every
    owner always asking): over any window of len(owners) decisions each owner starts
    once, and each of an owner's jobs in turn."""
    line = [((o, f"{o}.{j}"), i) for i, (o, j) in enumerate((o, j) for o in owners for j in range(per_owner_jobs))]
    served: dict = {}
    got = []
    for _ in range(len(owners) * per_owner_jobs * 2):
        go, _, changed = shares.fair_split(line, 1, owner, job, served)
        served.update(changed)
        got.append(go[0])
    for k in range(0, len(got) - len(owners) + 1):
        assert sorted(owner(e) for e in got[k : k + len(owners)]) == sorted(owners)
    for o in owners:
        mine = [job(e)[1] for e in got if owner(e) == o]
        assert mine == [f"{o}.{j}" for j in range(per_owner_jobs)] * 2


def test_a_starved_owner_goes_first_and_the_turn_never_needs_a_scan_of_every_stamp():
    line = [(("alice", "alice.a"), 0), (("", "root.r"), 1)]
    go, rest, changed = shares.fair_split(line, 1, owner, job, {("owner", "alice"): 5, shares.CLOCK: 5})
    assert [job(e)[1] for e in go] == ["root.r"] and [job(e)[1] for e in rest] == ["alice.a"]
    assert changed == {("owner", ""): 6, ("job", ("", "root.r")): 6, shares.CLOCK: 6}
