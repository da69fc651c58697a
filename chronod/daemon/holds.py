"""Pauses and maintenance windows in the loop: what the rule in chronod.core.blackout
decides, done. An occurrence that would start while its job is paused is recorded
`skipped_paused`; inside a window, `skipped_blackout`, or (`blackout: defer`) held pending
until the window ends and then released through the job's catch-up policy.

A held occurrence stays `pending` in the store, so a restart finds it again (it falls due
at once and meets the same rule); the chain's next occurrence is stored when it is held.
"""

from __future__ import annotations

import heapq
from datetime import datetime

from chronod.core import blackout
from chronod.daemon.runs import Job
from chronod.store.api import Run


class Holds:
    """Pauses and windows. Part of `Daemon` (chronod.daemon.loop)."""

    def refresh_paused(self) -> None:
        """Read the pauses that hold now (a pause past its `until` is over by itself). A job
        the loop still runs keeps its pause while a reload that removes it is prepared."""
        rows = self.store.pauses(include_removed=True)
        self.pauses = [blackout.Pause(r.kind, r.target, r.reason, r.by, r.since, r.until) for r in rows]
        self.paused = {p.target: p.reason for p in self.pauses if p.kind == "job"}

    def holds_back(self, job: Job, run: Run, next_run: Run | None, pauses: bool = True) -> bool:
        """Apply a pause or a window to a scheduled occurrence about to start; True when it
        does not start now (settled, or held until the window ends)."""
        now = self.clock.now()
        pause = blackout.paused(job.spec, self.pauses, now) if pauses else None
        if pause is not None:
            self.settle(run, "skipped_paused", pause.describe(), next_run)
            return True
        hit = blackout.blackout_at(job.spec, self.blackouts, now)
        if hit is None:
            return False
        if run.state == "retry_wait":
            run.next_attempt_at = hit.end  # a retry waits for the window's end, whatever the policy
            self.track(run)
            self.log("run.held", job=run.job_id, run=run.run_id, window=hit.window.name, until=hit.end)
            return True
        if job.spec.blackout != "defer":
            self.settle(run, "skipped_blackout", hit.describe(), next_run)
            return True
        self.store_runs([next_run])  # the chain does not wait for the window
        self.hold([run], hit)
        self.log("run.deferred", job=run.job_id, run=run.run_id, window=hit.window.name, until=hit.end)
        return True

    def hold_all(self, job: Job, due: list[Run], extra: list[Run], nxt: Run | None, now: datetime) -> bool:
        """Inside a window, a `defer` job's due occurrences are all held, before any catch-up
        decision (after a restart too): the catch-up policy applies when the window ends."""
        if job.spec.blackout != "defer" or blackout.paused(job.spec, self.pauses, now) is not None:
            return False
        hit = blackout.blackout_at(job.spec, self.blackouts, now)
        if hit is None:
            return False
        self.store_runs([*extra, nxt])
        if nxt is not None:
            self.track(nxt)
        self.hold(due, hit)
        self.log("runs.deferred", job=job.spec.id, count=len(due), window=hit.window.name, until=hit.end)
        return True

    def hold(self, runs: list[Run], hit: blackout.Hit) -> None:
        """Hold due occurrences until the window ends; their rows say so (for the audit:
        "deferred by window NAME (reason) until T"), the ones still to be stored included."""
        why = hit.deferral()
        for run in runs:
            run.error, run.next_attempt_at = why, hit.end
            self.pending[run.run_id] = run
            self.held_until[run.run_id] = hit.end
            self.seq += 1
            heapq.heappush(self.heap, (hit.end, self.seq, run.run_id))
        self.store.note_held([r.run_id for r in runs], why, hit.end, node=self.node, token=self.lease.token)

    def was_held(self, job: Job, run: Run) -> bool:
        """Whether a stored pending occurrence is one a window holds (or held before a
        restart): its time has come and a window of the job covered it."""
        if self.held_until.pop(run.run_id, None) is not None:
            return True
        if job.spec.blackout != "defer" or run.fire_at > self.clock.now():
            return False
        return blackout.blackout_at(job.spec, self.blackouts, run.fire_at) is not None

    def rehold(self) -> None:
        """After the pending occurrences were read again: keep holding the ones still held."""
        for rid, until in list(self.held_until.items()):
            if rid in self.pending:
                self.seq += 1
                heapq.heappush(self.heap, (until, self.seq, rid))
            else:
                del self.held_until[rid]

    def take_held(self, rid: str, now: datetime) -> bool | None:
        """For a popped heap entry: None when the occurrence is not held; False while its
        window lasts (an earlier entry for it); True when it is released now."""
        until = self.held_until.get(rid)
        if until is None:
            return None
        if until > now:
            return False
        del self.held_until[rid]
        return True

    def release(self, job: Job, runs: list[Run], superseded: bool = False) -> None:
        """Occurrences held by a window that has ended: run once (catch-up `latest`), each
        in turn (`all`), or none (`none`); the others are recorded skipped_blackout. When an
        occurrence of the job fell due as the window ended (`superseded`), that one is the
        run once, unless the policy is `all`."""
        for r in runs:
            self.pending.pop(r.run_id, None)
        go, skip = blackout.release(job.spec.catchup, [r.scheduled_at for r in runs])
        if superseded and job.spec.catchup == "latest":
            go, skip = [], sorted([*go, *skip])
        by_at = {r.scheduled_at: r for r in runs}
        for at in skip:
            why = "deferred by a maintenance window; "
            if go:
                why += f"catchup: latest released the occurrence of {blackout.stamp(go[-1])}"
            elif superseded:
                why += "the occurrence due as the window ended ran in its place"
            else:
                why += "catchup: none"
            self.settle(by_at[at], "skipped_blackout", why, None)
        if len(go) > 1:
            self.queue_backlog(job, [by_at[at] for at in go])
        elif go:
            self.start_or_queue(job, by_at[go[0]])
