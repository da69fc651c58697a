"""What this node knows of its fleet: which version of a disagreeing job the fleet runs
(ours may be outvoted), which nodes are live and what each carries, and so which node
dispatches each `any` job (chronod.fleet.placement). On one host (SQLite) it always says
"this node"."""

from __future__ import annotations

from typing import Mapping

from chronod.core.clock import Clock
from chronod.daemon.runs import Job
from chronod.daemon.seams import Log
from chronod.fleet import placement
from chronod.store.api import Leases

VERSION_CHECK_EVERY_S = 10.0


class FleetView:
    """Placement and versions, refreshed at heartbeats and reloads."""

    def __init__(self, store: Leases, clock: Clock, node: str, log: Log, fleet: bool) -> None:
        self.store, self.clock, self.node, self.log = store, clock, node, log
        self.fleet = fleet  # PostgreSQL: one node of a fleet
        self._outvoted: dict[str, str] = {}  # job_id -> the fleet's spec hash, when ours lost
        self._carried: dict[str, dict[str, str]] = {}  # live node -> job_id -> spec hash (placement)
        self._live: list[tuple[str, int]] = []  # (name, token) of the live nodes at the last heartbeat
        self._owners: dict[str, str | None] = {}  # job_id -> the node that dispatches it (cache)
        self._next_version_check = 0.0
        # what the last vote was decided from: the live nodes' published hashes and ours
        self._voted_on: tuple[dict[str, dict[str, str]], dict[str, str]] | None = None
        self._local: tuple[dict[str, Job], dict[str, str]] = ({}, {})  # (the jobs, their `any` hashes)
        # the live nodes' published digests of their hashes at the last check (None: a node
        # published none; then the hashes themselves are compared)
        self._digests: dict[str, str | None] | None = None

    def owns(self, job: Job) -> bool:
        """Whether this node dispatches the job's scheduled occurrences: always for `each`
        jobs and on one host; in a fleet, the `any` job's owner (chronod.fleet.placement)."""
        if not self.fleet or job.spec.run_on.each:
            return True
        job_id = job.spec.id
        if job_id not in self._owners:
            self._owners[job_id] = placement.owner(job_id, self._carried)
        return self._owners[job_id] in (None, self.node)

    def owner(self, job_id: str) -> str | None:
        """The cached owner of a job (None: not asked yet, or nobody)."""
        return self._owners.get(job_id)

    def outvoted_here(self, job: Job) -> bool:
        """Whether the nodes with the fleet's version of this `any` job dispatch it instead."""
        return job.spec.id in self._outvoted and not job.spec.run_on.each

    def recheck(self) -> None:
        """Check the versions at the next heartbeat (after a reload)."""
        self._next_version_check = 0.0

    def heartbeat(self, jobs: Mapping[str, Job], mono: float) -> None:
        """At a heartbeat that began at `mono`: check again when it is time or the live
        nodes changed."""
        live = self.store.live_nodes()
        if mono >= self._next_version_check or live != self._live:
            self._live = live
            self.check_versions(jobs)

    def check_versions(self, jobs: Mapping[str, Job]) -> None:
        """Which version of each disagreeing job the fleet runs, and which node dispatches
        each `any` job (chronod.fleet.placement)."""
        self._next_version_check = self.clock.monotonic() + VERSION_CHECK_EVERY_S
        local = self._local_hashes(jobs)
        nodes, now = self.store.nodes(), self.clock.now()
        live = [n for n in nodes if placement.node_live(n, now)]
        digests = {n.name: (n.info or {}).get("spec_digest") for n in live}
        voted_on = self._voted_on
        if voted_on is not None and voted_on[1] is local and digests == self._digests and None not in digests.values():
            return  # every live node publishes what it did at the last check, and ours are the same
        published = {n.name: (n.info or {}).get("spec_hashes") or {} for n in live}
        if voted_on == (published, local):
            lost = self._outvoted  # the vote is a function of these alone: the same as last time
        else:
            lost = placement.outvoted(local, nodes, now)
        self._voted_on = (published, local)
        carried = {**published, self.node: local}
        if carried != self._carried:
            self._carried, self._owners = carried, {}
        for job_id, best in lost.items():
            if self._outvoted.get(job_id) != best:
                self.log(
                    "job.version_outvoted",
                    "warning",
                    job=job_id,
                    local_hash=local[job_id],
                    fleet_hash=best,
                    note="this node's definition differs from the fleet's; it leaves this job to the others",
                )
        for job_id in self._outvoted.keys() - lost.keys():
            self.log("job.version_agreed", job=job_id)
        self._outvoted, self._digests = lost, digests

    def _local_hashes(self, jobs: Mapping[str, Job]) -> dict[str, str]:
        """job_id -> spec hash of the `any` jobs among `jobs`: the same dict as last time
        while `jobs` holds the same Job objects (a Job's spec never changes)."""
        last_jobs, last = self._local
        if jobs != last_jobs:  # identity of each Job first: one C-level pass when none changed
            last = {j.spec.id: j.spec.spec_hash() for j in jobs.values() if not j.spec.run_on.each}
            self._local = (dict(jobs), last)
        return last
