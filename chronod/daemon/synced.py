"""What the last reload stored, kept so that a reload whose job files all match their
digest does almost nothing: no read of every stored definition, no new encoding of the
node's published spec hashes.

With 100,000 jobs, comparing the registry with the store meant reading all 100,000 stored
rows (two seconds of CPU, most of an unchanged reload) and encoding 100,000 hashes again;
meanwhile the loop waited for the interpreter lock after each system call and an
`@every 1s` job fired late or not at all. An unchanged job file hands back the very same
spec objects (`specfile.FileCache`), so "nothing changed since the last sync" is one
identity check per job; anything else (a changed file, a new day's validation) goes the
full way through `Store.sync_jobs`, which compares stored rows by hash.

Another writer of the jobs table (a node of the fleet carrying the same job, a pause)
changes its version (count and newest `updated_at`, one cheap query): then the sync
compares with the store again, as every reload did before.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Callable, Mapping

from chronod.core.model import JobSpec

if TYPE_CHECKING:
    from chronod.store.api import Definitions, FellDue

HASHES_PER_CALL = 2000


class Synced:
    """The definitions the last `sync_jobs` stored for this node, and the published hashes."""

    def __init__(self) -> None:
        self.specs: dict[str, JobSpec] | None = None  # None: compare with the store
        self.version: Any = None  # the jobs table's version just after that sync
        self._hashes: tuple[dict[str, Any], str, str] | None = None  # (jobs encoded, their JSON, its digest)

    def forget(self) -> None:
        """Compare with the store at the next sync (start-up, the end of an outage)."""
        self.specs, self.version, self._hashes = None, None, None

    def same(self, carried: Mapping[str, JobSpec]) -> bool:
        """Whether these are the definitions the last sync stored (the same objects, or ones
        with the same hash)."""
        last = self.specs
        if last is None or len(last) != len(carried):
            return False
        for job_id, spec in carried.items():
            old = last.get(job_id)
            if old is not spec and (old is None or old.spec_hash() != spec.spec_hash()):
                return False
        return True

    def sync(
        self,
        store: Definitions,
        node: str,
        carried: dict[str, JobSpec],
        before: Callable[[], None] | None = None,
        fell_due: FellDue | None = None,
    ) -> bool:
        """Store these definitions unless the last sync stored them; True if it wrote.
        `before` is called first when it is going to write; `fell_due` as `sync_jobs`'s."""
        if self.same(carried) and store.jobs_version() == self.version:
            return False
        self.specs = None  # a sync that fails half-way leaves nothing to trust
        if before is not None:
            before()
        store.sync_jobs(node, carried.values(), fell_due)
        self.version = store.jobs_version()
        self.specs = dict(carried)
        return True

    def adopt(self, carried: dict[str, JobSpec], version: Any) -> None:
        """These definitions are the stored ones at `version` (known without reading them:
        a start whose definitions match the mark of the last check, `Registry`)."""
        self.specs, self.version = dict(carried), version

    def node_info_json(self, info: dict[str, Any], jobs: Mapping[str, Any]) -> str:
        """`node_info_json` of `info` with `spec_hashes` the spec hash of each of `jobs`
        (id -> Job), encoded again only when `jobs` holds other specs than last time, and
        `spec_digest` a digest of them: the other nodes compare it to learn that the hashes
        did not change without comparing them (chronod.daemon.fleetview)."""
        cached = self._hashes
        if cached is not None and _same_jobs(cached[0], jobs):
            text, digest = cached[1], cached[2]
        else:
            text = _hashes_json({job_id: job.spec.spec_hash() for job_id, job in jobs.items()})
            digest = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
            self._hashes = (dict(jobs), text, digest)
        return _with_hashes({**info, "spec_digest": digest}, text)


def node_info_json(info: dict[str, Any]) -> str:
    """`json.dumps(info, sort_keys=True, default=str)`, the spec hashes encoded 2,000 at a
    time: one call for 100,000 of them would hold the interpreter (and the loop waiting to
    fire) for a quarter of a second; the pure-Python encoder took seconds and tens of MB."""
    return _with_hashes(info, _hashes_json(info["spec_hashes"]))


def _hashes_json(hashes: Mapping[str, str]) -> str:
    ids = sorted(hashes)
    parts = [
        json.dumps({i: hashes[i] for i in ids[n : n + HASHES_PER_CALL]})[1:-1]
        for n in range(0, len(ids), HASHES_PER_CALL)
    ]
    return "{" + ", ".join(parts) + "}"


def _with_hashes(info: dict[str, Any], hashes_text: str) -> str:
    head = json.dumps({**info, "spec_hashes": None}, sort_keys=True, default=str)
    # the key is written once and no string value can hold it unescaped (quotes are escaped)
    return head.replace('"spec_hashes": null', '"spec_hashes": ' + hashes_text, 1)


def _same_jobs(last: Mapping[str, Any], jobs: Mapping[str, Any]) -> bool:
    if len(last) != len(jobs):
        return False
    for job_id, job in jobs.items():
        old = last.get(job_id)
        if old is not job and (old is None or old.spec is not job.spec):
            return False
    return True
