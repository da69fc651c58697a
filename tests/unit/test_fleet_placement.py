"""The fleet's choice of one version per job, and the local spool, without a database."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from chronod.fleet import placement
from chronod.fleet.spool import Spool

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@dataclass
class N:
    name: str
    hashes: dict
    lease_expires_at: datetime = NOW + timedelta(seconds=10)
    stopped_at: datetime | None = None
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.info = {"spec_hashes": self.hashes}


def test_nodes_that_agree_report_no_disagreement():
    nodes = [N("a", {"x": "h1"}), N("b", {"x": "h1"})]
    assert placement.disagreements(nodes, NOW) == {}
    assert placement.outvoted({"x": "h1"}, nodes, NOW) == {}


def test_the_version_most_live_nodes_carry_wins_and_the_others_stand_aside():
    nodes = [N("a", {"x": "old"}), N("b", {"x": "new"}), N("c", {"x": "new"})]
    assert placement.outvoted({"x": "old"}, nodes, NOW) == {"x": "new"}
    assert placement.outvoted({"x": "new"}, nodes, NOW) == {}


def test_a_tie_goes_to_the_greater_hash_on_every_node_alike():
    nodes = [N("a", {"x": "aaa"}), N("b", {"x": "fff"})]
    assert placement.outvoted({"x": "aaa"}, nodes, NOW) == {"x": "fff"}
    assert placement.outvoted({"x": "fff"}, list(reversed(nodes)), NOW) == {}


def test_dead_and_stopped_nodes_do_not_vote():
    nodes = [
        N("a", {"x": "aaa"}),
        N("b", {"x": "fff"}, lease_expires_at=NOW - timedelta(seconds=1)),
        N("c", {"x": "fff"}, stopped_at=NOW),
    ]
    assert placement.disagreements(nodes, NOW) == {}


def test_the_status_report_names_every_version_its_nodes_and_the_one_that_runs():
    nodes = [N("a", {"x": "aaa", "y": "1"}), N("b", {"x": "fff", "y": "1"})]
    assert placement.report(nodes, NOW) == [
        {"job_id": "x", "spec_hash": "aaa", "nodes": ["a"], "runs": False},
        {"job_id": "x", "spec_hash": "fff", "nodes": ["b"], "runs": True},
    ]


def test_the_spool_gives_back_its_records_in_order_with_times_and_survives_a_torn_line(tmp_path):
    spool = Spool(tmp_path / "spool.jsonl")
    spool.append("start", run={"run_id": "r1", "started_at": NOW})
    spool.append("finish", run_id="r1", state="succeeded")
    with open(spool.path, "a") as f:
        f.write('{"kind": "fin')  # a crash in the middle of a write
    records = spool.records()
    assert [r["kind"] for r in records] == ["start", "finish"]
    assert records[0]["run"]["started_at"] == NOW
    spool.clear()
    assert spool.records() == []


# --- which node dispatches an `any` job ------------------------------------------------


def _carried(names, jobs, h="h1"):
    return {n: {j: h for j in jobs} for n in names}


def test_every_node_computes_the_same_owner_and_the_jobs_spread_over_the_nodes():
    jobs = [f"job-{i}" for i in range(3000)]
    carried = _carried(["a", "b", "c"], jobs)
    owners = Counter(placement.owner(j, carried) for j in jobs)
    assert set(owners) == {"a", "b", "c"}
    assert all(800 < n < 1200 for n in owners.values()), owners
    reordered = dict(reversed(list(carried.items())))
    assert all(placement.owner(j, reordered) == placement.owner(j, carried) for j in jobs[:200])


def test_a_node_leaving_moves_only_its_own_jobs():
    jobs = [f"job-{i}" for i in range(1000)]
    before = {j: placement.owner(j, _carried(["a", "b", "c"], jobs)) for j in jobs}
    after = {j: placement.owner(j, _carried(["a", "b"], jobs)) for j in jobs}
    moved = [j for j in jobs if before[j] != after[j]]
    assert moved and all(before[j] == "c" for j in moved)


def test_only_nodes_that_carry_the_fleets_version_own_a_job():
    carried = {"a": {"x": "old"}, "b": {"x": "new"}, "c": {"x": "new"}, "d": {}}
    assert placement.owner("x", carried) in {"b", "c"}
    assert placement.owner("y", carried) is None
