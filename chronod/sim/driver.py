"""Drive the real `Daemon` through simulated weeks: build it on the memory store (or the
real SQLite store, `Config.store`) with a fake clock, a simulated runner and a fake waker, inject the faults the seed
draws, rebuild it after each crash on the same database, and keep the simulation's
own record of what happened for the invariants (chronod.sim.invariants)."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from chronod.core.clock import FakeClock
from chronod.core.model import JobSpec
from chronod.daemon.filestore import StoredFiles, node_key
from chronod.daemon.loop import Daemon
from chronod.daemon.waker import Wakeups
from chronod.sim.scenario import Config, Registry, duration, maintenance, start_time
from chronod.sim.world import (
    Crash,
    Event,
    FaultyStore,
    Life,
    NullMetrics,
    SimNotifier,
    SimRunner,
    SimWaker,
    World,
)
from chronod.specfile import FileCache, load_registry
from chronod.store.api import Store, StoreError
from chronod.store.memory import MemoryStore
from chronod.store.sql import SqlStore

NODE = "sim-a"
PROBE_EVERY_S = 600.0
MAX_DOWNTIME_S = 1800.0


@dataclass
class Version:
    """A job definition as daemons ran it, from the load that first returned it until the
    load that changed or removed it (wall times)."""

    spec: JobSpec
    since: datetime
    until: datetime | None = None


@dataclass
class Outcome:
    """What a simulation leaves for the invariants."""

    cfg: Config
    world: World
    store: Store
    versions: dict[str, list[Version]]
    paused: dict[str, list[tuple[datetime, datetime | None]]]
    manual: dict[str, str]  # run_id -> job_id of the triggers the simulation requested
    start: datetime
    end: datetime  # wall time at the end
    fault_end: float  # monotonic: no fault after this
    edits: list[tuple[datetime, str]] = field(default_factory=list)
    log_counts: dict[str, int] = field(default_factory=dict)
    tmp: Path | None = None
    nodes: tuple[str, ...] = (NODE,)
    backfills: list[int] = field(default_factory=list)  # ids of the backfills the simulation stored
    backfills_at: dict[int, float] = field(default_factory=dict)  # backfill id -> monotonic time it was stored
    # wall-time spans the daemons carried the maintenance windows (None: all along)
    windows_carried: list[tuple[datetime, datetime | None]] | None = None
    probes: list[Any] = field(default_factory=list)  # the audit asked while the daemons ran (chronod.sim.audit.Probe)

    @property
    def db_path(self) -> Path:
        assert self.tmp is not None
        return self.tmp / "chrono.db"

    def close(self) -> None:
        self.store.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def fault_plan(cfg: Config, rng: random.Random, t0: float, t1: float) -> list[Event]:
    """The faults and operator actions of the whole simulation, by monotonic time."""
    span, days = t1 - t0, max(cfg.days, 0.05)
    events: list[Event] = []

    def some(kind: str, per_day: float, **make: Any) -> None:
        n = max(1, round(per_day * days * rng.uniform(0.7, 1.3)))
        for _ in range(n):
            events.append(Event(t0 + rng.uniform(0, span), kind, {k: f(rng) for k, f in make.items()}))

    f = cfg.faults
    if "crash" in f:
        some(
            "crash",
            3,
            calls=lambda r: r.randrange(0, 40),
            downtime=lambda r: r.choice([r.uniform(1, 30), r.uniform(30, 600), r.uniform(600, MAX_DOWNTIME_S)]),
        )
    if "stall" in f:
        some("stall", 3, seconds=lambda r: r.choice([r.uniform(1, 20), r.uniform(20, 200), r.uniform(300, 900)]))
    if "clock" in f:
        some("jump", 1.5, seconds=lambda r: r.choice([r.uniform(20, 7200), -r.uniform(5, 900)]))
    if "outage" in f:
        some("outage", 2, seconds=lambda r: r.choice([r.uniform(2, 60), r.uniform(60, 1800)]))
    if "registry" in f:
        some("registry", 6)
    some("pause", 2, seconds=lambda r: r.uniform(60, 7200))
    some("trigger", 6)
    if "backfill" in f:
        some("backfill", 4)
    events.sort(key=lambda e: e.at)
    return events


class Simulation:
    """One seeded simulation of one node (the SQLite store carries one node)."""

    def __init__(self, cfg: Config, workdir: Path | None = None):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.tmp = Path(tempfile.mkdtemp(prefix="chrono-sim-", dir=workdir or _fast_tmp()))
        self.start = start_time(cfg, self.rng)
        self.clock = FakeClock(self.start, mono=1000.0)
        self.world = World(self.clock, random.Random(self.rng.random()))
        self.store = sim_store(cfg, self.clock, "sqlite")
        self.registry = Registry(self.tmp / "jobs.d", random.Random(self.rng.random()), "dst" in cfg.faults)
        self.registry.seconds_jobs = cfg.seconds_jobs
        if "window" in cfg.faults and not cfg.blackouts and not cfg.job_docs:
            # its own draws, so that every other fault draws what it drew before
            windows = random.Random(cfg.seed * 7919 + 1)
            self.cfg = cfg = replace(cfg, blackouts=maintenance(windows))
            self.registry.windows = windows
        self.registry.blackouts = cfg.blackouts
        self.registry.build(cfg.jobs, cfg.job_docs, cfg.mean_s)
        self.t0 = self.clock.monotonic()
        self.end = self.t0 + cfg.days * 86400
        self.fault_end = max(self.t0, self.end - min(cfg.drain_s, cfg.days * 86400 * 0.25))
        self.events = fault_plan(cfg, random.Random(self.rng.random()), self.t0, self.fault_end)
        self.versions: dict[str, list[Version]] = {}
        self.paused: dict[str, list[tuple[datetime, datetime | None]]] = {}
        self.manual: dict[str, str] = {}
        self.backfills: list[int] = []
        self.backfills_at: dict[int, float] = {}
        self.windows_carried: list[tuple[datetime, datetime | None]] = []
        self.edits: list[tuple[datetime, str]] = []
        self.log_counts: dict[str, int] = {}
        self.first_load = True
        self.died: datetime | None = None  # wall time the last daemon died
        # the audit is asked about waiting occurrences every PROBE_EVERY_S while a daemon lives
        # (read-only, outside the daemon's store door: it changes nothing the seed decides)
        self.probes: list[Any] = []
        self.next_probe = self.t0 + PROBE_EVERY_S
        self.life: Life | None = None
        self.files: FileCache | None = None  # the living daemon's (`stored_files`)

    # --- what the daemon is given ------------------------------------------------------
    def load(self) -> Any:
        """The real registry loader; and the record of which definitions a daemon was given."""
        result = load_registry([self.registry.root], now=self.clock.now(), secure=False, cache=self.files)
        self.note_versions(result, fresh=self.first_load)
        self.first_load = False
        return result

    def note_versions(self, result: Any, fresh: bool) -> None:
        now = self.clock.now()
        effective: dict[str, JobSpec] = {}
        for name, plans in self.registry.files.items():
            if name in self.registry.broken and fresh:
                continue  # a new daemon has no last good version of a broken file
            ids = {p.id for p in plans}
            fres = result.files.get(str(self.registry.root / name))
            if fres is not None and (fres.ok or fresh):
                # a new daemon has no last good version of a file with errors either: it
                # runs the file's valid jobs and drops the invalid ones
                effective.update({s.id: s for s in fres.specs if s.id in ids})
            else:
                effective.update({i: v[-1].spec for i, v in self.versions.items() if i in ids and v[-1].until is None})
        # a new daemon that does not carry a job any more stopped running it when the last
        # one died (a crash while a file is broken drops that file's jobs: reported, not excused)
        until = self.died if fresh and self.died is not None else now
        for job_id, versions in self.versions.items():
            last = versions[-1]
            if last.until is None and (job_id not in effective or effective[job_id] != last.spec):
                last.until = until
        for job_id, spec in effective.items():
            versions = self.versions.setdefault(job_id, [])
            if not versions or versions[-1].until is not None:
                versions.append(Version(spec, now))
        self.note_windows(fresh, now, until)

    def note_windows(self, fresh: bool, now: datetime, until: datetime) -> None:
        """The windows live in the first file: a daemon carries them while it is good, and
        keeps its last good version of them while it is broken, but a new daemon has none."""
        spans = self.windows_carried
        carrying = bool(spans) and spans[-1][1] is None
        carried = min(self.registry.files) not in self.registry.broken or (carrying and not fresh)
        if carried and not carrying:
            spans.append((now, None))
        elif carrying and not carried:
            spans[-1] = (spans[-1][0], until)

    def log(self, event: str, level: str = "info", **fields: Any) -> None:
        self.log_counts[event] = self.log_counts.get(event, 0) + 1

    # --- the world's events ---------------------------------------------------------------
    def next_event(self) -> float:
        return self.events[0].at if self.events else float("inf")

    def due_events(self, mono: float) -> list[Event]:
        if mono >= self.next_probe:
            from chronod.sim.audit import probe

            self.probes += probe(self, self.clock.now())
            self.next_probe = mono + PROBE_EVERY_S
        out = []
        while self.events and self.events[0].at <= mono:
            out.append(self.events.pop(0))
        return out

    def apply(self, event: Event, woke: Wakeups) -> None:
        w, now = self.world, self.clock.now()
        kind, data = event.kind, event.data
        if kind == "crash":
            w.crash_at = w.mono()
            w.crash_calls = w.store_calls + data["calls"]
            w.downtime = data["downtime"]
        elif kind == "stall":
            start = w.mono()
            w.advance_to(start + data["seconds"])
            w.disturbed("stall", start, w.mono())
        elif kind == "jump":
            start = w.mono()
            w.step_wall(data["seconds"])
            w.disturbed("clock", start, start + 1, walls=(now, self.clock.now()))
        elif kind == "outage":
            w.outage_until = max(w.outage_until, w.mono() + data["seconds"])
            w.disturbed("outage", w.mono(), w.outage_until + 35)  # + the longest reconnect backoff
        elif kind == "registry":
            self.edits.append((now, self.registry.edit()))
            for plan in self.registry.plans().values():
                w.durations.setdefault(plan.id, duration(plan))
            woke.reload = True
        elif kind == "pause":
            self.pause(data["seconds"])
        elif kind == "resume":
            self.resume(data["job"])
        elif kind == "trigger":
            self.trigger(woke)
        elif kind == "backfill":
            self.backfill(woke, data)

    def pause(self, seconds: float) -> None:
        plans = sorted(self.registry.plans())
        if not plans or self.world.mono() < self.world.outage_until:
            return
        job = self.rng.choice(plans)
        if self.paused.get(job) and self.paused[job][-1][1] is None:
            return
        if self.store.set_paused(job, True, "simulated maintenance"):
            self.paused.setdefault(job, []).append((self.clock.now(), None))
            self.events.append(Event(self.world.mono() + seconds, "resume", {"job": job}))
            self.events.sort(key=lambda e: e.at)

    def resume(self, job: str) -> None:
        if self.world.mono() < self.world.outage_until:
            self.events.append(Event(self.world.outage_until + 1, "resume", {"job": job}))
            self.events.sort(key=lambda e: e.at)
            return
        self.store.set_paused(job, False, None)
        since, _ = self.paused[job][-1]
        self.paused[job][-1] = (since, self.clock.now())

    def trigger(self, woke: Wakeups) -> None:
        plans = sorted(self.registry.plans())
        if not plans or self.world.mono() < self.world.outage_until:
            return
        job = self.rng.choice(plans)
        rid = f"manual-{job}-{len(self.manual):06d}"
        self.store.add_request("trigger", job, {"run_id": rid})
        self.manual[rid] = job
        woke.requests = True

    def backfill(self, woke: Wakeups, data: dict[str, Any] | None = None) -> None:
        """An operator backfills the last hours of one job, as `chronoctl backfill` stores it,
        and (with crashes among the faults) the daemon dies a little later, a few runs into
        the backfill. Unsafe jobs are left alone: their owners would refuse. The job is
        drawn from the most frequent ones that forbid overlap, so that the backfill's runs
        meet the live schedule (the schedule comes first). `data` may fix the job (`job`),
        the range (`since_s` to `until_s` seconds ago) and `only`."""
        from chronod.core import backfill as core
        from chronod.core.schedule import compile_schedule

        w, now = self.world, self.clock.now()
        specs = sorted(
            (v[-1].spec for v in self.versions.values() if v[-1].until is None),
            key=lambda spec: spec.id,
        )
        data = data or {}
        specs = [sp for sp in specs if sp.enabled and sp.idempotency_class != "unsafe"]
        if data.get("job"):
            specs = [sp for sp in specs if sp.id == data["job"]]
        if not specs or w.mono() < w.outage_until:
            return

        def period(sp: JobSpec) -> float:
            sched = compile_schedule(sp.schedule, sp.timezone, sp.dst_gap, sp.dst_repeat)
            a = sched.next_after(now)
            b = sched.next_after(a) if a is not None else None
            return (b - a).total_seconds() if a is not None and b is not None else float("inf")

        specs.sort(key=lambda sp: (sp.overlap != "forbid", period(sp), sp.id))
        spec = self.rng.choice(specs[: max(3, len(specs) // 4)])
        since = data.get("since_s") or self.rng.uniform(600, 7200)
        start, end = now - timedelta(seconds=since), now - timedelta(seconds=data.get("until_s", 60))
        schedule = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
        runs = self.store.runs(spec.id, since=start, until=end + timedelta(seconds=1))
        spans = self.store.known_spans([spec.id]).get(spec.id, [])
        only = data.get("only") or self.rng.choice(core.ONLY)
        choice = core.choose(spec, schedule, runs, start=start, end=end, only=only, now=now, nodes=[NODE], spans=spans)
        if not choice.picks and only != "all" and not data.get("only"):
            only = "all"  # nothing missed or failed: the operator reruns the range
            choice = core.choose(
                spec, schedule, runs, start=start, end=end, only=only, now=now, nodes=[NODE], spans=spans
            )
        items = [(o.run_id, o.job_key, o.scheduled_at, o.fire_at) for o in (p.occurrence for p in choice.picks[:8])]
        if not items:
            return
        bf_id = self.store.add_backfill(
            spec.id,
            from_at=start,
            to_at=end,
            only=only,
            max_concurrency=1,
            allow_unsafe=False,
            reason=None,
            requested_by="sim",
            items=items,
        )
        self.store.add_request("backfill", spec.id, {"backfill_id": bf_id})
        self.backfills.append(bf_id)
        self.backfills_at[bf_id] = w.mono()
        woke.requests = True
        if "crash" in self.cfg.faults:  # a few runs into it
            crash = {"calls": self.rng.randrange(0, 40), "downtime": self.rng.uniform(1, 120)}
            self.events.append(Event(w.mono() + self.rng.uniform(15, 90), "crash", crash))
            self.events.sort(key=lambda e: e.at)

    # --- daemon lives ------------------------------------------------------------------------
    def daemon(self, life: Life) -> Daemon:
        self.files = stored_files(self.store, NODE, self.tmp)  # a new process: nothing in memory
        runner = SimRunner(self.world, NODE, str(self.tmp))
        waker = SimWaker(self.world, runner, self.due_events, self.next_event, self.apply, self.end)
        return Daemon(
            clock=self.clock,
            store=FaultyStore(self.store, self.world),
            runner=runner,
            load_registry=self.load,
            node=NODE,
            metrics=NullMetrics(),
            notifier=SimNotifier(life, self.cfg.watchdog_usec / 2e6, self.clock),
            log=self.log,
            waker=waker,
            boot_id="sim-boot",
            boot_time=self.start.timestamp(),
            rng=random.Random(self.rng.random()),
            max_starts_per_s=self.cfg.max_starts,
        )

    def run(self) -> Outcome:
        w = self.world
        for plan in self.registry.plans().values():
            w.durations[plan.id] = duration(plan)
        while True:
            life = Life(NODE, w.mono())
            w.lives.append(life)
            self.first_load = True
            d = self.daemon(life)
            try:
                d.start()
                d.run_forever()
                life.how, life.ended = "stop", w.mono()
                break
            except Crash:
                life.how = "crash"
            except StoreError:
                life.how = "start_failed"  # systemd restarts it
            life.ended = w.mono()
            if not self.first_load:  # it ran definitions: a successor that drops one stopped it here
                self.died = self.clock.now()
            self.down(getattr(w, "downtime", 5.0))
            if w.mono() >= self.end:
                break
        for plan in self.registry.plans().values():
            w.durations.setdefault(plan.id, duration(plan))
        snapshot(self.store, self.tmp / "chrono.db")
        out = Outcome(
            self.cfg,
            w,
            self.store,
            self.versions,
            self.paused,
            self.manual,
            self.start,
            self.clock.now(),
            self.fault_end,
            self.edits,
            self.log_counts,
            self.tmp,
        )
        out.backfills = list(self.backfills)
        out.backfills_at = dict(self.backfills_at)
        out.windows_carried = list(self.windows_carried)
        out.probes = list(self.probes)
        return out

    def down(self, seconds: float) -> None:
        """The daemon is dead for `seconds`: processes go on, the world's events happen."""
        w = self.world
        w.crash_at, w.crash_calls = float("inf"), 0
        start, until = w.mono(), min(w.mono() + seconds, self.end)
        while self.events and self.events[0].at <= until:
            event = self.events.pop(0)
            w.advance_to(event.at)
            if event.kind not in ("crash", "stall"):
                self.apply(event, Wakeups())
        w.advance_to(until)
        for plan in self.registry.plans().values():
            w.durations.setdefault(plan.id, duration(plan))
        w.disturbed("down", start, w.mono() + 1)


STORES = ("memory", "sqlite")


def stored_files(store: Store, node: str, state_dir: Path) -> FileCache:
    """What a daemon process keeps of the job files it validated, as `chronod.daemon.main`
    builds it: the results stored under the node's name (sealed with the key in its state
    directory), so that a restart or a reload validates only the files that changed.

    Read and written on the store itself, not through the simulation's fault door: a seed
    counts its crashes in the daemon's store calls, and calls the simulation did not make
    before would move every crash of every seed (an outage or a crash during a start still
    meets the start's other store calls)."""
    return FileCache(StoredFiles(store, node, node_key(state_dir)))


def sim_store(cfg: Config, clock: FakeClock, dialect: str) -> Store:
    """The store the simulation's daemons run on: the memory store by default, its time the
    simulation's clock, telling the daemon it runs on `dialect`; or (`cfg.store` "sqlite")
    the real SQLite store, in memory."""
    if cfg.store == "sqlite":
        return memory_store(clock)
    if cfg.store != "memory":
        raise ValueError(f"no store {cfg.store!r} to simulate on: choose from {', '.join(STORES)}")
    return MemoryStore(now=clock.now, name="sim", dialect=dialect)


def memory_store(clock: FakeClock) -> SqlStore:
    """The real store on an in-memory SQLite database, its lease time the simulation's
    clock. Nothing of the daemon's differs from a file but the file: no fsync, and no
    database file for the daemon's file watch to check every two seconds (the simulation
    injects no deleted or replaced file), which was most of an idle daemon's wake-ups."""
    store = SqlStore("sqlite://", now=clock.now)
    store.upgrade()
    return store


def snapshot(store: Store, path: Path) -> None:
    """Copy the in-memory database to `path`, for the audit commands that open a file (the
    memory store has no database to copy)."""
    if not isinstance(store, SqlStore):
        return
    raw = store.engine.raw_connection()
    try:
        with sqlite3.connect(path) as dst:
            assert raw.driver_connection is not None
            raw.driver_connection.backup(dst)
        dst.close()
    finally:
        raw.close()


def _fast_tmp() -> str | None:
    """A memory-backed directory when there is one: the simulation's database need not
    survive the machine, and fsyncs would dominate its run time."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
