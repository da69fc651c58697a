"""The simulated world around a real `Daemon`: processes that take time and outlive a
crash, a waker that moves a fake clock to the next thing that happens, a store whose
calls can fail (an outage) or never return (a crash), and the simulation's own record
of what really ran.

Nothing here sleeps or forks: time moves only when the waker says so.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from chronod.core.clock import FakeClock
from chronod.core.model import RunState
from chronod.daemon.waker import Wakeups
from chronod.runner.api import Handle, LaunchRequest, Outcome
from chronod.store.api import StoreError

MIN_WAKE_S = 0.001


class Crash(BaseException):
    """The daemon process dies here (kill -9): nothing after this point runs.

    A BaseException, so that no `except Exception` in the daemon can swallow it."""


class Stop(BaseException):
    """The simulation is over for this daemon life (the driver decides what next)."""


@dataclass
class Proc:
    """One attempt's process as the world sees it: it runs whether or not a daemon watches."""

    run_id: str
    attempt: int
    job_id: str
    trigger: str
    scheduled_at: datetime
    node: str
    started_mono: float
    started_wall: datetime
    ends_mono: float  # when it exits by itself (or is killed by its timeout)
    state: str  # how it ends by itself: succeeded | failed | timed_out
    exit_code: int | None
    resource: str | None
    unsafe: bool
    collected: bool = False  # a daemon read its outcome
    discarded: bool = False  # a daemon stored its outcome and removed the result
    cancelled_mono: float | None = None
    pid: int = 0
    fire_at: datetime | None = None  # CHRONO_FIRE_AT: a backfill's attempts carry when it opened the run

    def end_mono(self) -> float:
        return self.cancelled_mono if self.cancelled_mono is not None else self.ends_mono

    def final_state(self) -> str:
        return RunState.CANCELLED if self.cancelled_mono is not None else self.state


@dataclass
class Life:
    """One daemon process: from its start to its crash or stop (monotonic seconds)."""

    node: str
    started: float
    ended: float | None = None
    ready: float | None = None
    how: str = ""  # crash | stop | start_failed
    pings: list[float] = field(default_factory=list)


@dataclass
class Disturbance:
    """A span during which a daemon could not be expected to fire on time. Its wall times
    are those the clock showed when it was recorded; `World.wall_span` gives every wall
    time it covered once later clock steps are known."""

    kind: str  # down | stall | outage | clock
    start: float  # monotonic
    end: float
    start_wall: datetime
    end_wall: datetime


class World:
    """Shared by every daemon life of a simulation: the clock, processes, disturbances."""

    def __init__(self, clock: FakeClock, rng: random.Random):
        self.clock, self.rng = clock, rng
        self.procs: dict[tuple[str, int], Proc] = {}
        self.live: list[Proc] = []  # processes that may still run (`going` prunes those that ended)
        self.lives: list[Life] = []
        self.disturbances: list[Disturbance] = []
        self.steps: list[tuple[float, float]] = []  # (monotonic, seconds) of each wall-clock step
        # (steps seen, their monotonic times or None when out of order, the seconds of each step
        # and those after it): what `wall_at` adds up, kept until the next step
        self._after_steps: tuple[int, list[float] | None, list[float]] = (0, [], [0])
        self.outage_until = 0.0  # monotonic: store calls fail before this
        self.crash_at = float("inf")  # monotonic: a crash is due (armed) since then
        self.crash_calls = 0  # ... once the store has been called this many times in all
        self.downtime = 5.0  # how long the crashed daemon stays down
        self.store_calls = 0
        self.next_pid = 1000
        self.durations: dict[str, Callable[[random.Random], tuple[float, int]]] = {}

    def mono(self) -> float:
        return self.clock.monotonic()

    def disturbed(self, kind: str, start: float, end: float, walls: tuple[datetime, datetime] | None = None) -> None:
        """Record a span the invariants must excuse (lag, skipped occurrences)."""
        now, mono = self.clock.now(), self.mono()
        a, b = walls or (now - timedelta(seconds=mono - start), now + timedelta(seconds=end - mono))
        self.disturbances.append(Disturbance(kind, start, end, min(a, b), max(a, b)))

    def step_wall(self, seconds: float) -> None:
        """A clock step (NTP, an operator): wall time moves, monotonic time does not."""
        self.steps.append((self.mono(), seconds))
        self.clock.jump_wall(seconds)

    def wall_at(self, mono: float, after_step: bool = True) -> datetime:
        """The wall clock at a monotonic time, past or future (steps not yet made count as
        none); at the instant of a step, the reading after it unless `after_step` is false."""
        seen, monos, later_sums = self._after_steps
        if seen != len(self.steps):
            monos = [m for m, _ in self.steps]
            if any(a > b for a, b in itertools.pairwise(monos)):
                monos = None
            # each sum as the sum over the steps after a time adds them, in their order
            later_sums = [sum(s for _, s in self.steps[k:]) for k in range(len(self.steps) + 1)]
            self._after_steps = (len(self.steps), monos, later_sums)
        if monos is None:
            later = sum(s for m, s in self.steps if m > mono or (m == mono and not after_step))
        else:
            later = later_sums[bisect.bisect_right(monos, mono) if after_step else bisect.bisect_left(monos, mono)]
        return self.clock.now() - timedelta(seconds=self.mono() - mono + later)

    def _spans(self, since: float = 0.0, until: float | None = None) -> list[tuple[float, float]]:
        """The monotonic spans from `since` to `until` (now) that no clock step cuts: inside
        each, the wall clock runs with the monotonic one."""
        end = self.mono() if until is None else until
        return list(itertools.pairwise([since, *(m for m, _ in self.steps if since < m < end), end]))

    def monos_at(self, wall: datetime, until: float | None = None) -> list[float]:
        """Every monotonic time, up to `until` (now), at which the clock showed `wall`: one,
        several after a step back, none when a step forward passed over it or not yet."""
        out = []
        for a, b in self._spans(until=until):
            m = a + (wall - self.wall_at(a)).total_seconds()
            if a <= m <= b:
                out.append(m)
        return out

    def last_mono_at(self, wall: datetime, until: float | None = None) -> float:
        """The latest monotonic time, up to `until` (now), at which the clock showed `wall`,
        or showed the nearest time before it."""
        shown = self.monos_at(wall, until)
        if shown:
            return max(shown)
        return max((b for a, b in self._spans(until=until) if self.wall_at(a) <= wall), default=0.0)

    def showed(self, a: datetime, b: datetime) -> bool:
        """Whether the clock ever showed a time in [a, b), up to now (a step forward may
        pass over a whole span)."""
        return any(self.wall_at(s) < b and a <= self.wall_at(e, after_step=False) for s, e in self._spans())

    def first_mono_from(self, wall: datetime, after: float) -> float | None:
        """The first monotonic time from `after` on at which the clock shows `wall` or later
        (None: not before now)."""
        for a, b in self._spans(since=after):
            m = a + max(0.0, (wall - self.wall_at(a)).total_seconds())
            if m <= b:
                return m
        return None

    def wall_span(self, d: Disturbance) -> tuple[datetime, datetime]:
        """Every wall time the clock showed during a disturbance: a clock step inside it
        moves where its end falls, so the span is not its start plus its length."""
        lo, hi = self.wall_hull(d.start, d.end)
        return min(lo, d.start_wall, d.end_wall), max(hi, d.start_wall, d.end_wall)

    def wall_hull(self, start: float, end: float) -> tuple[datetime, datetime]:
        """The earliest and latest wall time the clock showed between two monotonic times
        (a process that ran across a clock step ran at the wall times on both sides of it)."""
        walls = [self.wall_at(start, after_step=False), self.wall_at(end)]
        for m, _ in self.steps:
            if start <= m <= end:
                walls += [self.wall_at(m, after_step=False), self.wall_at(m)]
        return min(walls), max(walls)

    def advance_to(self, mono: float) -> None:
        if mono > self.mono():
            self.clock.advance(mono - self.mono())

    def going(self, slack_s: float = 0.0) -> list[Proc]:
        """The processes running now, or that ended in the last `slack_s` seconds (a daemon
        has not been told yet); cheap: only the processes started since the last that ran."""
        mono = self.mono()
        self.live = [p for p in self.live if p.end_mono() + slack_s > mono]
        return self.live

    def running(self) -> list[Proc]:
        mono = self.mono()
        return [p for p in self.procs.values() if p.end_mono() > mono]


class FaultyStore:
    """The real store behind a door the simulation controls: during an outage every call
    raises StoreError; once a crash is due, the next call raises Crash instead of running
    (the daemon dies between two store calls)."""

    def __init__(self, store: Any, world: World):
        self._store, self._world = store, world

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name.startswith("_") or not callable(value):
            return value
        world = self._world

        def call(*args: Any, **kwargs: Any) -> Any:
            world.store_calls += 1
            if world.mono() >= world.crash_at and world.store_calls > world.crash_calls:
                raise Crash(f"crash before store.{name}")
            if world.mono() < world.outage_until:
                raise StoreError("database unreachable (simulated outage)")
            return value(*args, **kwargs)

        self.__dict__[name] = call  # made once per method: the daemon calls the store at every wake-up
        return call


class SimRunner:
    """The runner interface (chronod.runner.api) over the world's processes."""

    def __init__(self, world: World, node: str, state_dir: str):
        self.world, self.node, self.state_dir = world, node, state_dir
        self.watching: dict[tuple[str, int], Handle] = {}
        # (exit time, sequence, handle) of every handle given out, by exit time: a wake-up
        # finds the next exit without looking at every process (an entry whose process's
        # exit time moved since, by a cancel, is stale and dropped when met)
        self._exits: list[tuple[float, int, Handle]] = []
        self._seq = 0

    def _watch(self, handle: Handle, end: float) -> None:
        self._seq += 1
        heapq.heappush(self._exits, (end, self._seq, handle))

    def launch(self, req: LaunchRequest) -> Handle:
        w, spec = self.world, req.spec
        code: int | None
        duration, code = w.durations[spec.id](w.rng) if spec.id in w.durations else (1.0, 0)
        state = RunState.SUCCEEDED if code == 0 else RunState.FAILED
        if spec.timeout_s is not None and duration > spec.timeout_s:
            duration, state, code = spec.timeout_s + 0.5, RunState.TIMED_OUT, None
        w.next_pid += 1
        mono, now = w.mono(), w.clock.now()
        proc = Proc(
            req.run_id,
            req.attempt,
            spec.id,
            "",
            datetime.fromisoformat(req.env["CHRONO_SCHEDULED_AT"]),
            self.node,
            mono,
            now,
            mono + duration,
            state,
            code,
            spec.resource,
            spec.idempotency_class == "unsafe",
            pid=w.next_pid,
            fire_at=datetime.fromisoformat(req.env["CHRONO_FIRE_AT"]),
        )
        w.procs[(req.run_id, req.attempt)] = proc
        w.live.append(proc)
        handle = Handle(req.run_id, req.attempt, w.next_pid, w.next_pid, now, w.next_pid)
        self.watching[(req.run_id, req.attempt)] = handle
        self._watch(handle, proc.end_mono())
        return handle

    def ended(self, handles: list[Handle]) -> list[Handle]:
        """The watched handles whose process has exited by now."""
        mono = self.world.mono()
        out = []
        for h in handles:
            p = self.world.procs.get((h.run_id, h.attempt))
            if p is not None and p.end_mono() <= mono:
                out.append(h)
        return out

    def next_exit(self, handles: list[Handle]) -> float | None:
        procs = self.world.procs
        return min((p.end_mono() for h in handles if (p := procs.get((h.run_id, h.attempt))) is not None), default=None)

    def cancel(self, handle: Handle) -> None:
        p = self.world.procs.get((handle.run_id, handle.attempt))
        if p is not None and p.end_mono() > self.world.mono():
            p.cancelled_mono = self.world.mono() + 0.1
            self._watch(handle, p.end_mono())

    def exits(self, ids: set[int], until: float | None = None) -> list[tuple[float, Handle]]:
        """Of the handles whose id is in `ids`: the first to exit (`until` None), or every
        one that exited by `until`, as (exit time, handle) by exit time; as `next_exit` and
        `ended` answer, from the heap."""
        heap, procs, watching = self._exits, self.world.procs, self.watching
        out: list[tuple[float, Handle]] = []
        put_back = []
        while heap:
            end, _, h = heap[0]
            p = procs.get((h.run_id, h.attempt))
            if p is None or p.end_mono() != end:
                heapq.heappop(heap)  # stale: its exit time moved
                continue
            if id(h) not in ids:
                if watching.get((h.run_id, h.attempt)) is not h:
                    heapq.heappop(heap)  # collected: no daemon watches it any more
                else:
                    put_back.append(heapq.heappop(heap))  # watched, but not asked about now
                continue
            if until is None:
                out.append((end, h))
                break
            if end > until:
                break
            out.append((end, h))
            put_back.append(heapq.heappop(heap))
        for entry in put_back:
            heapq.heappush(heap, entry)
        return out

    def _outcome(self, p: Proc) -> Outcome:
        end = self.world.clock.now() - timedelta(seconds=self.world.mono() - p.end_mono())
        state = p.final_state()
        return Outcome(
            p.run_id,
            p.attempt,
            state,
            p.exit_code if state in (RunState.SUCCEEDED, RunState.FAILED) else None,
            15 if state == RunState.CANCELLED else None,
            p.started_wall,
            end,
            "ok\n",
            3,
            None,
            p.pid,
        )

    def collect(self, handle: Handle) -> Outcome | None:
        p = self.world.procs.get((handle.run_id, handle.attempt))
        if p is None or p.end_mono() > self.world.mono():
            return None
        self.watching.pop((handle.run_id, handle.attempt), None)
        p.collected = True
        return self._outcome(p)

    def adopt(self, run_id: str, attempt: int) -> Handle | Outcome | None:
        p = self.world.procs.get((run_id, attempt))
        if p is None or p.node != self.node or p.discarded:
            return None
        if p.end_mono() > self.world.mono():
            handle = Handle(run_id, attempt, p.pid, p.pid, p.started_wall, p.pid)
            self.watching[(run_id, attempt)] = handle
            self._watch(handle, p.end_mono())
            return handle
        return self._outcome(p)

    def orphans(self, known: Any = ()) -> list[tuple[str, int]]:
        skip = set(self.watching) | set(known)
        return [k for k, p in self.world.procs.items() if p.node == self.node and not p.discarded and k not in skip]

    def discard(self, run_id: str, attempt: int) -> None:
        p = self.world.procs.get((run_id, attempt))
        if p is not None:
            p.discarded = True


class SimNotifier:
    """systemd's notify protocol, recorded: READY and every WATCHDOG ping of this life."""

    def __init__(self, life: Life, watchdog_interval_s: float | None, clock: FakeClock):
        self.life, self.watchdog_interval_s, self.clock = life, watchdog_interval_s, clock

    def ready(self, status: str) -> None:
        self.life.ready = self.clock.monotonic()

    def status(self, status: str) -> None:
        pass

    def reloading(self) -> None:
        pass

    def watchdog(self) -> None:
        self.life.pings.append(self.clock.monotonic())

    def stopping(self) -> None:
        pass


class _Instrument:
    def labels(self, *_: Any) -> _Instrument:
        return self

    def inc(self, *_: Any) -> None:
        pass

    def set(self, *_: Any) -> None:
        pass

    def observe(self, *_: Any) -> None:
        pass


class NullMetrics:
    """Prometheus metrics the daemon updates; the simulation keeps none of them."""

    def __getattr__(self, name: str) -> _Instrument:
        return _Instrument()

    def beat(self) -> None:
        pass


@dataclass
class Event:
    """Something the world does to the daemon at a monotonic time."""

    at: float
    kind: str  # registry | pause | resume | trigger | backfill | jump | stall | crash | outage
    data: dict[str, Any] = field(default_factory=dict)


class SimWaker:
    """`Waker.wait` without a kernel: move the clock to the earliest of the daemon's
    deadline, a watched process's exit and the world's next event, and say what happened."""

    def __init__(
        self,
        world: World,
        runner: SimRunner,
        events: Callable[[float], list[Event]],
        next_event: Callable[[], float],
        apply: Callable[[Event, Wakeups], None],
        end: float,
    ):
        self.world, self.runner, self.events, self.next_event, self.apply = world, runner, events, next_event, apply
        self.end = end
        self.stop_requested = False

    def wait(self, deadline: datetime | None, handles: list[Handle]) -> Wakeups:
        w = self.world
        if w.crash_at != float("inf"):
            raise Crash("crash while idle")
        now, mono = w.clock.now(), w.mono()
        candidates = [self.end, self.next_event()]
        if deadline is not None:
            candidates.append(mono + max((deadline - now).total_seconds(), 0.0))
        # processes end only by the clock (a cancel is the daemon's): none ends before exit_at
        ids = set(map(id, handles))
        first = self.runner.exits(ids)
        exit_at = first[0][0] if first else None
        if exit_at is not None:
            candidates.append(max(exit_at, mono))
        # a wake-up takes time: without this a deadline a float's rounding short of `now`
        # would be waited for forever
        target = max(min(candidates), mono + MIN_WAKE_S)
        w.advance_to(target)
        woke = Wakeups()
        for event in self.events(w.mono()):
            self.apply(event, woke)
        if w.mono() >= self.end:
            woke.stop = True
        mono = w.mono()
        woke.children = []
        if exit_at is not None and mono >= exit_at:
            done = {id(h) for _, h in self.runner.exits(ids, until=mono)}
            # in the daemon's order, picked without a Python step per process watched
            woke.children = list(itertools.compress(handles, map(done.__contains__, map(id, handles))))
        return woke
