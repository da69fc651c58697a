"""A simulated fleet: several real `Daemon`s on one real store, one fake clock.

Each node is a real Daemon with its own simulated runner, state directory and lease; the
store is the memory store (or, `Config.store` "sqlite", the real SqlStore on an in-memory
SQLite database) whose lease time is the simulation's clock, so leases expire, fencing tokens go stale and takeovers happen exactly
as the store decides them. The daemons see the store as a fleet's (`dialect` postgresql:
placement, takeover, version vote, per-node adoption); underneath, every call is the
store's, one at a time, so the simulation interleaves the nodes at store-call granularity. The lease
renewal thread is the one part left out: simulated work takes no time, so the loop's own
heartbeat (every ttl/3) is what renews.

The scheduler moves the clock to the earliest of: the world's next event, a node's next
wake-up (its deadline or a child's exit) and a crashed node's restart, and wakes that one
node (`Daemon.on_wakeup`). Faults for a fleet:

- crash: a node dies (now, or between two of its store calls) and restarts after a
  downtime; its processes go on and are adopted, or taken over once its lease expires;
- stall: a node is stopped (SIGSTOP) between two wake-ups, sometimes past its lease;
- zombie: a node is stopped in the middle of a wake-up, just before a write, for longer
  than its lease, while the others take over; it then carries on with the write under
  its old token, which fencing must refuse;
- outage: the database is unreachable for every node.

The simulation's own record (launches, lease deadlines, takeovers, writes made after a
node's lease had lapsed) is what chronod.sim.fleet_checks judges.
"""

from __future__ import annotations

import operator
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from chronod.core.clock import FakeClock
from chronod.daemon.loop import Daemon
from chronod.daemon.waker import Wakeups
from chronod.runner.api import Handle
from chronod.sim.driver import _fast_tmp, sim_store, snapshot, stored_files
from chronod.sim.scenario import SECONDS_JOBS, Config, JobPlan, Registry, duration
from chronod.sim.world import MIN_WAKE_S, Crash, Event, Life, NullMetrics, Proc, SimNotifier, SimRunner, World
from chronod.specfile import FileCache, load_registry
from chronod.store.api import Run, Store, StoreError

FLEET_FAULTS = ("crash", "stall", "zombie", "outage")
TTL_S = 15.0  # chronod's default lease on PostgreSQL
PLAIN_START = datetime.fromisoformat("2025-06-02T00:00:00+00:00")
# the store calls that write about runs under the caller's token
WRITES = frozenset(
    {
        "commit_wakeup",
        "dispatch",
        "dispatch_in_group",
        "settle",
        "finish",
        "finish_many",
        "schedule_retry",
        "set_processes",
        "reclaim",
        "adopt",
        "claim_offline",
    }
)


@dataclass
class Gap:
    """A span during which one node (or, node '*', the database) was not there."""

    node: str
    kind: str  # crash | stall | zombie | outage | start_failed
    start: float  # monotonic
    end: float
    lease_until: datetime | None = None  # the node's lease deadline when the gap began
    running: list[Run] = field(default_factory=list)  # the runs the store said it held then


@dataclass
class StaleWrite:
    """A run write a node made after its lease had lapsed, and whether the store took it."""

    node: str
    call: str
    at: datetime
    accepted: bool


@dataclass
class Node:
    """One host of the fleet: its daemon (None while down) and what the simulation knows of it."""

    name: str
    state_dir: Path
    daemon: Daemon | None = None
    runner: SimRunner | None = None
    life: Life | None = None
    up_at: float = 0.0  # monotonic: a down node starts then
    wake_at: float = 0.0  # monotonic: its next wake-up
    resume_at: float = 0.0  # stopped (SIGSTOP) until then
    calls: int = 0
    crash_calls: int | None = None  # dies before its store call number ...
    zombie_s: float | None = None  # stopped this long before its next write
    lease_until: datetime | None = None
    reload: bool = False
    requests: bool = False


class FleetRunner(SimRunner):
    """The simulated runner of one node; every launch is also kept in the fleet's record
    (two nodes starting one attempt would otherwise overwrite each other's process)."""

    def __init__(self, world: World, node: str, state_dir: str, launches: list[Proc]):
        super().__init__(world, node, state_dir)
        self.launches = launches

    def launch(self, req: Any) -> Any:
        handle = super().launch(req)
        self.launches.append(self.world.procs[(req.run_id, req.attempt)])
        return handle


class NodeStore:
    """The real store as one node sees it: a fleet's store, with that node's faults (a crash
    between two calls, a stop before a write) and the database's outages; the simulation
    notes every lease change and every write made after the node's lease had lapsed."""

    dialect = "postgresql"

    def __init__(self, store: Store, sim: FleetSimulation, node: Node):
        self._store, self._sim, self._node = store, sim, node

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name.startswith("_") or not callable(value):
            return value
        sim, node = self._sim, self._node

        def call(*args: Any, **kwargs: Any) -> Any:
            node.calls += 1
            if node.crash_calls is not None and node.calls > node.crash_calls:
                raise Crash(f"{node.name}: crash before store.{name}")
            if node.zombie_s is not None and _fenced(name, args, kwargs):
                seconds, node.zombie_s = node.zombie_s, None
                sim.stop_mid_call(node, seconds)
            if sim.world.mono() < sim.world.outage_until:
                raise StoreError("database unreachable (simulated outage)")
            now = sim.clock.now()
            lapsed = node.lease_until is not None and now >= node.lease_until
            result = value(*args, **kwargs)
            sim.noted(node, name, args, result, lapsed, now)
            return result

        self.__dict__[name] = call  # made once per method: the daemons call the store at every wake-up
        return call


_handle = operator.attrgetter("handle")  # a run in flight's handle (C-level, at every wake-up)


def _fenced(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """A write whose acceptance shows in its answer: a zombie is stopped just before one."""
    if name == "commit_wakeup":
        return bool(args[2] if len(args) > 2 else kwargs.get("claims"))
    if name in ("finish_many", "set_processes"):
        return bool(args[0] if args else None)
    return name in ("dispatch", "finish", "schedule_retry", "settle")


def _accepted(result: Any) -> bool:
    if isinstance(result, tuple):
        return result[0] is not None
    return bool(result)


def fleet_jobs(n: int, rng: random.Random, seconds_jobs: int | None = SECONDS_JOBS) -> list[JobPlan]:
    """A fleet's mix: mostly `any` jobs (once per fleet), a quarter `each` (every node); at
    most `seconds_jobs` of them in seconds, as on one node (chronod.sim.scenario.SECONDS_JOBS)."""
    plans = []
    drawn = 0
    for i in range(1, n + 1):
        each = rng.random() < 0.25
        r = rng.random()
        if r < 0.4:
            schedule = f"{rng.randrange(60)} * * * *"
        elif r < 0.85:
            schedule = f"*/{rng.choice([2, 5, 10, 15])} * * * *"
        else:
            schedule = f"*/{rng.choice([20, 30])} * * * * *"
            drawn += 1
        doc: dict[str, Any] = {
            "id": f"job{i:05d}",
            "owner": f"team{i % 5}",
            "schedule": schedule,
            "command": f"run-job {i}",
            "run_on": "each" if each else "any",
            "idempotency_class": "idempotent" if each else rng.choices(["idempotent", "keyed", "unsafe"], [5, 1, 4])[0],
            "overlap": "allow" if each else rng.choice(["forbid", "allow"]),
            "catchup": "latest",
            "tolerance_s": rng.choice([0, 5]) if schedule.count(" ") == 5 else rng.choice([0, 5, 30]),
        }
        if doc["tolerance_s"] == 0:
            doc["tolerance_reason"] = "starts on the dot"
        if schedule.count(" ") == 5 and seconds_jobs is not None and drawn > seconds_jobs:
            doc["schedule"] = "*/5 * * * *"  # (after every draw: the draws after it stay the same)
        mean = 0.5 if each else rng.choice([0.5, 2.0, 10.0, 60.0, 300.0])
        plans.append(JobPlan(doc, mean, rng.choice([0.0, 0.0, 0.1])))
    return plans


@dataclass
class FleetOutcome:
    """What a fleet simulation leaves for its checks."""

    cfg: Config
    world: World
    store: Store
    plans: dict[str, JobPlan]
    start: datetime
    t0: float
    end: datetime
    nodes: tuple[str, ...]
    lives: dict[str, list[tuple[float, float]]]  # node -> (ready, ended) monotonic spans
    launches: list[Proc]
    gaps: list[Gap]
    takeovers: dict[tuple[str, int], list[tuple[str, float]]]  # (run, attempt) -> (node, monotonic)
    stale: list[StaleWrite]
    fault_end: float
    tmp: Path

    def wall(self, mono: float) -> datetime:
        """The wall time of a monotonic one (a fleet's clocks are not stepped)."""
        return self.start + timedelta(seconds=mono - self.t0)

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class FleetSimulation:
    """K nodes, one store, one seed. Each daemon's waker (the simulation steps them)."""

    stop_requested = False  # nodes stop by crashing or by a stop event, not by SIGTERM

    def wait(self, deadline: datetime | None, handles: list[Handle]) -> Wakeups:
        """(The simulation steps each daemon with `on_wakeup`; none runs its own loop.)"""
        raise NotImplementedError("the fleet simulation steps its daemons with on_wakeup")

    def __init__(self, cfg: Config, workdir: Path | None = None):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.tmp = Path(tempfile.mkdtemp(prefix="chrono-fleet-", dir=workdir or _fast_tmp()))
        self.start = PLAIN_START + timedelta(hours=self.rng.randrange(0, 24 * 30))
        self.clock = FakeClock(self.start, mono=1000.0)
        self.world = World(self.clock, random.Random(self.rng.random()))
        self.store = sim_store(cfg, self.clock, "postgresql")
        self.registry = Registry(self.tmp / "jobs.d", random.Random(self.rng.random()), False)
        self.registry.seconds_jobs = cfg.seconds_jobs
        self.registry.root.mkdir(parents=True)
        plans: list[JobPlan] = [JobPlan(dict(d), cfg.mean_s, 0.0) for d in cfg.job_docs] or fleet_jobs(
            cfg.jobs, random.Random(self.rng.random()), cfg.seconds_jobs
        )
        for k in range(0, len(plans), 50):
            name = f"jobs-{k // 50:03d}.yaml"
            self.registry.files[name] = plans[k : k + 50]
            self.registry.write(name)
        for plan in plans:
            self.world.durations[plan.id] = duration(plan)
        self.t0 = self.clock.monotonic()
        self.end = self.t0 + cfg.days * 86400
        self.fault_end = max(self.t0, self.end - min(cfg.drain_s, cfg.days * 86400 * 0.25))
        self.nodes = [Node(f"node{i + 1}", self.tmp / f"node{i + 1}") for i in range(cfg.nodes)]
        for i, n in enumerate(self.nodes):
            n.state_dir.mkdir()
            n.up_at = self.t0 + i * 0.25
        self.events = self.fault_plan(random.Random(self.rng.random()))
        self.launches: list[Proc] = []
        self.gaps: list[Gap] = []
        self.takeovers: dict[tuple[str, int], list[tuple[str, float]]] = {}
        self.stale: list[StaleWrite] = []
        self.lives: dict[str, list[tuple[float, float]]] = {n.name: [] for n in self.nodes}

    # --- the faults ------------------------------------------------------------------
    def fault_plan(self, rng: random.Random) -> list[Event]:
        span, days, f = self.fault_end - self.t0, max(self.cfg.days, 0.05), self.cfg.faults
        events: list[Event] = []

        def some(kind: str, per_day: float, **make: Any) -> None:
            for _ in range(max(1, round(per_day * days * rng.uniform(0.7, 1.3)))):
                data = {k: m(rng) for k, m in make.items()}
                events.append(Event(self.t0 + 60 + rng.uniform(0, max(span - 60, 1)), kind, data))

        def node(r: random.Random) -> int:
            return r.randrange(len(self.nodes))

        if "crash" in f:
            short, long = (lambda r: r.uniform(1, TTL_S * 0.8)), (lambda r: r.uniform(TTL_S * 2, 900))
            some("crash", 4 * len(self.nodes), node=node, calls=lambda r: r.choice([0, r.randrange(1, 30)]),
                 downtime=lambda r: r.choice([short, long])(r))  # fmt: skip
        if "stall" in f:
            some(
                "stall",
                4 * len(self.nodes),
                node=node,
                seconds=lambda r: r.choice([r.uniform(1, 10), r.uniform(20, 120)]),
            )
        if "zombie" in f:
            some("zombie", 3 * len(self.nodes), node=node, seconds=lambda r: r.uniform(TTL_S * 1.5, TTL_S * 6))
        if "outage" in f:
            some("outage", 2, seconds=lambda r: r.choice([r.uniform(2, 20), r.uniform(20, 120)]))
        events.sort(key=lambda e: e.at)
        return events

    def apply(self, event: Event) -> None:
        w, data = self.world, event.data
        if event.kind == "outage":
            w.outage_until = max(w.outage_until, w.mono() + data["seconds"])
            self.gaps.append(Gap("*", "outage", w.mono(), w.outage_until))
            return
        n = self.nodes[data["node"]]
        if n.daemon is None:
            return  # down already
        if n.name in self.busy:  # stopped in the middle of a call: a kill lands when it resumes
            if event.kind == "crash":
                n.crash_calls, n.downtime = n.calls + data["calls"], data["downtime"]
            return
        if event.kind == "crash":
            n.crash_calls = n.calls + data["calls"]
            n.downtime = data["downtime"]
            if data["calls"] == 0:
                self.crashed(n)
        elif event.kind == "stall" and n.resume_at <= w.mono():
            n.resume_at = w.mono() + data["seconds"]
            self.gap(n, "stall", n.resume_at)
        elif event.kind == "zombie":
            n.zombie_s = data["seconds"]

    def gap(self, n: Node, kind: str, until: float) -> None:
        running = [r for r in self.store.running(n.name)]  # the simulation's look, not the node's
        self.gaps.append(Gap(n.name, kind, self.world.mono(), until, n.lease_until, running))

    def stop_mid_call(self, n: Node, seconds: float) -> None:
        """The node stops just before a write; the rest of the fleet goes on meanwhile."""
        until = self.world.mono() + seconds
        self.gap(n, "zombie", until)
        stop = self.gaps[-1]
        self.busy.add(n.name)
        try:
            self.loop(until)
        finally:
            self.busy.discard(n.name)
        # Another node stopped the same way meanwhile runs the fleet inside this call, so this
        # node resumes only when that one does: its stop lasted until now, not until `until`.
        stop.end = max(stop.end, self.world.mono())

    def noted(self, n: Node, call: str, args: tuple[Any, ...], result: Any, lapsed: bool, now: datetime) -> None:
        if call == "acquire_node" or (call == "renew_lease" and result):
            n.lease_until = now + timedelta(seconds=TTL_S)
        elif call == "release_node":
            n.lease_until = now
        if call in WRITES and lapsed:
            self.stale.append(StaleWrite(n.name, call, now, _accepted(result)))
        if call in ("reclaim", "adopt") and result:
            self.takeovers.setdefault((args[0], args[1]), []).append((n.name, self.world.mono()))

    # --- the nodes -----------------------------------------------------------------------
    def load(self, files: FileCache | None = None) -> Any:
        return load_registry([self.registry.root], now=self.clock.now(), secure=False, cache=files)

    def daemon(self, n: Node) -> Daemon:
        n.life = Life(n.name, self.world.mono())
        self.world.lives.append(n.life)
        n.runner = FleetRunner(self.world, n.name, str(n.state_dir), self.launches)
        n.calls, n.crash_calls, n.zombie_s = 0, None, None
        d = Daemon(
            clock=self.clock,
            store=NodeStore(self.store, self, n),
            runner=n.runner,
            load_registry=partial(self.load, stored_files(self.store, n.name, n.state_dir)),
            node=n.name,
            metrics=NullMetrics(),
            notifier=SimNotifier(n.life, self.cfg.watchdog_usec / 2e6, self.clock),
            log=lambda *a, **k: None,
            waker=self,
            boot_id=f"boot-{n.name}",
            boot_time=self.start.timestamp(),
            lease_ttl_s=TTL_S,
            rng=random.Random(self.rng.random()),
            max_starts_per_s=self.cfg.max_starts,
        )
        d.lease.start_thread = lambda: None  # type: ignore[method-assign]  # the loop renews (see above)
        return d

    def boot(self, n: Node) -> None:
        d = self.daemon(n)
        n.daemon = d
        try:
            d.start()
        except Crash:
            self.crashed(n)
            return
        except StoreError:
            assert n.life is not None
            n.life.how, n.life.ended = "start_failed", self.world.mono()
            n.daemon = None
            n.up_at = self.world.mono() + 5.0  # systemd restarts it
            return
        n.wake_at = self.next_wake(n)

    def crashed(self, n: Node) -> None:
        w = self.world
        downtime = getattr(n, "downtime", 5.0)
        assert n.life is not None
        n.life.how, n.life.ended = "crash", w.mono()
        if n.life.ready is not None:
            self.lives[n.name].append((n.life.ready, w.mono()))
        self.gap(n, "crash", w.mono() + downtime)
        n.daemon, n.runner, n.crash_calls = None, None, None
        n.up_at = w.mono() + downtime

    def wake(self, n: Node) -> None:
        d, runner = n.daemon, n.runner
        assert d is not None and runner is not None
        handles = list(map(_handle, d.active.values()))
        ids = set(map(id, handles))
        done = {id(h) for _, h in runner.exits(ids, until=self.world.mono())}
        children = [h for h in handles if id(h) in done] if done else []
        woke = Wakeups(reload=n.reload, requests=n.requests, children=children)
        n.reload = n.requests = False
        try:
            d.on_wakeup(woke)
        except Crash:
            self.crashed(n)
            return
        if n.daemon is d:  # not crashed by a nested event meanwhile
            n.wake_at = self.next_wake(n)

    def next_wake(self, n: Node) -> float:
        d, runner, mono, now = n.daemon, n.runner, self.world.mono(), self.clock.now()
        assert d is not None and runner is not None
        candidates = []
        deadline = d.next_wake()
        if deadline is not None:
            candidates.append(mono + max((deadline - now).total_seconds(), 0.0))
        first = runner.exits(set(map(id, map(_handle, d.active.values()))))
        exit_at = first[0][0] if first else None
        if exit_at is not None:
            candidates.append(max(exit_at, mono))
        return max(min(candidates), mono + MIN_WAKE_S) if candidates else float("inf")

    # --- the scheduler ---------------------------------------------------------------------
    def loop(self, until: float) -> None:
        """Run the world up to `until`: events, restarts and wake-ups, earliest first."""
        w = self.world
        while True:
            at, act = self.earliest()
            if at > until:
                w.advance_to(until)
                return
            w.advance_to(at)
            act()

    def earliest(self) -> tuple[float, Any]:
        best: tuple[float, Any] = (float("inf"), None)
        if self.events:
            e = self.events[0]
            best = (e.at, lambda: self.apply(self.events.pop(0)))
        for n in self.nodes:
            if n.name in self.busy:
                continue
            if n.daemon is None:
                at, act = n.up_at, (lambda n=n: self.boot(n))
            else:
                at, act = max(n.wake_at, n.resume_at), (lambda n=n: self.wake(n))
            if at < best[0]:
                best = (at, act)
        return best

    def run(self) -> FleetOutcome:
        self.busy: set[str] = set()
        self.loop(self.end)
        for n in self.nodes:
            if n.life is not None and n.life.ended is None and n.life.ready is not None:
                self.lives[n.name].append((n.life.ready, self.world.mono()))
        snapshot(self.store, self.tmp / "chrono.db")
        return FleetOutcome(
            self.cfg,
            self.world,
            self.store,
            self.registry.plans(),
            self.start,
            self.t0,
            self.clock.now(),
            tuple(n.name for n in self.nodes),
            self.lives,
            self.launches,
            self.gaps,
            self.takeovers,
            self.stale,
            self.fault_end,
            self.tmp,
        )
