"""Runs that wait for their turn: a catch-up backlog that drains in scheduled order (with
the occurrences that fall due meanwhile queued behind it), and runs that wait for a slot
of their resource. Who goes next is decided by chronod.core.policy (`catchup_turn`,
`resource_admission`); `Lines` alone keeps the lines and hands the answers back as runs
to start and runs that waited too long; the admission (chronod.daemon.admission) acts.
A waiting run stays `pending` in the store, and its row says which line it waits in and
until when at the latest (`next_attempt_at`: fire time + catchup_window_s), so that the
next start after a crash puts it back in its line (`waited_in_line`) instead of reading it
as an occurrence that fell due while chronod was down; one that waited past its catch-up
window ends `skipped_resource` (resource), or (backlog) `skipped_overlap` when it fell due
with chronod up and `skipped_outage` when it fell due while chronod could not run it."""

from __future__ import annotations

import heapq
from collections import deque
from datetime import datetime, timedelta
from typing import Collection, Iterable, KeysView, Mapping

from chronod.core import blackout, policy
from chronod.core.model import JobSpec, RunState, Trigger
from chronod.daemon.runs import Job
from chronod.store.api import Run

GROUP_FULL_RETRY_S = 1.0  # a fleet's resource was full in the store: ask again this much later
EXPIRY_SLACK = timedelta(milliseconds=5)  # wake just after a waiting run's deadline
# a scheduled occurrence in its job's line behind a backfill or manual run (`forbid`) says so
# (the schedule comes first: it waits its turn; `Lines.wait_behind`)
BEHIND = "waiting its turn behind "
QUEUED = "queued behind the catch-up backlog"  # an occurrence that fell due while one drained


def _turn_matters(line: Iterable[Run], window_s: int, now: datetime) -> list[Run]:
    """Of a catch-up line under `forbid` or `replace`, the runs the rule can decide now:
    those past their window and the first of the others by (fire time, run id), the one
    that starts when none of the job's runs is going. The rule answers the same about
    them as about the whole line, without a `Waiting` made for every run at every wake-up:
    a `catchup: all` backlog that outlasts its period holds up to catchup_window_s /
    period runs (4,320 of a job every 20 s), and building and sorting them all took most
    of the CPU of a simulated month.

    The line is in scheduled order, and no run fires before its scheduled time (its fire
    time is that plus its job's jitter offset, `runs.new_run`): the walk stops at the
    first run scheduled after both the cutoff and the head's fire time, as none after it
    can be past its window or ahead of the head."""
    cutoff = now - timedelta(seconds=window_s)  # past it: now > fire time + window (policy._expired)
    out: list[Run] = []
    head: Run | None = None
    for r in line:
        if head is not None and r.scheduled_at >= cutoff and r.scheduled_at > head.fire_at:
            break
        if r.fire_at < cutoff:
            out.append(r)
        elif head is None or (r.fire_at, r.run_id) < (head.fire_at, head.run_id):
            head = r
    if head is not None:
        out.append(head)
    return out


def _first_fire(line: Iterable[Run]) -> datetime:
    """The earliest fire time in a catch-up line (in scheduled order, no run firing before
    its scheduled time: `_turn_matters`)."""
    first: datetime | None = None
    for r in line:
        if first is not None and r.scheduled_at >= first:
            break
        if first is None or r.fire_at < first:
            first = r.fire_at
    assert first is not None, "asked of an empty line"
    return first


def slot_since(run: Run) -> datetime:
    """From when a run's wait for a slot of its resource counts (its deadline is this plus
    `catchup_window_s`): its fire time, or for a retry the time the retry fell due. An
    attempt may end after its occurrence's catch-up window, and its retry still starts."""
    if run.state == RunState.RETRY_WAIT and run.next_attempt_at is not None:
        return max(run.fire_at, run.next_attempt_at)
    return run.fire_at


def _scheduled(run: Run) -> tuple[datetime, str]:
    """A catch-up line's order: scheduled time, then run id."""
    return run.scheduled_at, run.run_id


def waited_in_line(error: str | None) -> bool:
    """Whether a pending row says its occurrence waited in a line (a resource's, or its job's
    catch-up line, behind a backlog or a backfill or manual run) with chronod up."""
    e = error or ""
    return e == QUEUED or e.startswith(BEHIND) or e.startswith(blackout.WAITING_FOR)


class Lines:
    """Catch-up queues (per job) and resource lines (per resource)."""

    def __init__(self) -> None:
        self._queued: dict[str, deque[Run]] = {}  # job_id -> catch-up occurrences waiting for their turn
        self._catching_up: dict[str, set[str]] = {}  # job_id -> run ids started from its catch-up line
        # the run ids a catch-up line sent to its resource's line, while they wait there
        # (`ahead_of_line`): the line waits for them as for a run going
        self._from_line: set[str] = set()
        # resource -> the marked runs (`_from_line`) its last turn started: a fleet's full
        # group puts them back in front (`back_in_front`), still marked; `tidy` unmarks the rest
        self._started: dict[str, set[str]] = {}
        self._waiting: dict[str, _Line] = {}  # resource -> runs waiting for a slot
        self._group_retry_at: dict[str, datetime] = {}  # resource -> when to ask a full fleet again
        # run id -> in how many lines it waits: `held`, asked on every wake-up, kept as the
        # lines change instead of gathered from every line after each change
        self._held: dict[str, int] = {}
        self._first_fire: dict[str, datetime] = {}  # job_id -> the earliest fire time in its catch-up line
        # job_id -> the definition under which no scheduled occurrence in its catch-up line
        # replaces another (`replaced`): asked at every wake-up and after every ending, so
        # kept until the line takes in new runs (taking runs out cannot make one replace another)
        self._unreplaced: dict[str, JobSpec] = {}
        # job_id -> (definition, until when): the last drain found a run of the job going and
        # nothing in its line to move before then (`waits_while_going`); forgotten with the
        # line's first fire time, whenever the line changes
        self._quiet: dict[str, tuple[JobSpec, datetime]] = {}

    # ------------------------------------------------------------------ reads
    def busy(self) -> bool:
        """Whether any run waits in a line."""
        return bool(self._queued or self._waiting)

    def held(self) -> KeysView[str]:
        """The run ids waiting in a line here (not to be picked up again from the schedule):
        a view that follows the lines (do not change a line while walking it)."""
        return self._held.keys()

    def waiting(self, resource: str) -> list[tuple[Job, Run]]:
        """The runs waiting for a slot of `resource`, in the order they joined its line (one
        put back in front first)."""
        line = self._waiting.get(resource)
        return line.in_order() if line is not None else []

    def draining(self, job_id: str, going: Collection[str]) -> bool:
        """Whether any of the job's catch-up backlog is left: queued, or started from the
        queue and still `going` (run ids started or claimed here)."""
        started = self._catching_up.get(job_id)
        if started:
            started &= set(going)
        # a scheduled occurrence waiting behind a backfill or manual run is no backlog
        return bool(started) or any(self.behind(r) is None for r in self._queued.get(job_id, ()))

    def waits_while_going(self, job: Job | None, job_id: str, now: datetime) -> bool:
        """Whether the job's catch-up line stays as it is, as long as a run of the job is going
        (the caller asks that): the last drain found one going and nothing in the line to
        move until a time not yet past, and since then the line has not changed nor the
        job's definition (`catchup_turn` would answer nothing, and replace none)."""
        quiet = self._quiet.get(job_id)
        return quiet is not None and job is not None and quiet[0] is job.spec and now <= quiet[1]

    def queued(self, job_id: str) -> int:
        """How many of the job's occurrences wait in its catch-up line."""
        return len(self._queued.get(job_id, ()))

    @staticmethod
    def behind(run: Run) -> str | None:
        """What a scheduled occurrence waiting behind a backfill or manual run waits for."""
        return run.error[len(BEHIND) :] if run.error and run.error.startswith(BEHIND) else None

    def yielding(self, job_id: str) -> str | None:
        """What the job's line waits behind, when a scheduled occurrence in it waits for a
        backfill or manual run (those queued behind it wait for the same)."""
        for r in self._queued.get(job_id, ()):
            what = self.behind(r)
            if what is not None:
                return what
        return None

    def waiting_for_slot(self, job: Job) -> int:
        """How many scheduled occurrences of the job wait for a slot of its resource: a
        backfill's next run waits for them as for a run going (the schedule comes first)."""
        line = self._waiting.get(job.spec.resource or "")
        mine = line.of_job(job.spec.id) if line is not None else []
        return sum(1 for _, r in mine if r.trigger == Trigger.SCHEDULE)

    def ahead_of_line(self, job: Job) -> list[Run]:
        """The runs of the job its catch-up line waits for, as for runs going, while they
        wait for a slot of its resource: those the line sent there (sent after them, the
        next would wait beside them, and be skipped when both got a slot), and retries (a
        run waiting for its next attempt is going: docs/reference.md, Overlap). Only those
        older than the first in the line: an older one put back in it (a window's release)
        goes first, and joins the resource's line ahead of them, by fire time."""
        q = self._queued.get(job.spec.id)
        if not q:
            return []
        line = self._waiting.get(job.spec.resource or "")
        if line is None:
            return []
        first = q[0].scheduled_at  # (the line is kept in scheduled order: `queue`)
        return [
            r
            for _, r in line.of_job(job.spec.id)
            if r.scheduled_at < first and (r.run_id in self._from_line or r.state == RunState.RETRY_WAIT)
        ]

    def in_line(self, resource: str, run_id: str) -> bool:
        """Whether the run waits in the line of `resource`."""
        line = self._waiting.get(resource)
        return line is not None and run_id in line

    def queued_jobs(self) -> list[str]:
        return list(self._queued)

    def resources(self) -> list[str]:
        return list(self._waiting)

    def deadline(self, jobs: Mapping[str, Job]) -> datetime | None:
        """When the loop must wake for the lines: a waiting run's deadline, a fleet retry."""
        times = [t + EXPIRY_SLACK for line in self._waiting.values() if (t := line.earliest()) is not None]
        times += [
            q[0].fire_at + timedelta(seconds=jobs[j].spec.catchup_window_s) + EXPIRY_SLACK
            for j, q in self._queued.items()
            if q and j in jobs
        ]
        times += [t for r, t in self._group_retry_at.items() if r in self._waiting]
        return min(times) if times else None

    # ------------------------------------------------------------------ catch-up lines
    def queue(self, job: Job, runs: list[Run]) -> None:
        """Put occurrences in the job's catch-up line, in scheduled order."""
        self._hold(r.run_id for r in runs)
        self._first_fire.pop(job.spec.id, None)
        self._quiet.pop(job.spec.id, None)
        self._unreplaced.pop(job.spec.id, None)
        q = self._queued.setdefault(job.spec.id, deque())
        new = sorted(runs, key=_scheduled)
        if q and new and _scheduled(new[0]) < _scheduled(q[-1]):
            q.extend(new)
            self._queued[job.spec.id] = deque(sorted(q, key=_scheduled))
        else:  # what falls due joins at the end: no sort of a long line (a backlog that outlasts its period)
            q.extend(new)

    def wait_behind(self, job: Job, run: Run, what: str) -> None:
        """A scheduled occurrence waits its turn behind `what` (a backfill or manual run):
        in the job's line, in scheduled order; once started it is a scheduled run like any
        other (the occurrences after it are not queued behind it)."""
        run.error = BEHIND + what
        self.queue(job, [run])

    def take_scheduled(self, job_id: str) -> list[Run]:
        """The scheduled occurrences in the job's catch-up line, taken out of it (a window
        that holds its head holds them all)."""
        q = self._queued.get(job_id, deque())
        taken = [r for r in q if r.trigger == Trigger.SCHEDULE]
        if not taken:
            return []
        self._release(r.run_id for r in taken)
        self._first_fire.pop(job_id, None)
        self._quiet.pop(job_id, None)
        left = deque(r for r in q if r.trigger != Trigger.SCHEDULE)
        if left:
            self._queued[job_id] = left
        else:
            self._queued.pop(job_id, None)
        return taken

    def catchup_turn(
        self, job: Job | None, job_id: str, going: int, now: datetime
    ) -> tuple[list[Run], list[Run], list[tuple[Run, Run]]]:
        """The job's queued occurrences whose turn has come (`catchup_turn`), those that
        waited past the window, and the scheduled ones a newer one in the line replaces
        (`newest_waiting`: each with the one that replaces it); all leave the line (`job`
        None: the job is gone)."""
        q = self._queued.get(job_id)
        if not q or job is None:
            if q:
                self._release(r.run_id for r in q)
            self._queued.pop(job_id, None)
            self._first_fire.pop(job_id, None)
            self._quiet.pop(job_id, None)
            self._unreplaced.pop(job_id, None)
            return [], [], []
        replaced = self.replaced(job, q)
        if going and job.spec.overlap != "allow":
            first = self._first_fire.get(job_id)
            if first is None:
                first = self._first_fire[job_id] = _first_fire(q)
            until = first + timedelta(seconds=job.spec.catchup_window_s)
            if now <= until:
                if not replaced:
                    self._quiet[job_id] = (job.spec, until)
                return [], [], replaced  # a run is going and none waited past its window: nothing moves
        asked = q if job.spec.overlap == "allow" else _turn_matters(q, job.spec.catchup_window_s, now)
        by_id = {r.run_id: r for r in asked}
        lines = [policy.waiting(r.run_id, r.fire_at, job.spec) for r in asked]
        turn = policy.catchup_turn(job.spec, lines, going, now)
        expired = [by_id[w.run_id] for w in turn.expire]
        start = [by_id[w.run_id] for w in turn.start]
        if expired or start:
            self._first_fire.pop(job_id, None)
            self._quiet.pop(job_id, None)
            leave = {w.run_id for w in (*turn.expire, *turn.start)}
            off: set[str] = set()
            while q and q[0].run_id in leave:  # most leave from the front: no new line for them
                off.add(q[0].run_id)
                self._release([q.popleft().run_id])
            if leave - off:
                self._release(r.run_id for r in q if r.run_id in leave)
                q = self._queued[job_id] = deque(r for r in q if r.run_id not in leave)
        for r in start:
            if self.behind(r) is None:
                self._catching_up.setdefault(job_id, set()).add(r.run_id)
            if job.spec.resource and job.spec.overlap != "allow":
                self._from_line.add(r.run_id)  # until it leaves the resource's line (`slot_turn`, `tidy`)
        if not q:
            self._queued.pop(job_id, None)
        return start, expired, replaced

    def replaced(self, job: Job, q: deque[Run]) -> list[tuple[Run, Run]]:
        """Take out of the job's line the scheduled occurrences a newer one in it replaces
        (`newest_waiting`), each with the one that replaces it. Once none is replaced, none
        is until the line takes in new runs or the job's definition changes (`queue`)."""
        spec = job.spec
        if spec.catchup == "all" or self._unreplaced.get(spec.id) is spec:
            return []
        scheduled = [r for r in q if r.trigger == Trigger.SCHEDULE]
        if len(scheduled) < 2:
            self._unreplaced[spec.id] = spec
            return []
        by_id = {r.run_id: r for r in scheduled}
        kept, gone = policy.newest_waiting(job.spec, [policy.waiting(r.run_id, r.fire_at, job.spec) for r in scheduled])
        if not gone or len(kept) < 2:  # asked again, the rule would replace none
            self._unreplaced[spec.id] = spec
        if not gone:
            return []
        self._release(w.run_id for w in gone)
        self._first_fire.pop(job.spec.id, None)
        self._quiet.pop(job.spec.id, None)
        newest = by_id[kept[-1].run_id]
        for w in gone:
            q.remove(by_id[w.run_id])
        return [(by_id[w.run_id], newest) for w in gone]

    # ------------------------------------------------------------------ resource lines
    def wait_for_slot(self, job: Job, run: Run, from_line: bool = False) -> None:
        """`from_line`: the job's catch-up line sent it, and waits for it (`ahead_of_line`)."""
        resource = job.spec.resource
        assert resource, "only a job with a resource waits for a slot"
        if from_line:
            self._from_line.add(run.run_id)
        if self._waiting.setdefault(resource, _Line()).add(job, run):
            self._hold([run.run_id])

    def slot_turn(
        self, resource: str, limit: int, used: int, now: datetime
    ) -> tuple[list[tuple[Job, Run]], list[tuple[Job, Run]]] | None:
        """Give the resource's free slots to the runs waiting longest (`resource_admission`):
        those that start and those that waited too long, both out of the line. None: the
        line is empty, or the fleet's store said full a moment ago. The rule is asked only
        about the runs it can decide (those past their deadline, and the first `limit -
        used` of the others by fire time), and answers the same about them as about the
        whole line, which may hold thousands of runs when a resource is short for long."""
        line = self._waiting.get(resource)
        if not line:
            self._waiting.pop(resource, None)
            return None
        if now < self._group_retry_at.get(resource, now):
            return None
        earliest = line.earliest()
        past = line.past(now) if earliest is not None and now > earliest else []
        free = max(limit - used, 0)
        if not past and not free:
            return [], []  # no free slot and no run past its deadline: the line stays as it is
        gone = {r.run_id for _, r in past}
        # backfill runs step aside for a scheduled occurrence of their job: no slot now, but
        # their deadline holds (they are among `past` once it has gone by)
        first = line.first(free, gone | line.yielding()) if free else []
        by_id = {r.run_id: (j, r) for j, r in (*past, *first)}
        turn = policy.resource_admission(
            limit, used, [policy.waiting(r.run_id, r.fire_at, j.spec, slot_since(r)) for j, r in (*past, *first)], now
        )
        started = {w.run_id for w in turn.start}
        self._from_line -= {w.run_id for w in turn.expire}
        self._started.setdefault(resource, set()).update(started & self._from_line)  # (a turn inside a turn adds)
        gone = {w.run_id for w in (*turn.expire, *turn.start)}
        self._release(rid for rid in gone if line.remove(rid) is not None)
        return [by_id[w.run_id] for w in turn.start], [by_id[w.run_id] for w in turn.expire]

    def tidy(self, resource: str) -> None:
        """After a turn of the resource's line was acted on: the runs it started that did not
        come back into it are no longer waited for (`ahead_of_line`)."""
        line = self._waiting.get(resource)
        self._from_line -= {rid for rid in self._started.pop(resource, ()) if line is None or rid not in line}
        if not line:
            self._waiting.pop(resource, None)

    def back_in_front(self, job: Job, run: Run, now: datetime) -> None:
        """A fleet's resource was full in the store: back to the front of the line, ask again
        in GROUP_FULL_RETRY_S (its deadline still holds)."""
        resource = job.spec.resource
        assert resource, "only a job with a resource waits for a slot"
        if self._waiting.setdefault(resource, _Line()).add(job, run, front=True):
            self._hold([run.run_id])
        self._group_retry_at[resource] = now + timedelta(seconds=GROUP_FULL_RETRY_S)

    def forget(self, job_id: str) -> None:
        """A job removed or set aside: its runs leave every line."""
        self._release(r.run_id for r in self._queued.pop(job_id, ()))
        self._first_fire.pop(job_id, None)
        self._quiet.pop(job_id, None)
        self._unreplaced.pop(job_id, None)
        self._catching_up.pop(job_id, None)
        for resource, line in list(self._waiting.items()):
            gone = [r.run_id for _, r in line.of_job(job_id)]
            self._from_line -= set(gone)
            self._release(rid for rid in gone if line.remove(rid) is not None)
            if not line:
                del self._waiting[resource]

    def _hold(self, run_ids: Iterable[str]) -> None:
        """Runs joined a line: `held` counts each once per line it waits in."""
        held = self._held
        for rid in run_ids:
            held[rid] = held.get(rid, 0) + 1

    def _release(self, run_ids: Iterable[str]) -> None:
        """Runs left a line (each id once per line it left)."""
        held = self._held
        for rid in list(run_ids):
            n = held.get(rid, 0) - 1
            if n > 0:
                held[rid] = n
            else:
                held.pop(rid, None)


class _Line:
    """One resource's line: the runs waiting for a slot, indexed by run id and by job, with
    two heaps (by deadline, and by place in line: fire time, then run id) from which the
    runs that left are dropped lazily. A resource short for weeks keeps a line of thousands
    of runs, and each wake-up asks for its earliest deadline, its runs past it and its
    first few: none of them walks the line."""

    __slots__ = ("_entries", "_by_job", "_backfills", "_deadlines", "_order", "_joined", "_front")

    def __init__(self) -> None:
        self._entries: dict[str, tuple[Job, Run, datetime, int]] = {}  # run id -> (job, run, deadline, joined)
        self._by_job: dict[str, dict[str, None]] = {}  # job id -> its run ids in line
        # job id -> its backfill runs in line that step aside for its scheduled occurrences
        # (`yielding`): overlap forbid or replace, one run at a time
        self._backfills: dict[str, set[str]] = {}
        self._deadlines: list[tuple[datetime, str]] = []  # (slot_since + catchup_window_s, run id)
        self._order: list[tuple[datetime, str]] = []  # (fire time, run id): `policy.resource_admission`
        self._joined = 0  # the order runs joined the line in (`in_order`); one put in front counts down
        self._front = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._entries

    def add(self, job: Job, run: Run, front: bool = False) -> bool:
        """The run joins the line (at its end, or in `front`); whether it was not in it."""
        rid = run.run_id
        new = self.remove(rid) is None
        if front:
            self._front -= 1
            joined = self._front
        else:
            self._joined += 1
            joined = self._joined
        deadline = slot_since(run) + timedelta(seconds=job.spec.catchup_window_s)
        self._entries[rid] = (job, run, deadline, joined)
        self._by_job.setdefault(job.spec.id, {})[rid] = None
        if run.trigger == Trigger.BACKFILL and job.spec.overlap != "allow":
            self._backfills.setdefault(job.spec.id, set()).add(rid)
        heapq.heappush(self._deadlines, (deadline, rid))
        heapq.heappush(self._order, (run.fire_at, rid))
        self._compact()
        return new

    def remove(self, rid: str) -> tuple[Job, Run] | None:
        entry = self._entries.pop(rid, None)
        if entry is None:
            return None
        job, run = entry[0], entry[1]
        mine = self._by_job[job.spec.id]
        del mine[rid]
        if not mine:
            del self._by_job[job.spec.id]
        backfills = self._backfills.get(job.spec.id)
        if backfills is not None:
            backfills.discard(rid)
            if not backfills:
                del self._backfills[job.spec.id]
        return job, run

    def of_job(self, job_id: str) -> list[tuple[Job, Run]]:
        """The job's runs in line, in the order they joined it."""
        entries = [self._entries[rid] for rid in self._by_job.get(job_id, ())]
        return [(e[0], e[1]) for e in sorted(entries, key=lambda e: e[3])]

    def in_order(self) -> list[tuple[Job, Run]]:
        return [(e[0], e[1]) for e in sorted(self._entries.values(), key=lambda e: e[3])]

    def yielding(self) -> set[str]:
        """The backfill runs in line that step aside for a scheduled occurrence of their own
        job waiting in it (`overlap` forbid or replace: one run at a time). The schedule
        comes first: a backfill run waiting longer (its wait counts from when the backfill
        started it) still lets the occurrence that fell due take the slot first."""
        out: set[str] = set()
        for job_id, ids in self._backfills.items():
            if any(self._entries[rid][1].trigger == Trigger.SCHEDULE for rid in self._by_job[job_id]):
                out |= ids
        return out

    def earliest(self) -> datetime | None:
        """The earliest deadline in line (None: the line is empty)."""
        heap = self._deadlines
        while heap:
            at, rid = heap[0]
            entry = self._entries.get(rid)
            if entry is not None and entry[2] == at:
                return at
            heapq.heappop(heap)  # it left the line
        return None

    def past(self, now: datetime) -> list[tuple[Job, Run]]:
        """The runs waiting past their deadline (`policy.resource_admission`: now > deadline)."""
        out: list[tuple[Job, Run]] = []
        kept: list[tuple[datetime, str]] = []
        heap = self._deadlines
        while heap and now > heap[0][0]:
            at, rid = item = heapq.heappop(heap)
            entry = self._entries.get(rid)
            if entry is not None and entry[2] == at and not (kept and kept[-1] == item):  # (twice in the heap)
                out.append((entry[0], entry[1]))
                kept.append(item)
        for item in kept:  # they leave the line with the caller's turn
            heapq.heappush(heap, item)
        return out

    def first(self, n: int, skip: Collection[str]) -> list[tuple[Job, Run]]:
        """The first `n` runs in line (fire time, then run id), leaving out those in `skip`."""
        out: list[tuple[Job, Run]] = []
        kept: list[tuple[datetime, str]] = []
        heap = self._order
        while heap and len(out) < n:
            fire_at, rid = item = heapq.heappop(heap)
            entry = self._entries.get(rid)
            if entry is None or entry[1].fire_at != fire_at or (kept and kept[-1] == item):
                continue  # it left the line (or is in the heap twice)
            kept.append(item)
            if rid not in skip:
                out.append((entry[0], entry[1]))
        for item in kept:
            heapq.heappush(heap, item)
        return out

    def _compact(self) -> None:
        """Drop the heaps' entries of runs that left, once they outnumber those in line."""
        if len(self._order) > 2 * len(self._entries) + 64:
            self._order = [(e[1].fire_at, rid) for rid, e in self._entries.items()]
            heapq.heapify(self._order)
        if len(self._deadlines) > 2 * len(self._entries) + 64:
            self._deadlines = [(e[2], rid) for rid, e in self._entries.items()]
            heapq.heapify(self._deadlines)
