"""The notifier: reads the history from the database, decides (chronod.notify.core), writes
each notice to the outbox, and delivers the outbox through a small pool of worker threads.

Working from the database, not the loop's memory, is what makes notices survive a
restart and work in a fleet: the decisions are persisted per job (`notify_state`), each
notice has a dedupe key (one row whoever computes it), and each row is claimed by one
node for delivery. A webhook that hangs holds a worker thread, never the scheduler.

`step(now)` does one round and says when the next one is needed (the next silence
deadline); `run()` is the thread body that calls it on that timer, at least every
`MAX_SLEEP_S`, or sooner after `wake()` (the loop calls it when it records an outcome).
"""

from __future__ import annotations

import builtins
import heapq
import os
import queue
import threading
import time
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any, Callable, ContextManager, Mapping, Sequence

from chronod.core.blackout import Window, blackout_at
from chronod.core.history import known_since
from chronod.core.model import RunState
from chronod.core.schedule import compile_schedule
from chronod.notify import core, reads
from chronod.notify.deliver import LONGEST_DELIVERY_S, TAIL_BYTES, DeliveryError, deliver, kill_running
from chronod.store.api import NoticeOutbox
from chronod.store.outbox import CURSOR, Outbox, Outgoing

MAX_SLEEP_S = 60.0  # the loop wakes us after every outcome; this bounds retries and reconciles
FOLLOWER_SLEEP_S = 5.0  # a node that does not decide looks again this often (it may become the first)
MIN_ROUND_GAP_S = 0.5  # a busy node records hundreds of outcomes a second: decide on them in rounds
CURSOR_OVERLAP_S = 30  # re-read this much before the cursor: commits land out of order
RECENT_OVERLAP_S = 2  # ...but the whole overlap only every WHOLE_OVERLAP_EVERY_S, this much in between
WHOLE_OVERLAP_EVERY_S = 5.0
FIRST_LOOKBACK_S = 600  # a database never seen by a notifier: only the last ten minutes
RECONCILE_EVERY_S = 300.0
LAUNCH_QUIET_S = 0.3  # a round waits until the loop has started nothing for this long...
LAUNCH_YIELD_MAX_S = 2.0  # ...but never longer than this: notices are late, never lost
UNCLAIMED_LOOKBACK_S = 3600
RETRY_BASE_S, RETRY_MAX_S = 60, 3600
WORKERS = 4  # the daemon user's lane (the jobs of root-owned files): root's notices
LANE_WORKERS = 2  # each delegated file owner's lane: one owner's slow endpoint holds only these
MAX_SKIPPED_JOBS = 10_000  # job ids a claim may leave out by name (SQL parameters are finite)
ALIVE = "notifier:alive"  # when a deciding notifier last did a round (the silence clock skips the time after it)
ALIVE_EVERY_S = 10.0  # ... written at most this often
ALIVE_EVERY = timedelta(seconds=ALIVE_EVERY_S)
STOP_DRAIN_S = 5.0  # a stop waits this long for deliveries in flight to be answered and recorded


def job_state_name(job_id: str) -> str:
    """The notify_state row of one job."""
    return f"job:{job_id}"


class NotifyService:
    """Notices from the history, through the outbox, to the owners' routes."""

    def __init__(
        self,
        store: Any,
        clock: Any,
        log: Callable[..., None],
        node: str,
        *,
        metrics: Any = None,
        version: str = "",
        workers: int = WORKERS,
        send: Callable[[dict[str, Any], dict[str, Any]], None] = deliver,
        reconcile_every_s: float = RECONCILE_EVERY_S,
        known_specs: Callable[[], Mapping[str, Any]] | None = None,
        known_windows: Callable[[], Sequence[Window]] | None = None,
        boot_id: str | None = None,
        building: Callable[[], ContextManager[None]] = nullcontext,
    ):
        self.store, self.clock, self.log, self.node = store, clock, log, node
        # around a round that reads and decides on every job (the daemon holds garbage
        # collections then: chronod.daemon.kernel.collections_held)
        self.building = building
        self.known_specs = known_specs  # the daemon's specs by id: shared, not parsed again
        self.known_windows = known_windows  # the registry's maintenance windows (they hold jobs too)
        self._alive_at: datetime | None = None  # when this process last wrote ALIVE (None: never yet)
        self.boot_id = boot_id  # the kernel's boot: ALIVE's monotonic reading is comparable on the same one
        self.outbox: NoticeOutbox = Outbox(store)
        self.metrics, self.version, self.send = metrics, version, send
        self.reconcile_every_s = reconcile_every_s
        # One lane of workers per owner of job files (`lane_for`: a delegated file's owner,
        # "" for root's files whoever their jobs run as): a lane has its own threads and a cap
        # on deliveries in flight, so one owner's slow webhook or command waits in its own
        # lane, never in root's or another owner's.
        self.lanes: dict[str, Lane] = {}
        self.workers = workers
        self.inflight: dict[int, str] = {}  # row id -> lane
        self._lane_of_job: dict[str, str] = {}  # job id -> lane, learned from the rows claimed
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)  # notified as each delivery leaves `inflight`
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._next_reconcile: datetime | None = None
        self.thread: threading.Thread | None = None
        # (jobs version, rows, spec by id, own-paused ids): rebuilt only when a definition changes
        self._jobs: tuple[Any, list[Any], dict[str, Any], set[str]] | None = None
        self._deadline: datetime | None = None
        self._silences = SilenceDeadlines()  # each job's own, so a deadline wakes only its job
        self._paused: set[str] = set()
        self._states: dict[str, core.NotifyState] = {}  # every job's state after the last round
        self._launched_at = float("-inf")  # monotonic: when the loop last said it was starting runs
        self._reads = reads.Reads()  # the ended runs decided on, for a while back
        self._read_at: tuple[datetime, float] | None = None  # (wall, monotonic) of the last recorded read
        self._trusted = False  # the last round was this node's own and recorded: _states are the stored ones
        self._whole_overlap_at: datetime | None = None  # when the next round reads the whole overlap

    # ------------------------------------------------------------------ thread
    def start(self) -> None:
        """Run `step` in a background thread until `stop()`. Called after the daemon holds
        its lease, so claims left by this node's previous process can be taken back."""
        released = self.outbox.release_claims(self.node)
        if released:
            self.log("notify.reclaimed", node=self.node, notices=released)
        self.thread = threading.Thread(target=self.run, name="chrono-notifier", daemon=True)
        self.thread.start()

    def wake(self) -> None:
        """Ask for a step now (cheap, thread-safe): call after recording a run's outcome."""
        self._wake.set()

    def launching(self) -> None:
        """The loop is starting runs (cheap, thread-safe). A round of deciding holds the
        interpreter for as long as the loop needs to start hundreds of runs: the next one
        waits until the burst is over, at most LAUNCH_YIELD_MAX_S."""
        self._launched_at = time.monotonic()

    def _yield_to_launches(self) -> None:
        first = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            quiet = now - self._launched_at
            if quiet >= LAUNCH_QUIET_S or now - first >= LAUNCH_YIELD_MAX_S:
                return
            self._stop.wait(min(LAUNCH_QUIET_S - quiet, first + LAUNCH_YIELD_MAX_S - now))

    def stop(self, wait_s: float = 5.0, drain_s: float = STOP_DRAIN_S) -> None:
        """Stop stepping and start no delivery; those in flight get up to `drain_s` to be
        answered and recorded as sent. An endpoint can have a notice before its answer
        reaches us: a stop that did not wait for it left the row claimed, not sent, and the
        next start sent it again. What is still in flight after `drain_s` (or queued, not
        begun) is sent by the next start."""
        self._stop.set()
        self._wake.set()
        if self.thread is not None:
            self.thread.join(wait_s)
        for pool in list(self.lanes.values()):
            pool.shutdown()
        with self._drained:
            self._drained.wait_for(lambda: not self.inflight, timeout=drain_s)
        if self.send is deliver:
            kill_running()  # a notify command never outlives the daemon that ran it

    def run(self) -> None:
        """The thread body: step, then sleep until the next deadline (at most MAX_SLEEP_S) or a wake."""
        while not self._stop.is_set():
            self._yield_to_launches()
            now = self.clock.now()
            try:
                nxt = self.step(now)
            except Exception as e:  # the store may be down: say so, try again on the next round
                self.log("notify.step_failed", "error", error=str(e).splitlines()[0] if str(e) else type(e).__name__)
                nxt = None
            wait = MAX_SLEEP_S if nxt is None else (nxt - self.clock.now()).total_seconds()
            self._stop.wait(MIN_ROUND_GAP_S)
            self._wake.wait(min(max(wait - MIN_ROUND_GAP_S, 0.0), MAX_SLEEP_S))
            self._wake.clear()

    # ------------------------------------------------------------------ one round
    def step(self, now: datetime) -> datetime | None:
        """Decide on everything new, record the notices, hand due rows to the workers; return
        when the next round is needed (the earliest silence deadline), None if not before
        MAX_SLEEP_S matters."""
        trusted, self._trusted = self._trusted, False  # True again once this round is recorded
        if not self._decides():
            self._reads.forget()
            self._read_at = None
            self._dispatch(now)  # deliveries are shared; deciding is the first node's work
            return now + timedelta(seconds=FOLLOWER_SLEEP_S)
        version = self.outbox.jobs_version()
        if self._jobs is not None and self._jobs[0] == version:
            return self._round(now, trusted, same_jobs=True)
        with self.building():  # every job read and decided on: a heap the daemon keeps
            self._jobs = None  # the old rows go before the new ones come
            known = self.known_specs() if self.known_specs is not None else None
            rows = self.store.jobs(known=known)  # parsing every spec is the costly part
            self._jobs = (version, rows, {r.job_id: r.spec for r in rows}, {r.job_id for r in rows if r.paused})
            return self._round(now, trusted, same_jobs=False)

    def _round(self, now: datetime, trusted: bool, same_jobs: bool) -> datetime | None:
        """The rest of `step`, with the jobs read (`same_jobs`: the same as last round)."""
        cursor = _parse(self.outbox.get_state(CURSOR).get("at"))
        mono = self.clock.monotonic()
        # A commit that lands late almost always lands within a second or two: the rounds in
        # between read only that much before the cursor, and the whole overlap now and then.
        whole = not trusted or _due(self._whole_overlap_at, now, WHOLE_OVERLAP_EVERY_S)
        overlap = timedelta(seconds=CURSOR_OVERLAP_S if whole else RECENT_OVERLAP_S)
        # From the cursor, or from before it if the wall clock stepped back since the last
        # recorded round: rows written since then carry the stepped clock's times (reads.floor).
        floor = reads.floor(self._read_at or self._alive_read(), now, mono)
        since = min(cursor, floor) - overlap if cursor else now - timedelta(seconds=FIRST_LOOKBACK_S)
        # The overlap is read as (run id, updated_at) only; whole rows only for what this
        # node has not decided on yet (at 300 endings a second, re-reading 30 s of rows
        # twice a second was most of this thread's time, beside the loop).
        keys = self.outbox.changed_run_keys(since, now + timedelta(days=1))
        fresh = self._reads.fresh(keys)
        changed = self.outbox.terminal_runs(fresh) if fresh else []
        news = self._reads.news(changed)  # new whatever their times say (after a step back)
        reconcile = self._reconcile_due(now)
        quiet = (
            same_jobs
            and cursor is not None
            and not changed
            and self._deadline is not None
            and now < self._deadline
            and not reconcile
        )
        if quiet:
            # nothing new since the last round: deciding again for every job would only
            # burn CPU on an idle daemon; deliveries that wait for a retry still go out
            self._remember(keys, since, whole, now, mono)
            if self._alive_at is not None and _due(self._alive_at + ALIVE_EVERY, now, ALIVE_EVERY_S):
                self.outbox.set_states({ALIVE: self._alive(now)}, now)
                self._alive_at = now
            self._trusted = trusted
            self._dispatch(now)
            return self._deadline
        assert self._jobs is not None  # read above
        _, rows, specs, own_paused = self._jobs
        paused = own_paused | self._held_by_groups(rows) | self._held_by_windows(specs, now)
        resumed = self._paused - paused  # held at the last round, not now: the silence clock restarts
        down_s = self._down_s(now)
        if down_s > 0:  # a window that held the job while no notifier decided ended unseen
            resumed |= self._held_by_windows(specs, now - timedelta(seconds=down_s), now) - paused
        by_job: dict[str, list[Any]] = {}
        for r in changed:
            by_job.setdefault(r.job_id, []).append(r)
        # Every job when the jobs, the pauses or the reconcile call for it; otherwise only
        # the jobs with new runs and those whose silence deadline has passed (the others'
        # states cannot have changed: with 100,000 jobs, deciding for all of them at each
        # deadline kept this thread busy beside the loop).
        full = (
            not same_jobs
            or reconcile
            or down_s > 0
            or self._deadline is None
            or paused != self._paused
            or not self._states.keys() >= specs.keys()
        )
        if not full:
            specs = {j: specs[j] for j in by_job.keys() | self._silences.due(now) if j in specs}
        # After a round of its own, this node's states are the stored ones (only the node
        # that decides writes them): read only those of jobs it has not decided on yet.
        mine = self._states if trusted else {}
        stored = self.outbox.get_states(job_state_name(j) for j in specs if j not in mine)
        states = {j: mine[j] if j in mine else core.NotifyState.from_json(stored.get(job_state_name(j))) for j in specs}
        fresh = [j for j, st in states.items() if st.basis is None]
        known = self._known_since(fresh, now) if fresh else {}
        notices: list[core.Notice] = []
        runs_by_id = {r.run_id: r for r in changed}
        new_states: dict[str, core.NotifyState] = {}
        to_save: set[str] = set()  # the new states that must be stored (core.worth_saving)
        for job_id, spec in specs.items():
            out, st = core.decide(
                spec,
                by_job.get(job_id, ()),
                states[job_id],
                now,
                known_since=known.get(job_id),
                paused=job_id in paused,
                resumed=job_id in resumed,
                down_s=down_s,
                news=news,
            )
            notices += out
            if st != states[job_id]:
                new_states[job_id] = st
                if core.worth_saving(states[job_id], st, out):
                    to_save.add(job_id)
        if reconcile:
            registered = {r.job_id: r.updated_at for r in rows if r.updated_at}
            more, changed_states = self._reconcile(specs, {**states, **new_states}, now, registered)
            notices += more
            new_states.update(changed_states)
            to_save.update(changed_states)
        self._record(notices, specs, runs_by_id, now)
        # saved in this order, a chunk a transaction (Outbox.set_states): the cursor and the
        # ALIVE mark last, so a crash between chunks never leaves the cursor past a state
        # not saved (the next round reads those runs again; their notices are deduplicated).
        # A state whose seen mark alone moved stays in memory only (core.worth_saving).
        save = {job_state_name(j): st.to_json() for j, st in new_states.items() if j in to_save}
        # the newest row read, but never past this clock: after a step back the rows to come
        # carry times before the old cursor (and a node whose clock is ahead writes rows
        # from the future, which must not hide this node's own)
        newest = max((at for _, at in keys), default=cursor)
        if newest is not None and cursor is not None and newest < cursor:
            newest = cursor
        at = since if newest is None else min(newest, now)
        if at != cursor:
            save[CURSOR] = {"at": at.isoformat()}
        if self._alive_at is None or _due(self._alive_at + ALIVE_EVERY, now, ALIVE_EVERY_S):
            save[ALIVE] = self._alive(now)
            self._alive_at = now
        self.outbox.set_states(save, now)
        self._remember(keys, since, whole, now, mono)  # decided and recorded: not read again
        final = {**states, **new_states}
        self._export(final)
        if full:
            self._states = final
            self._silences = SilenceDeadlines()
        else:
            self._states.update(final)
        for job_id, spec in specs.items():
            deadline = None if job_id in paused else core.silence_deadline(spec, final[job_id])
            self._silences.set(job_id, deadline if deadline is not None and deadline > now else None)
        self._paused = paused
        self._deadline = min(
            (d for d in (self._silences.earliest(), self._next_reconcile) if d is not None), default=None
        )
        self._trusted = True
        self._dispatch(now)
        return self._deadline

    def _remember(
        self, keys: list[tuple[str, datetime]], since: datetime, whole: bool, now: datetime, mono: float
    ) -> None:
        """The runs this round read from `since` on and decided on: kept for a while back
        (reads.KEEP_S), so that a run that ends after a step back of the clock is known new."""
        self._reads.remember(dict(keys), since, min(since, now) - timedelta(seconds=reads.KEEP_S))
        self._read_at = (now, mono)
        if whole:
            self._whole_overlap_at = now + timedelta(seconds=WHOLE_OVERLAP_EVERY_S)

    def _alive_read(self) -> tuple[datetime, float] | None:
        """(wall, monotonic) of the last round a deciding notifier recorded on this boot
        (its ALIVE mark), for a process's first read: None on another boot or none yet."""
        alive = self.outbox.get_state(ALIVE)
        if self.boot_id is None or alive.get("boot") != self.boot_id or not alive.get("at"):
            return None
        mono = alive.get("mono")
        return (datetime.fromisoformat(alive["at"]), float(mono)) if isinstance(mono, (int, float)) else None

    def _decides(self) -> bool:
        """In a fleet one node decides (the first live one by name): the others would only
        repeat its work, row for row. A node that is not live itself decides anyway."""
        live = [name for name, _ in self.store.live_nodes()]
        return not live or self.node not in live or live[0] == self.node

    def _known_since(self, job_ids: list[str], now: datetime) -> dict[str, datetime]:
        """When the silence clock of a job never seen before starts: its last success, else
        when the store first knew it in its current registration (not its last definition
        change, not its first run: a job that never ran is silent from then), else its
        first run, else now."""
        wins = self.outbox.last_successes(job_ids)
        spans = self.store.known_spans(job_ids)
        first = self.outbox.first_seen()
        return {j: wins.get(j) or known_since(spans.get(j)) or first.get(j) or now for j in job_ids}

    def _reconcile_due(self, now: datetime) -> bool:
        if self._next_reconcile is not None and now < self._next_reconcile:
            return False
        self._next_reconcile = now + timedelta(seconds=self.reconcile_every_s)
        return True

    def _reconcile(
        self, specs: dict[str, Any], states: dict[str, core.NotifyState], now: datetime, registered: dict[str, datetime]
    ) -> tuple[list[core.Notice], dict[str, core.NotifyState]]:
        """The schedule against the table: jobs without a next occurrence, and occurrences
        that fell due and that nothing claimed."""
        # The latest runs before the waiting ones: the loop stores a new job's first
        # occurrence at any moment, and read the other way round, a run stored between the
        # two reads was "latest" but not "waiting" -- a false page for a job just registered.
        latest = self.outbox.latest_runs()
        waiting = {key.split("@", 1)[0] for key in self.outbox.waiting_keys()}
        first = self.outbox.first_seen()
        since = now - timedelta(seconds=UNCLAIMED_LOOKBACK_S)
        marks = self.store.run_marks(since=since, until=now + timedelta(seconds=1))
        pending = self.store.runs(since=since, until=now, states=[RunState.PENDING])
        nodes = [n.name for n in self.store.nodes() if n.stopped_at is None]
        from chronod.core.history import Mark

        marks_by_job: dict[str, list[Mark]] = {}
        for m in marks:
            marks_by_job.setdefault(m[1], []).append(Mark(*m))
        pending_by_job: dict[str, list[Any]] = {}
        for r in pending:
            pending_by_job.setdefault(r.job_id, []).append(r)
        out: list[core.Notice] = []
        changed: dict[str, core.NotifyState] = {}
        for job_id, spec in specs.items():
            try:
                schedule = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
            except Exception:
                continue
            young = registered.get(job_id) and now - registered[job_id] < timedelta(seconds=core.RECONCILE_GRACE_S)
            if job_id not in latest and young:
                continue  # just registered: the daemon has not materialized it yet
            more, st = core.no_next(
                spec, schedule, job_id in waiting, (latest.get(job_id) or (None,))[0], states[job_id], now
            )
            out += more
            if st != states[job_id]:
                changed[job_id] = st
            # Occurrences before the job's first row were never expected of this database.
            start = max(since, first[job_id] - timedelta(microseconds=1)) if job_id in first else since
            out += core.unclaimed(
                spec,
                schedule,
                pending_by_job.get(job_id, []),
                since=start,
                now=now,
                nodes=nodes,
                marks=marks_by_job.get(job_id, []),
            )
        return out, changed

    # ------------------------------------------------------------------ outbox
    def _record(self, notices: list[core.Notice], specs: dict[str, Any], runs: dict[str, Any], now: datetime) -> None:
        rows = []
        for n in notices:
            spec = specs[n.job_id]
            run = runs.get(n.run_id) if n.run_id else None
            if run is None and n.run_id:
                run = self.store.get_run(n.run_id)
            for i in core.routes_for(spec, n.event):
                rows.append(
                    dict(
                        job_id=n.job_id,
                        event=n.event,
                        state=n.state,
                        run_id=n.run_id,
                        dedupe_key=f"{n.dedupe_key}|route{i}",
                        route=route_json(spec, i),
                        payload=payload(n, spec, run, self.node, self.version),
                    )
                )
        if rows:
            new = self.outbox.add(rows, now)
            for n in notices:
                self.log("notify.notice", job=n.job_id, notice=n.event, state=n.state, run=n.run_id, detail=n.detail)
            if self.metrics is not None and new:
                for r in rows:
                    self.metrics.notices.labels(r["event"]).inc()

    def lane_cap(self, lane: str) -> int:
        """Deliveries one lane may have in flight: the daemon user's lane keeps a queue of
        its workers' size, every other lane only its workers."""
        return self.workers * 2 if lane == "" else min(LANE_WORKERS, self.workers)

    def _lane(self, lane: str) -> "Lane":
        pool = self.lanes.get(lane)
        if pool is None:
            size = self.workers if lane == "" else min(LANE_WORKERS, self.workers)
            pool = self.lanes[lane] = Lane(size)
        return pool

    def _dispatch(self, now: datetime) -> None:
        with self._lock:
            busy: dict[str, int] = {}
            for lane in self.inflight.values():
                busy[lane] = busy.get(lane, 0) + 1
        # Rows of a full lane are skipped by job; a job not known yet is learned from the
        # rows claimed (and those given back), and the claim tried again without it.
        for _ in range(4):
            full = {lane for lane, n in busy.items() if n >= self.lane_cap(lane)}
            skip: set[str] = set()
            if full:
                skip = {j for j, lane in self._lane_of_job.items() if lane in full}
                if self._jobs is not None:
                    skip |= {j for j, spec in self._jobs[2].items() if lane_for(spec) in full}
                if len(skip) > MAX_SKIPPED_JOBS:  # beyond what one statement may list:
                    skip = set()  # claim as before and give back what a full lane cannot take
            released: list[int] = []
            rows = self.outbox.claim(self.node, now, limit=self.workers * 2, skip_jobs=skip, hold_s=LONGEST_DELIVERY_S)
            for row in rows:
                lane = lane_of(row.route)
                self._lane_of_job[row.job_id] = lane
                with self._lock:
                    if row.id in self.inflight:
                        continue
                    if busy.get(lane, 0) >= self.lane_cap(lane):
                        released.append(row.id)  # its lane is full: left for when it is not
                        continue
                    busy[lane] = busy.get(lane, 0) + 1
                    self.inflight[row.id] = lane
                self._lane(lane).submit(self._deliver, row)
            if not released:
                return
            self.outbox.release(released, self.node)

    def _deliver(self, row: Outgoing) -> None:
        try:
            if self._stop.is_set():  # queued, not begun: the next start (or another node) sends it
                self.outbox.release([row.id], self.node)
                return
            body = dict(row.payload, sent_at=self.clock.now().isoformat())
            try:
                self.send(row.route, body)
            except DeliveryError as e:
                self._failed(row, str(e))
                return
            except Exception as e:
                self._failed(row, f"{type(e).__name__}: {e}")
                return
            self.outbox.mark_sent(row.id, self.node, self.clock.now())
            self.log(
                "notify.sent",
                job=row.job_id,
                notice=row.event,
                run=row.run_id,
                channel="webhook" if row.route.get("webhook") else "command",
            )
        except Exception as e:  # the store went away mid-delivery: the claim expires, it is sent again
            self.log("notify.record_failed", "error", job=row.job_id, notice=row.event, error=str(e))
        finally:
            with self._lock:
                self.inflight.pop(row.id, None)
                self._drained.notify_all()
            self._wake.set()  # a lane has room again: the next round hands it its next row

    def _failed(self, row: Outgoing, error: str) -> None:
        delay = min(RETRY_BASE_S * 2**row.attempts, RETRY_MAX_S)
        retry_at = self.clock.now() + timedelta(seconds=delay)
        channel = "webhook" if row.route.get("webhook") else "command"
        self.log(
            "notify.failed",
            "warning",
            job=row.job_id,
            notice=row.event,
            run=row.run_id,
            channel=channel,
            error=error,
            attempts=row.attempts + 1,
            retry_in_s=delay,
        )
        if self.metrics is not None:
            self.metrics.notify_failures.labels(channel).inc()
        self.outbox.mark_failed(row.id, self.node, error, retry_at)

    # ------------------------------------------------------------------ export
    def _export(self, states: dict[str, core.NotifyState]) -> None:
        if self.metrics is None:
            return
        for job_id, st in states.items():
            self.metrics.job_silent.labels(job_id).set(1 if st.silent else 0)

    def _alive(self, now: datetime) -> dict[str, Any]:
        """The ALIVE state: when this round was, by the wall clock and by the monotonic one."""
        return {"at": now.isoformat(), "mono": self.clock.monotonic(), "boot": self.boot_id}

    def _down_s(self, now: datetime) -> float:
        """On this process's first deciding round: how long no notifier decided before it
        (since the last ALIVE any node wrote), the time the silence clock does not count
        (`core.downtime_s`: a clock step while chronod was down does not shorten it)."""
        if self._alive_at is not None:
            return 0.0
        return core.downtime_s(self.outbox.get_state(ALIVE), now, self.clock.monotonic(), self.boot_id)

    def _held_by_windows(self, specs: Mapping[str, Any], now: datetime, until: datetime | None = None) -> set[str]:
        """Jobs inside one of their maintenance windows now: held on purpose, so their
        silence clock does not run either (it restarts when the window ends). With `until`:
        the jobs a window held at some moment from `now` to `until` (the time no notifier
        decided: a window that opened and closed then held the job all the same)."""
        windows = list(self.known_windows()) if self.known_windows is not None else []
        if not windows:
            return set()
        if until is not None:
            met = [w for w in windows if w.spans(now, until, limit=1)]
            return {job_id for job_id, spec in specs.items() if any(w.applies_to(spec) for w in met)}
        return {job_id for job_id, spec in specs.items() if blackout_at(spec, windows, now) is not None}

    def _held_by_groups(self, rows: list[Any]) -> set[str]:
        """Jobs held by the pause of a tag or a resource (`chronoctl pause --tag/--resource`):
        a deliberate pause, so their silence clock does not run either."""
        groups = [p for p in getattr(self.store, "pauses", list)() if p.kind != "job"]
        if not groups:
            return set()
        return {
            r.job_id
            for r in rows
            if any(
                (p.kind == "tag" and p.target in r.spec.tags) or (p.kind == "resource" and p.target == r.spec.resource)
                for p in groups
            )
        }


class Lane:
    """A delivery lane: `size` worker threads taking deliveries in order. The threads are
    daemon threads: a delivery still waiting on a slow endpoint when chronod stops does
    not hold its exit (the row's claim is released at the next start and it is sent then)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._queue: queue.SimpleQueue[tuple[Callable[[Any], None], Any] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[[Any], None], arg: Any) -> None:
        if len(self._threads) < self.size:
            t = threading.Thread(target=self._work, name="chrono-notify", daemon=True)
            self._threads.append(t)
            t.start()
        self._queue.put((fn, arg))

    def shutdown(self) -> None:
        """The workers end after the delivery each is in (none is waited for)."""
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, arg = item
            try:
                fn(arg)
            except Exception:  # noqa: S110 -- a delivery records its own failures; the lane goes on
                pass


class SilenceDeadlines:
    """Each job's silence deadline, earliest first: a heap whose stale entries (a job
    decided on again since) are dropped when they reach the top."""

    def __init__(self) -> None:
        self._at: dict[str, datetime] = {}
        self._heap: list[tuple[datetime, str]] = []

    def set(self, job_id: str, deadline: datetime | None) -> None:
        if deadline is None:
            self._at.pop(job_id, None)
        elif self._at.get(job_id) != deadline:
            self._at[job_id] = deadline
            heapq.heappush(self._heap, (deadline, job_id))

    def due(self, now: datetime) -> builtins.set[str]:
        """The jobs whose deadline is `now` or before, taken off."""
        out: builtins.set[str] = builtins.set()  # (`set` in this class is its method)
        while self._heap and self._heap[0][0] <= now:
            deadline, job_id = heapq.heappop(self._heap)
            if self._at.get(job_id) == deadline:
                del self._at[job_id]
                out.add(job_id)
        return out

    def earliest(self) -> datetime | None:
        while self._heap and self._at.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None


def lane_of(route: Mapping[str, Any]) -> str:
    """The delivery lane of a notice (`lane_for` its job; a row stored before lanes were
    kept with it: the account its job runs as)."""
    lane = route.get("lane")
    return str(route.get("user") or "") if lane is None else str(lane)


def lane_for(spec: Any) -> str:
    """The delivery lane of a job's notices: the account that owns its file and runs it,
    when a user owns the file (a delegated file), else the daemon's own (""): a root-owned
    file's job keeps root's lane whoever it runs as, so that a user's own slow endpoints,
    which hold their lane, never hold the alerts of root's jobs that run as that user."""
    if not spec.user:
        return ""
    uid = _file_owner(spec.source_file)
    return "" if uid is not None and uid in (0, os.geteuid()) else str(spec.user)


_OWNERS: dict[str, tuple[float, int | None]] = {}  # job file -> (when looked at, owner uid)
OWNER_TTL_S = 60.0


def _file_owner(path: str) -> int | None:
    """The owner of a job file, looked at again after OWNER_TTL_S; None when it cannot be
    (a node of a fleet without that file: its jobs' notices keep their user's lane)."""
    now = time.monotonic()
    hit = _OWNERS.get(path)
    if hit is not None and now - hit[0] < OWNER_TTL_S:
        return hit[1]
    try:
        uid: int | None = os.stat(path).st_uid
    except (OSError, ValueError):
        uid = None
    if len(_OWNERS) > 10_000:
        _OWNERS.clear()
    _OWNERS[path] = (now, uid)
    return uid


def route_json(spec: Any, index: int) -> dict[str, Any]:
    """A route as stored with its notice: where to send, how long it may take, as whom."""
    n = spec.notify[index]
    return {
        "index": index,
        "command": list(n.command) if isinstance(n.command, tuple) else n.command,
        "webhook": n.webhook,
        "timeout_s": n.timeout_s,
        "user": spec.user,
        "group": spec.group,
        "lane": lane_for(spec),
    }


def payload(n: core.Notice, spec: Any, run: Any | None, node: str, version: str) -> dict[str, Any]:
    """The documented JSON body (chrono-jobs(5), NOTIFICATIONS); `sent_at` is set on delivery."""
    from chronod.core.history import iso

    tail = (run.output_tail or "")[-TAIL_BYTES:] if run is not None else ""
    return {
        "event": n.event,
        "job_id": n.job_id,
        "owner": spec.owner,
        "run_id": n.run_id,
        "state": n.state,
        "scheduled_at": iso(run.scheduled_at) if run is not None else None,
        "fire_at": iso(run.fire_at) if run is not None else None,
        "exit_code": run.exit_code if run is not None else None,
        "error": run.error if run is not None else None,
        "output_tail": tail,
        "node": (run.node if run is not None and run.node else node),
        "detail": n.detail,
        "at": iso(n.at),
        "sent_at": None,
        "chrono_version": version,
    }


def _due(deadline: datetime | None, now: datetime, seconds: float) -> bool:
    """Whether a timer of `seconds` that runs out at `deadline` has (None: never set). A
    wall clock stepped back past the timer's start runs it out too, or it would wait for as
    long as the step."""
    return deadline is None or now >= deadline or now < deadline - timedelta(seconds=seconds)


def _parse(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None
