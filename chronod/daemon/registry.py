"""The registry side of the daemon: load and validate the job files, swap in the new
definitions (a file with errors keeps its last good version), keep each carried job's
next occurrence stored and tracked, repair that invariant (`reconcile`), start @reboot
jobs, and learn which version of a disagreeing job the fleet runs."""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from chronod.core import occurrence
from chronod.core.model import JobSpec
from chronod.daemon.runs import Job, carries
from chronod.fleet import placement
from chronod.specfile import merge_order
from chronod.store.api import Run

RECONCILE_EVERY_S = 300.0
# First occurrences are stored before READY only when they fire this soon; the others are
# stored after it, earliest first, STORE_SLICE a wake-up (100,000 new jobs no longer hold
# the start-up for their inserts, and no wake-up holds firing for long).
STORE_AHEAD_S = 60.0
STORE_SLICE = 1000
VERSION_CHECK_EVERY_S = 10.0


@dataclass
class Prepared:
    """A reload prepared off the loop's thread (`Registry.prepare_reload`)."""

    specs: dict[str, JobSpec]  # every valid definition, by id
    carried: dict[str, JobSpec]  # those this node runs
    jobs: dict[str, Job]  # the carried jobs: unchanged ones are the loop's own objects
    build: list[str]  # ids whose schedule the loop compiles (it raised here)
    fresh: list[str]  # ids new or changed, compiled by the preparation
    gone: list[str]  # ids the loop carried and the registry no longer has
    errors: list[dict[str, Any]]
    resources: dict[str, int]
    loaded: Any  # what the registry loader returned (the maintenance windows come from it)


class Registry:
    """Reload, occurrences to track, reconcile. Part of `Daemon` (chronod.daemon.loop)."""

    def reload(self, initial: bool = False) -> None:
        """Validate first, then swap: a file with errors keeps its last good version. On the
        loop's thread, start to end (start-up, the end of an outage)."""
        self.reloads.cancel()  # a reload running on its thread is superseded by this one
        self.synced.forget()  # compare with the store: it may have moved meanwhile (an outage)
        self.finish_reload(self.prepare_reload(), initial)

    def prepare_reload(self) -> Prepared:
        """The heavy half of a reload, safe off the loop's thread (chronod.daemon.reloads):
        read and validate the files, merge them, store the definitions, compile what
        changed and publish the node's spec hashes. Reads the loop's state, changes only
        what reloads alone use (the last good version of each file)."""
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
        resources: dict[str, int] = {}
        for fres in merge_order(result.files):
            for name, res in (fres.resources or {}).items():
                resources.setdefault(name, res.max_concurrency)
        carried = {i: s for i, s in specs.items() if carries(s, self.node)}
        self.synced.sync(self.store, self.node, carried)  # nothing when nothing changed
        old = dict(self.jobs)  # one C-level copy: the loop may set a job aside meanwhile
        jobs: dict[str, Job] = {}
        build: list[str] = []  # compiled on the loop's thread, under the quarantine's guard
        fresh: list[str] = []  # new or changed: compiled here
        for job_id, spec in carried.items():
            prev = old.get(job_id)
            if prev is not None and (prev.spec is spec or prev.spec == spec):
                jobs[job_id] = prev
                continue
            try:
                jobs[job_id] = Job.on(spec, self.node)
                fresh.append(job_id)
            except Exception:  # the loop compiles it again and sets it aside
                build.append(job_id)
        gone = [job_id for job_id in old if job_id not in carried]
        info = {
            "registry_loaded_at": self.clock.now().isoformat(),
            "jobs": len(jobs),
            "registry_errors": len(errors),
            "pid": os.getpid(),
            "state_dir": str(getattr(self.runner, "state_dir", "")) or None,
        }
        self.store.set_node_info(self.node, self.lease.token, self.synced.node_info_json(info, jobs))
        return Prepared(specs, carried, jobs, build, fresh, gone, errors, resources, result)

    def finish_reload(self, prep: Prepared, initial: bool = False) -> None:
        """The loop's half of a reload: swap the prepared definitions in. Costs what changed."""
        self.resources = prep.resources
        self.keep_windows(prep.loaded)
        self.quarantine.keep_only(prep.specs)
        self.registry_problems = prep.errors
        self.report_problems()
        self.metrics.registry_errors.set(len({e["file"] for e in prep.errors}))
        self.apply_jobs(prep, initial)
        self.next_version_check = 0.0
        if not initial:
            self.log("registry.reloaded", jobs=len(self.jobs), errors=len(prep.errors))
            self.notifier.status(self.status_line())
        self.reloads.tidy()  # a reload's transient rows and JSON go back to the system

    def collect_reload(self) -> None:
        """Swap in a reload prepared on its thread, if one finished (see `tick`)."""
        try:
            prep = self.reloads.take()
        except Exception:
            self.reload_wanted = True  # the end of the outage reloads again
            self.notifier.ready(self.status_line())
            raise
        if prep is None:
            return
        try:
            self.finish_reload(prep)
        finally:
            self.notifier.ready(self.status_line())  # systemd's "reloading" ends here
        self.reloads.resume()

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
        for job_id in [j for j in self.quarantine.ids() if j in self.jobs]:
            del self.jobs[job_id]
            for rid in [r for r, run in self.pending.items() if run.job_id == job_id]:
                del self.pending[rid]
                self.deferred.discard(rid)
            self.forget_waits(job_id)

    def apply_jobs(self, prep: Prepared, initial: bool) -> None:
        """Swap in the prepared jobs: set aside what the quarantine holds, compile what the
        preparation could not, forget removed jobs, and re-read the stored occurrences of
        the jobs that changed only (a reload that changes nothing reads no runs)."""
        old = self.jobs
        new = prep.jobs
        for job_id in self.quarantine.ids():
            if job_id in new and self.quarantine.holds(prep.carried[job_id]):
                del new[job_id]
        # what changed, as the preparation saw it: the loop's thread never walks all the jobs
        changed = [new[j] for j in prep.fresh if j in new]
        for job_id in prep.build:
            spec = prep.carried[job_id]
            prev = old.get(job_id)
            if self.quarantine.holds(spec):
                continue
            if prev is not None and prev.spec == spec:
                new[job_id] = prev
                continue
            with self.quarantine.guard(spec, "schedule"):
                new[job_id] = Job.on(spec, self.node)
                changed.append(new[job_id])
        self.jobs = new
        self.metrics.jobs.set(len(new))
        self.forget_jobs({j for j in prep.gone if j in old})
        if initial or len(changed) > len(new) // 2:
            self.load_pending(edited=set() if initial else {j.spec.id for j in changed})
        elif changed:
            self.load_pending(changed)

    def forget_jobs(self, job_ids: set[str]) -> None:
        """Removed jobs: their pending occurrences were cancelled by the store; history stays."""
        if not job_ids:
            return
        for rid in [r for r, run in self.pending.items() if run.job_id in job_ids]:
            del self.pending[rid]
            self.deferred.discard(rid)
        for job_id in job_ids:
            self.forget_waits(job_id)
            self.log("job.removed", job=job_id)

    def load_pending(self, only: list[Job] | None = None, edited: set[str] | None = None) -> None:
        """Read stored pending occurrences of carried jobs (or of the jobs in `only`, whose
        definitions changed); drop ones whose schedule changed. `edited`: the job ids whose
        definitions this reload changed, when `only` is not given."""
        if only is None:
            keys = {j.key: j for j in self.jobs.values()}
            self.pending, self.heap, self.deferred, self.backlog = {}, [], set(), []
            self.unstored = []
        else:
            keys = {j.key: j for j in only}
            ids = {j.spec.id for j in only}
            dropped = {rid for rid, run in self.pending.items() if run.job_id in ids}
            for rid in dropped:
                del self.pending[rid]
                self.deferred.discard(rid)
            self.heap = [e for e in self.heap if e[2] not in dropped]
            heapq.heapify(self.heap)
            self.backlog = [(j, r) for j, r in self.backlog if r.job_id not in ids]
            self.unstored = [r for r in self.unstored if r.job_id not in ids]
        stored = self.store.pending(list(keys))
        for run in stored:
            job = keys.get(run.job_key)
            if job is None:
                continue
            if run.state == "pending" and run.trigger == "schedule" and not self.still_scheduled(job, run):
                held = self.was_held(job, run)  # it fell due and a window held it
                self.store.settle(
                    run.run_id,
                    "skipped_blackout" if held else "cancelled",
                    error="deferred by a maintenance window; the schedule changed before the window ended"
                    if held
                    else "schedule changed before it fell due",
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
        now, fresh = self.clock.now(), []
        edited = {j.spec.id for j in only} if only is not None else (edited or set())
        for job in keys.values():
            if job.schedule.kind == "reboot" or not job.spec.enabled:
                continue
            if job.key in have and job.spec.id not in edited:
                continue
            nxt = self.next_run(job, now)
            # an edited schedule may keep a stored occurrence beyond its own next one (at :30
            # hourly edited at :10 to every 15 minutes): the :15 must not be skipped
            if nxt is not None and (job.key not in have or nxt.scheduled_at < have[job.key]):
                fresh.append(nxt)
        if fresh:
            later = self.clock.now() + timedelta(seconds=STORE_AHEAD_S)
            soon = [r for r in fresh if r.fire_at <= later]
            self.unstored = sorted(self.unstored + [r for r in fresh if r.fire_at > later], key=_fire_order)
            self.store_fresh(soon)
        self.rehold()

    def store_fresh(self, runs: list[Run]) -> None:
        """Store and track new first occurrences."""
        if runs and self.store.insert_runs(runs) < len(runs):
            # a job removed and added back before its next occurrence: that occurrence
            # was cancelled with the removal and must not be lost
            self.store.revive(r.run_id for r in runs)
        for r in runs:
            self.track(r)

    def store_some(self, everything: bool = False) -> None:
        """Store the next slice of the first occurrences left for after READY (earliest
        first); the loop wakes again at once while some are left (`next_wake`)."""
        soon = self.clock.now() + timedelta(seconds=STORE_AHEAD_S / 10)
        while self.unstored:
            n = len(self.unstored) if everything else STORE_SLICE
            while n < len(self.unstored) and self.unstored[n].fire_at <= soon:
                n += 1  # a loop that fell behind stores at least what fires next
            part, self.unstored = self.unstored[:n], self.unstored[n:]
            self.store_fresh([r for r in part if r.job_id in self.jobs and self.jobs[r.job_id].key == r.job_key])
            if not everything:
                return

    def still_scheduled(self, job: Job, run: Run) -> bool:
        if not job.spec.enabled or job.schedule.kind == "reboot":
            return False
        with self.quarantine.guard(job.spec, "stored occurrences"):
            return job.schedule.next_after(run.scheduled_at - timedelta(seconds=1)) == run.scheduled_at
        return True  # the job is set aside; its stored rows stay as they are

    def next_run(self, job: Job, after: datetime) -> Run | None:
        """The first occurrence whose fire time is after `after`, as a pending Run."""
        return self.quarantine.call(job.spec, "next occurrence", self._next_run, job, after)

    def _next_run(self, job: Job, after: datetime) -> Run | None:
        at = job.schedule.next_after(after - timedelta(seconds=job.offset))
        return None if at is None else self.make_run(job, at)

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
        self.store_some(everything=True)  # what is left for after READY is not missing
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


def _fire_order(run: Run) -> tuple[datetime, str]:
    return (run.fire_at, run.run_id)
