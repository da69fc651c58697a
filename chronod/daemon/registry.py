"""The registry side of the daemon: load and validate the job files, store the
definitions, and swap in the new ones (a file with errors keeps its last good version).

`Registry` alone holds the carried jobs, the last good version of each file (its jobs and
its windows), the resources' limits and the last reload's errors. A reload is prepared
(`prepare`, off the loop's thread when threaded) and swapped in (`finish`), which returns
a `Changes` value: the loop hands it to the parts that follow the jobs (the timeline and
the lines forget removed jobs, the gate takes the windows, the occurrences of changed jobs
are read again)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping, Protocol

from chronod.core.blackout import Window
from chronod.core.clock import Clock
from chronod.core.model import JobSpec
from chronod.core.policy import REMOVED_FROM_REGISTRY
from chronod.daemon.quarantine import Quarantine
from chronod.daemon.runs import Job, carries, fell_due_cancelled
from chronod.daemon.seams import Log, Metrics, Reloads
from chronod.daemon.synced import Synced
from chronod.fleet.lease import Lease
from chronod.specfile import RegistryResult, merge_order, validator_version
from chronod.store.api import Definitions, Leases, OperatorState, Run, StoreError

REMOVED_UNRUN = f"{REMOVED_FROM_REGISTRY}; it fell due while chronod could not run it"


class RegistryStore(Definitions, Leases, OperatorState, Protocol):
    """The store roles a registry writes: definitions, its node's info, its errors."""


class CheckMarks(Protocol):
    """Where a node keeps the mark of the definitions its stored occurrences were last
    checked against (`chronod.daemon.filestore.StoredFiles`: sealed with the node's key)."""

    def checked(self) -> str | None: ...

    def set_checked(self, mark: str | None) -> None: ...


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
    loaded: RegistryResult  # what the registry loader returned (the maintenance windows come from it)
    digest: str | None = None  # of the carried definitions (`carried_digest`), when marks are kept
    checked: bool = False  # the stored occurrences were checked against these very definitions


@dataclass(frozen=True)
class Changes:
    """What a reload swapped in, for the parts that follow the jobs."""

    initial: bool
    gone: frozenset[str]  # job ids no longer carried (their stored occurrences were cancelled)
    changed: tuple[Job, ...]  # new or edited jobs: their stored occurrences are read again
    everything: bool  # read every stored occurrence again (start-up, or most jobs changed)
    windows: tuple[Window, ...]  # the registry's maintenance windows
    errors: int
    checked: bool = False  # the stored occurrences were checked against these definitions before


class Registry:
    """The carried job definitions and how a reload swaps them in."""

    def __init__(
        self,
        *,
        clock: Clock,
        store: RegistryStore,
        node: str,
        lease: Lease,
        log: Log,
        metrics: Metrics,
        load: Callable[[], RegistryResult],
        reloads: Reloads,
        state_dir: str,
        containment: str | None = None,
    ) -> None:
        self.clock, self.store, self.node, self.lease, self.log = clock, store, node, lease, log
        self.metrics, self._load, self.reloads = metrics, load, reloads
        # jobs whose definition raised at run time, set aside (listed with the registry errors)
        self.quarantine = Quarantine(log, metrics.quarantined, (StoreError,), self.report_problems)
        self.state_dir = state_dir
        self.containment = containment
        self._jobs: dict[str, Job] = {}
        self._file_specs: dict[str, list[JobSpec]] = {}  # last good version of each file
        self._file_windows: dict[str, list[Window]] = {}  # last good windows of each file
        self._resources: dict[str, int] = {}  # resource -> max_concurrency
        self._file_resources: dict[str, dict[str, int]] = {}  # last good resources of each file
        self._problems: list[dict[str, Any]] = []  # the last reload's file errors
        self.synced = Synced()  # what the last reload stored (an unchanged reload skips it)
        # the mark of the definitions the stored occurrences were checked against (None: no
        # marks kept, the simulation); `_mark` is the one stored ("?": not known yet)
        self.marks: CheckMarks | None = None
        self._mark: str | None = "?"
        self._digest: str | None = None  # of the definitions swapped in last

    @property
    def jobs(self) -> Mapping[str, Job]:
        """The carried jobs, by id (read-only: a reload swaps them)."""
        return self._jobs

    def limit(self, resource: str) -> int:
        """The resource's max_concurrency (1 for one the registry does not define)."""
        return self._resources.get(resource, 1)

    def reload(self, initial: bool = False) -> Changes:
        """Validate first, then swap: a file with errors keeps its last good version. On the
        loop's thread, start to end (start-up, the end of an outage)."""
        self.reloads.cancel()  # a reload running on its thread is superseded by this one
        self.synced.forget()  # compare with the store: it may have moved meanwhile (an outage)
        return self.finish(self.prepare(trust=initial), initial)

    def submit(self) -> None:
        """Prepare a reload where the reloads run it (off the loop's thread when threaded)."""
        self.reloads.submit(self.prepare)

    def prepare(self, trust: bool = False) -> Prepared:
        """The heavy half of a reload, safe off the loop's thread (chronod.daemon.reloads):
        read and validate the files, merge them, store the definitions, compile what
        changed and publish the node's spec hashes. Reads the loop's state, changes only
        what reloads alone use (the last good version of each file).

        `trust` (start-up): when the stored mark says the stored occurrences were checked
        against exactly these definitions and nothing wrote a definition since, the
        definitions are not compared with the store again, the stored occurrences are not
        checked again (`Changes.checked`) and schedules compile at their first use."""
        result = self._load()
        specs: dict[str, JobSpec] = {}
        errors: list[dict[str, Any]] = []
        for fres in merge_order(result.files):  # root-owned files first: their ids win
            path = fres.path
            bad = [p for p in fres.problems if p.severity == "error"]
            if bad:
                for p in bad:
                    errors.append({"file": p.file or path, "line": p.line, "message": p.format()})
                    self.log("registry.error", "error", file=p.file or path, line=p.line, message=p.format())
                keep = self._file_specs.get(path)
                if keep is not None:
                    self.log("registry.kept_last_good", "warning", file=path, jobs=len(keep))
                    fres_specs = keep
                else:
                    fres_specs = list(fres.specs)
            else:
                fres_specs = list(fres.specs)
                self._file_specs[path] = fres_specs
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
        for path in list(self._file_specs):
            if path not in result.files:
                del self._file_specs[path]
        # a file with errors keeps its last good resources, as it keeps its jobs and windows:
        # without them a kept job's resource fell back to one slot
        for fres in merge_order(result.files):
            if fres.ok or fres.path not in self._file_resources:
                self._file_resources[fres.path] = {n: r.max_concurrency for n, r in (fres.resources or {}).items()}
        self._file_resources = {p: r for p, r in self._file_resources.items() if p in result.files}
        resources: dict[str, int] = {}
        for fres in merge_order(result.files):
            for name, limit in self._file_resources.get(fres.path, {}).items():
                resources.setdefault(name, limit)
        carried = {i: s for i, s in specs.items() if carries(s, self.node)}
        digest = carried_digest(self.node, carried) if self.marks is not None else None
        checked = False
        if trust and digest is not None and self.marks is not None:
            version = self.store.jobs_version()
            self._mark = self.marks.checked()
            checked = self._mark == _mark(version, digest)
        if checked:
            self.synced.adopt(carried, version)  # the store holds these: the mark says so
        else:
            # nothing when nothing changed
            self.synced.sync(self.store, self.node, carried, before=self.unmark, fell_due=self.fell_due)
        old = dict(self._jobs)  # one C-level copy: the loop may set a job aside meanwhile
        jobs: dict[str, Job] = {}
        build: list[str] = []  # compiled on the loop's thread, under the quarantine's guard
        fresh: list[str] = []  # new or changed: compiled here
        for job_id, spec in carried.items():
            prev = old.get(job_id)
            if prev is not None and (prev.spec is spec or prev.spec == spec):
                jobs[job_id] = prev
                continue
            try:
                # checked: each of these schedules compiled when its occurrences were computed
                # (a spec holding the first occurrence its load computed: its file's validation)
                jobs[job_id] = Job.on(spec, self.node, compiled=not checked)
                fresh.append(job_id)
            except Exception:  # the loop compiles it again and sets it aside
                build.append(job_id)
        result.let_go()  # the JSON texts for the sync and the first occurrences no job took
        gone = [job_id for job_id in old if job_id not in carried]
        info = {
            "registry_loaded_at": self.clock.now().isoformat(),
            "jobs": len(jobs),
            "registry_errors": len(errors),
            "pid": os.getpid(),
            "state_dir": self.state_dir or None,
            "containment": self.containment,
        }
        self.store.set_node_info(self.node, self.lease.token, self.synced.node_info_json(info, jobs))
        return Prepared(specs, carried, jobs, build, fresh, gone, errors, resources, result, digest, checked)

    def finish(self, prep: Prepared, initial: bool = False) -> Changes:
        """The loop's half of a reload: swap the prepared definitions in. Costs what changed."""
        self._resources = prep.resources
        windows = self.keep_windows(prep.loaded)
        self.quarantine.keep_only(prep.specs)
        self._problems = prep.errors
        self.report_problems()
        self.metrics.registry_errors.set(len({e["file"] for e in prep.errors}))
        changes = self.apply_jobs(prep, initial, windows)
        self._digest = prep.digest
        self.reloads.tidy()  # a reload's transient rows and JSON go back to the system
        return changes

    def fell_due(self, spec: JobSpec, after: datetime, now: datetime) -> list[Run]:
        """`Definitions.sync_jobs`'s `fell_due`: a removed job's occurrences after its stored
        one (which had fallen due) that fell due before the removal, never materialized
        because chronod was down or the database out when they did, are cancelled.

        Not those of a `run_on: each` job: it runs during a database outage, and its runs
        are in the spool, replayed after the start's reload (recorded cancelled first, the
        runs that did happen would be refused then); its rows are per node, too. And none
        of a stored definition that no longer compiles (a time zone gone from the system's
        database): the removal must not fail, or no start would get past it."""
        if spec.run_on.each:
            return []
        try:
            job = Job.on(spec, self.node)
            return fell_due_cancelled(job, job.schedule.next_after(after), now, REMOVED_UNRUN)
        except Exception as e:  # noqa: BLE001 - any failure of an old definition: record nothing more
            self.log("registry.removed_unrecorded", "warning", job=spec.id, why=f"{type(e).__name__}: {e}")
            return []

    def unmark(self) -> None:
        """Forget the stored mark before definitions are stored that the stored
        occurrences were not checked against (a crash before the check then checks them
        at the next start)."""
        if self.marks is not None and self._mark is not None:
            self.marks.set_checked(None)
            self._mark = None

    def mark_checked(self) -> None:
        """The stored occurrences of every carried job were just read and checked against
        the definitions swapped in last (or stored from them): mark these definitions, so
        that a start with the same ones and no definition written since checks nothing."""
        if self.marks is None or self._digest is None or self.synced.version is None:
            return
        mark = _mark(self.synced.version, self._digest)
        if mark != self._mark:
            self.marks.set_checked(mark)
            self._mark = mark

    def keep_windows(self, result: RegistryResult) -> tuple[Window, ...]:
        """The registry's maintenance windows; a file with errors keeps its last good ones."""
        for fres in merge_order(result.files):
            if fres.ok:
                self._file_windows[fres.path] = list(fres.blackouts)
        self._file_windows = {p: w for p, w in self._file_windows.items() if p in result.files}
        merged = {w.name: w for ws in self._file_windows.values() for w in ws}
        return tuple(merged.values())

    def report_problems(self) -> None:
        """The registry errors of the last reload and the quarantined jobs, for `status`."""
        self.store.set_registry_errors(self.node, self._problems + self.quarantine.problems())

    def set_aside(self) -> list[str]:
        """Quarantined jobs leave the schedule (their history and stored rows stay); returns
        their ids, for the parts that follow the jobs."""
        ids = [j for j in self.quarantine.ids() if j in self._jobs]
        for job_id in ids:
            del self._jobs[job_id]
        return ids

    def apply_jobs(self, prep: Prepared, initial: bool, windows: tuple[Window, ...]) -> Changes:
        """Swap in the prepared jobs: set aside what the quarantine holds, compile what the
        preparation could not, and say what changed (a reload that changes nothing makes
        the loop read no runs)."""
        old = self._jobs
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
        self._jobs = new
        self.metrics.jobs.set(len(new))
        return Changes(
            initial=initial,
            gone=frozenset(j for j in prep.gone if j in old),
            changed=tuple(changed),
            everything=initial or len(changed) > len(new) // 2,
            windows=windows,
            errors=len(prep.errors),
            checked=prep.checked,
        )


def carried_digest(node: str, carried: Mapping[str, JobSpec]) -> str:
    """A digest of the carried definitions (each id and spec hash), the node and the
    validator (chrono's core code and the time zone data: what computes an occurrence)."""
    h = hashlib.sha256(f"{node}\0{validator_version()}\0".encode())
    h.update("\n".join(f"{i}\0{carried[i].spec_hash()}" for i in sorted(carried)).encode())
    return h.hexdigest()


def _mark(version: tuple[int, Any], digest: str) -> str:
    count, newest = version
    return f"{count}|{newest.isoformat() if newest is not None else ''}|{digest}"
