"""The registry side of the daemon: load and validate the job files, swap in the new
definitions (a file with errors keeps its last good version), keep each carried job's
next occurrence stored and tracked, repair that invariant (`reconcile`), start @reboot
jobs, and learn which version of a disagreeing job the fleet runs."""

from __future__ import annotations

import heapq
import os
from datetime import datetime, timedelta, timezone
from typing import Any

from chronod.core import occurrence
from chronod.core.model import JobSpec
from chronod.daemon import kernel
from chronod.daemon.runs import Job, carries
from chronod.fleet import placement
from chronod.specfile import merge_order
from chronod.store.api import Run

RECONCILE_EVERY_S = 300.0
VERSION_CHECK_EVERY_S = 10.0


class Registry:
    """Reload, occurrences to track, reconcile. Part of `Daemon` (chronod.daemon.loop)."""

    def reload(self, initial: bool = False) -> None:
        """Validate first, then swap: a file with errors keeps its last good version."""
        result = self._load_registry()
        specs: dict[str, JobSpec] = {}
        errors: list[dict[str, Any]] = []
        for fres in merge_order(result.files):  # root-owned files first: their ids win
            path = fres.path
            bad = [p for p in fres.problems if p.severity == "error"]
            if bad:
                for p in bad:
                    errors.append({"file": p.file or path, "line": p.line, "message": p.format()})
                    self.log("registry.error", "error", file=p.file or path, line=p.line, message=p.format())
                keep = self.file_specs.get(path)
                if keep is not None:
                    self.log("registry.kept_last_good", "warning", file=path, jobs=len(keep))
                    fres_specs = keep
                else:
                    fres_specs = list(fres.specs)
            else:
                fres_specs = list(fres.specs)
                self.file_specs[path] = fres_specs
            for spec in fres_specs:
                if spec.id in specs:
                    continue  # the loader reports duplicates; the first file wins
                specs[spec.id] = spec
        for p in result.problems:
            if p.file not in result.files:  # a file skipped for its name, the directory itself
                self.log(
                    "registry.skipped" if p.severity == "warning" else "registry.error",
                    p.severity,
                    file=p.file,
                    message=p.format(),
                )
        for path in list(self.file_specs):
            if path not in result.files:
                del self.file_specs[path]
        self.keep_windows(result)
        self.resources = {}
        for fres in merge_order(result.files):
            for name, res in (fres.resources or {}).items():
                self.resources.setdefault(name, res.max_concurrency)
        self.quarantine.keep_only(specs)
        self.registry_problems = errors
        self.report_problems()
        self.metrics.registry_errors.set(len({e["file"] for e in errors}))
        self.apply_specs(specs)
        self.next_version_check = 0.0
        self.store.set_node_info(
            self.node,
            self.lease.token,
            {
                "registry_loaded_at": self.clock.now().isoformat(),
                "jobs": len(self.jobs),
                "spec_hashes": {j.spec.id: j.spec.spec_hash() for j in self.jobs.values()},
                "registry_errors": len(errors),
                "pid": os.getpid(),
                "state_dir": str(getattr(self.runner, "state_dir", "")) or None,
            },
        )
        if not initial:
            self.log("registry.reloaded", jobs=len(self.jobs), errors=len(errors))
            self.notifier.status(self.status_line())
        kernel.trim_heap()  # a reload's transient rows and JSON go back to the system

    def keep_windows(self, result: Any) -> None:
        """The registry's maintenance windows; a file with errors keeps its last good ones."""
        for fres in merge_order(result.files):
            if fres.ok:
                self.file_windows[fres.path] = list(fres.blackouts)
        self.file_windows = {p: w for p, w in self.file_windows.items() if p in result.files}
        merged = {w.name: w for ws in self.file_windows.values() for w in ws}
        self.blackouts = list(merged.values())

    def report_problems(self) -> None:
        """The registry errors of the last reload and the quarantined jobs, for `status`."""
        self.store.set_registry_errors(self.node, self.registry_problems + self.quarantine.problems())

    def set_aside(self) -> None:
        """Quarantined jobs leave the schedule (their history and stored rows stay)."""
        for job_id in [j for j in self.jobs if j in self.quarantine]:
            del self.jobs[job_id]
            for rid in [r for r, run in self.pending.items() if run.job_id == job_id]:
                del self.pending[rid]
                self.deferred.discard(rid)
            self.forget_waits(job_id)

    def apply_specs(self, specs: dict[str, JobSpec]) -> None:
        """Swap in a new set of definitions and keep each job's next occurrence right."""
        carried = {i: s for i, s in specs.items() if carries(s, self.node)}
        self.store.sync_jobs(self.node, carried.values())
        old = self.jobs
        new: dict[str, Job] = {}
        for job_id, spec in carried.items():
            prev = old.get(job_id)
            if self.quarantine.holds(spec):
                continue
            if prev is not None and prev.spec == spec:
                new[job_id] = prev
                continue
            with self.quarantine.guard(spec, "schedule"):
                new[job_id] = Job.on(spec, self.node)
        self.jobs = new
        self.metrics.jobs.set(len(new))
        for job_id in old.keys() - new.keys():
            self.forget_job(job_id)
        if new.keys() == old.keys() and all(new[j] is old[j] for j in new):
            return  # nothing changed: what is tracked is still right (a reload of 100,000 jobs reads no runs)
        self.load_pending(changed={j for j in new if old.get(j) is not new[j]} if old else None)

    def forget_job(self, job_id: str) -> None:
        """A removed job: its pending occurrence is cancelled (the store did it); history stays."""
        for rid in [r for r, run in self.pending.items() if run.job_id == job_id]:
            del self.pending[rid]
            self.deferred.discard(rid)
        self.forget_waits(job_id)
        self.log("job.removed", job=job_id)

    def load_pending(self, changed: set[str] | None = None) -> None:
        """Read stored pending occurrences of carried jobs; drop ones whose schedule changed.
        `changed`: the jobs whose definition this reload changed (None: any may have)."""
        keys = {j.key: j for j in self.jobs.values()}
        stored = self.store.pending(list(keys))
        self.pending = {}
        self.heap = []
        self.deferred = set()
        self.backlog = []
        for run in stored:
            job = keys.get(run.job_key)
            if job is None:
                continue
            if run.state == "pending" and run.trigger == "schedule" and not self.still_scheduled(job, run):
                self.store.settle(
                    run.run_id,
                    "cancelled",
                    error="schedule changed before it fell due",
                    next_run=None,
                    node=self.node,
                    token=self.lease.token,
                )
                continue
            if run.state == "pending" and run.trigger != "backfill":  # a backfill's fire time is when it started it
                run.fire_at = run.scheduled_at + timedelta(seconds=job.offset)
            self.track(run)
        have: dict[str, datetime] = {}  # job key -> its earliest stored scheduled occurrence
        for r in self.pending.values():
            if r.trigger == "schedule" and r.state == "pending":
                have[r.job_key] = min(r.scheduled_at, have.get(r.job_key, r.scheduled_at))
        now = self.clock.now()
        fresh = []
        for job in self.jobs.values():
            if job.schedule.kind == "reboot" or not job.spec.enabled:
                continue
            if job.key in have and changed is not None and job.spec.id not in changed:
                continue
            nxt = self.next_run(job, now)
            # a stored occurrence the new schedule keeps may lie beyond its next one (every
            # 15 minutes instead of at :30, edited at :10): the :15 must not be skipped
            if nxt is not None and (job.key not in have or nxt.scheduled_at < have[job.key]):
                fresh.append(nxt)
        if fresh:
            if self.store.insert_runs(fresh) < len(fresh):
                # a job removed and added back before its next occurrence: that occurrence
                # was cancelled with the removal and must not be lost
                self.store.revive(r.run_id for r in fresh)
            for r in fresh:
                self.track(r)
        self.rehold()

    def still_scheduled(self, job: Job, run: Run) -> bool:
        if not job.spec.enabled or job.schedule.kind == "reboot":
            return False
        with self.quarantine.guard(job.spec, "stored occurrences"):
            return job.schedule.next_after(run.scheduled_at - timedelta(seconds=1)) == run.scheduled_at
        return True  # the job is set aside; its stored rows stay as they are

    def next_run(self, job: Job, after: datetime) -> Run | None:
        """The first occurrence whose fire time is after `after`, as a pending Run."""
        with self.quarantine.guard(job.spec, "next occurrence"):
            at = job.schedule.next_after(after - timedelta(seconds=job.offset))
            return None if at is None else self.make_run(job, at)
        return None

    def make_run(self, job: Job, scheduled_at: datetime, trigger: str = "schedule", rid: str | None = None) -> Run:
        return Run(
            run_id=rid or occurrence.run_id(job.key, scheduled_at),
            job_id=job.spec.id,
            job_key=job.key,
            scheduled_at=scheduled_at,
            fire_at=scheduled_at + timedelta(seconds=job.offset),
            state="pending",
            trigger=trigger,
        )

    def track(self, run: Run) -> None:
        self.pending[run.run_id] = run
        wake = run.next_attempt_at if run.state == "retry_wait" and run.next_attempt_at else run.fire_at
        self.seq += 1
        heapq.heappush(self.heap, (wake, self.seq, run.run_id))

    def reconcile(self) -> None:
        """Check the invariant 'every enabled job has its next occurrence stored'; repair."""
        self.next_reconcile = self.clock.monotonic() + RECONCILE_EVERY_S
        stored = {
            r.job_key
            for r in self.store.pending([j.key for j in self.jobs.values()])
            if r.state == "pending" and r.trigger == "schedule"
        }
        missing = [
            j for j in self.jobs.values() if j.spec.enabled and j.schedule.kind != "reboot" and j.key not in stored
        ]
        self.metrics.without_next.set(len(missing))
        if not missing:
            return
        runs = [r for r in (self.next_run(j, self.clock.now()) for j in missing) if r is not None]
        self.store.insert_runs(runs)
        for r in runs:
            self.track(r)
        self.metrics.repairs.inc(len(runs))
        self.log(
            "reconcile.repaired",
            "warning",
            definitions_without_next_timer=len(missing),
            jobs=",".join(j.spec.id for j in missing[:20]),
        )

    def reboot_jobs(self) -> None:
        """@reboot jobs run once per kernel boot (boot id), not once per chronod start."""
        for job in self.jobs.values():
            if job.schedule.kind != "reboot" or not job.spec.enabled:
                continue
            state = self.store.get_job_state(job.key)
            if state.get("boot_id") == self.boot_id:
                continue
            at = datetime.fromtimestamp(int(self.boot_time), timezone.utc)
            run = self.make_run(job, at, trigger="schedule")
            run.fire_at = self.clock.now()
            self.store.insert_runs([run])
            self.store.set_job_state(job.key, {**state, "boot_id": self.boot_id})
            self.start_or_queue(job, run)

    def check_versions(self) -> None:
        """Which version of each disagreeing job the fleet runs, and which node dispatches
        each `any` job (chronod.fleet.placement)."""
        self.next_version_check = self.clock.monotonic() + VERSION_CHECK_EVERY_S
        local = {j.spec.id: j.spec.spec_hash() for j in self.jobs.values() if not j.spec.run_on.each}
        nodes, now = self.store.nodes(), self.clock.now()
        lost = placement.outvoted(local, nodes, now)
        carried = {n.name: (n.info or {}).get("spec_hashes") or {} for n in nodes if placement.node_live(n, now)}
        carried[self.node] = local
        if carried != self.carried:
            self.carried, self.owners = carried, {}
        for job_id, best in lost.items():
            if self.outvoted.get(job_id) != best:
                self.log(
                    "job.version_outvoted",
                    "warning",
                    job=job_id,
                    local_hash=local[job_id],
                    fleet_hash=best,
                    note="this node's definition differs from the fleet's; it leaves this job to the others",
                )
        for job_id in self.outvoted.keys() - lost.keys():
            self.log("job.version_agreed", job=job_id)
        self.outvoted = lost
