"""The loop's agenda: the occurrences it tracks and when it must look at each.

`Timeline` alone holds the wake-up heap, its sequence, the tracked pending / retry_wait
runs (also by job), when to look for the other nodes' late occurrences (a rescue:
chronod.core.rescue) and the ones a maintenance window holds (until its end). Every other part asks it: `track` a run, `due(now)` pops what fell
due, `drop` forgets jobs, `earliest` tells the loop when to wake."""

from __future__ import annotations

import heapq
from datetime import datetime
from types import MappingProxyType
from typing import Collection, Iterator, Mapping

from chronod.core.model import RunState
from chronod.store.api import Run

LOOK = "\0look"  # the heap's key of a look for late occurrences (no run has it)


class Timeline:
    """Tracked occurrences and the heap of (wake at, sequence, run id)."""

    def __init__(self) -> None:
        self._heap: list[tuple[datetime, int, str]] = []
        self._seq = 0
        self._pending: dict[str, Run] = {}  # run_id -> stored pending / retry_wait run
        self._look_at: datetime | None = None  # when to look for the other nodes' late occurrences
        self._held_until: dict[str, datetime] = {}  # run_id -> end of the window holding it
        # job_id -> its tracked runs (run_id -> run): the same runs as `_pending`, by job, so
        # that a question about one job's runs does not walk every tracked run
        self._by_job: dict[str, dict[str, Run]] = {}

    # ------------------------------------------------------------------ reads
    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._pending

    def get(self, run_id: str) -> Run | None:
        return self._pending.get(run_id)

    def view(self) -> Mapping[str, Run]:
        """The tracked runs by run id, read-only."""
        return MappingProxyType(self._pending)

    def runs(self) -> Iterator[Run]:
        """The tracked runs (do not track or drop while iterating)."""
        return iter(self._pending.values())

    def job_runs(self, job_id: str) -> Iterator[Run]:
        """The job's tracked runs (do not track or drop while iterating)."""
        return iter(self._by_job.get(job_id, {}).values())

    def retrying(self, job_id: str) -> list[Run]:
        """The job's tracked runs that wait for their next attempt, oldest first (the
        overlap rule asks on every start: by job, not a walk over every tracked run)."""
        runs = [r for r in self.job_runs(job_id) if r.state == RunState.RETRY_WAIT]
        return sorted(runs, key=lambda r: (r.scheduled_at, r.run_id))

    def earliest(self) -> datetime | None:
        """When the next entry falls due (None: nothing tracked)."""
        return self._heap[0][0] if self._heap else None

    # ------------------------------------------------------------------ writes
    def track(self, run: Run) -> None:
        """Track a pending occurrence (at its fire time) or a retry (at its next attempt)."""
        self._put(run)
        retry = run.state == RunState.RETRY_WAIT and run.next_attempt_at
        self._push(run.next_attempt_at if retry and run.next_attempt_at else run.fire_at, run.run_id)

    def track_all(self, runs: list[Run]) -> None:
        """`track` each of `runs` (read from the store: 100,000 at a start), the heap
        rebuilt once instead of pushed to run by run."""
        heap = self._heap
        for run in runs:
            self._put(run)
            retry = run.state == RunState.RETRY_WAIT and run.next_attempt_at
            self._seq += 1
            heap.append((run.next_attempt_at if retry and run.next_attempt_at else run.fire_at, self._seq, run.run_id))
        heapq.heapify(heap)

    def wake_at(self, at: datetime, key: str) -> None:
        """Wake the loop at `at` for `key` (a tracked run, or a bare wake-up under a key no
        run has)."""
        self._push(at, key)

    def look_at(self, at: datetime) -> None:
        """Look for the other nodes' late occurrences at `at` (or sooner, if asked so)."""
        if self._look_at is None or at < self._look_at:
            self._look_at = at
            self._push(at, LOOK)

    def look_due(self, now: datetime) -> bool:
        """Whether it is time to look for late occurrences (then `look_at` says when next).
        A fleet's node looks once at its start (None: never looked)."""
        return self._look_at is None or self._look_at <= now

    def looked(self, at: datetime) -> None:
        """Looked now: the next look is at `at`."""
        self._look_at = None
        self.look_at(at)

    def hold(self, run: Run, until: datetime) -> None:
        """A maintenance window holds the occurrence until `until`."""
        self._put(run)
        self._held_until[run.run_id] = until
        self._push(until, run.run_id)

    def due(self, now: datetime) -> list[Run]:
        """Pop every entry due at `now`: the tracked runs they name, once each, in order
        (a held occurrence may have two entries at its window's end)."""
        out: list[Run] = []
        seen: set[str] = set()
        while self._heap and self._heap[0][0] <= now:
            _, _, rid = heapq.heappop(self._heap)
            run = self._pending.get(rid)
            if run is not None and rid not in seen:
                seen.add(rid)
                out.append(run)
        return out

    def take(self, run_id: str) -> Run | None:
        """Stop tracking a run (it is being started or settled); its entries are ignored."""
        run = self._pending.pop(run_id, None)
        if run is not None:
            self._unindex(run)
        return run

    def take_held(self, run_id: str, now: datetime) -> bool | None:
        """For a popped entry: None when the occurrence is not held; False while its window
        lasts (an earlier entry for it); True when it is released now."""
        until = self._held_until.get(run_id)
        if until is None:
            return None
        if until > now:
            return False
        del self._held_until[run_id]
        return True

    def was_held(self, run_id: str) -> bool:
        """Whether a window held the occurrence; it no longer does."""
        return self._held_until.pop(run_id, None) is not None

    def drop(self, job_ids: Collection[str], entries: bool = False) -> None:
        """Forget the tracked runs of these jobs (and, with `entries`, their heap entries;
        otherwise they are ignored when popped)."""
        if not job_ids:
            return
        dropped = {rid for rid, run in self._pending.items() if run.job_id in job_ids}
        for rid in dropped:
            self._unindex(self._pending.pop(rid))
        if entries:
            self._heap = [e for e in self._heap if e[2] not in dropped]
            heapq.heapify(self._heap)

    def reset(self) -> None:
        """Forget every tracked run and entry (the stored ones are read again); a window's
        holds are kept for `rehold`."""
        self._pending, self._heap, self._by_job = {}, [], {}
        if self._look_at is not None:
            self._push(self._look_at, LOOK)

    def rehold(self) -> None:
        """After the pending occurrences were read again: keep holding the ones still held."""
        for rid, until in list(self._held_until.items()):
            if rid in self._pending:
                self._push(until, rid)
            else:
                del self._held_until[rid]

    def _put(self, run: Run) -> None:
        old = self._pending.get(run.run_id)
        if old is not None:
            self._unindex(old)
        self._pending[run.run_id] = run
        self._by_job.setdefault(run.job_id, {})[run.run_id] = run

    def _unindex(self, run: Run) -> None:
        runs = self._by_job.get(run.job_id)
        if runs is not None:
            runs.pop(run.run_id, None)
            if not runs:
                del self._by_job[run.job_id]

    def _push(self, at: datetime, key: str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, key))
