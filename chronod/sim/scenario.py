"""What a simulation runs: the jobs (written as real registry files), how long each
job's processes take and how they end, and the faults, all drawn from one seed."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from chronod.core.model import JobSpec

FAULTS = ("crash", "stall", "clock", "outage", "registry", "dst", "backfill", "window")
DST_ZONES = ("America/New_York", "Europe/London", "Australia/Sydney")
# UTC instants a few hours before a DST transition in one of DST_ZONES (spring and autumn)
DST_STARTS = (
    datetime(2025, 3, 9, 3, 0, tzinfo=UTC),
    datetime(2025, 3, 30, 0, 0, tzinfo=UTC),
    datetime(2025, 10, 26, 0, 0, tzinfo=UTC),
    datetime(2025, 11, 2, 3, 0, tzinfo=UTC),
    datetime(2025, 4, 5, 12, 0, tzinfo=UTC),
)
PLAIN_START = datetime(2025, 6, 2, 0, 0, tzinfo=UTC)
RESOURCES = {"db": 1, "net": 2}
# libyaml's emitter writes the same text as PyYAML's own, six times faster (every registry edit rewrites a file)
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
JOBS_PER_FILE = 50
# At most this many jobs of a simulation get a schedule in seconds (`_schedule` draws one
# for 5 % of jobs): a job every 20 s starts about 3,500 processes a day, so 50 of them in
# 1,000 jobs were nearly all of a simulation's work, where real crontabs are minute, hourly
# and daily jobs. Those drawn beyond the cap run every five minutes instead (no other
# draw changes: a simulation with fewer seconds-jobs than this is the same as before).
SECONDS_JOBS = 10


@dataclass
class Config:
    """One simulation: its size, its seed, the faults it injects."""

    days: float = 1.0
    jobs: int = 50
    nodes: int = 1
    seed: int = 1
    faults: frozenset[str] = frozenset(FAULTS)
    watchdog_usec: int = 60_000_000
    drain_s: float = 7200.0  # fault-free time at the end, for what is in flight to settle
    job_docs: tuple[dict[str, Any], ...] = ()  # these jobs instead of drawn ones (a scenario of its own)
    mean_s: float = 0.5  # ... and how long their runs take
    max_starts: float | None = None  # the daemon's start limit (runs a second; None: none)
    blackouts: tuple[dict[str, Any], ...] = ()  # maintenance windows, written in the first file
    start: datetime | None = None  # where the calendar starts (default: drawn from the seed)
    store: str = "memory"  # the store under the daemons: "memory" (chronod.store.memory) or "sqlite"
    seconds_jobs: int | None = SECONDS_JOBS  # the most jobs with a schedule in seconds (None: 5 %, as drawn)


@dataclass
class JobPlan:
    """A job as the simulation writes it, and how its processes behave."""

    doc: dict[str, Any]
    mean_s: float  # typical duration
    fail_p: float  # chance that an attempt exits 1

    @property
    def id(self) -> str:
        return str(self.doc["id"])


def _schedule(rng: random.Random, dst: bool) -> tuple[str, str]:
    """(schedule, timezone) from a mix typical of a cron host: mostly daily and hourly."""
    r = rng.random()
    if dst and r < 0.3:
        zone = rng.choice(DST_ZONES)
        return rng.choice(["30 2 * * *", "30 1 * * *", "0 * * * *", "15 3 * * *", "*/20 * * * *"]), zone
    if r < 0.45:
        return f"{rng.randrange(60)} {rng.randrange(24)} * * *", "UTC"
    if r < 0.80:
        return f"{rng.randrange(60)} * * * *", "UTC"
    if r < 0.95:
        return f"*/{rng.choice([5, 10, 15, 30])} * * * *", "UTC"
    return f"*/{rng.choice([20, 30])} * * * * *", "UTC"


def in_seconds(schedule: str) -> bool:
    """Whether a schedule has a seconds field (six fields)."""
    return schedule.count(" ") == 5


def make_job(i: int, rng: random.Random, dst: bool) -> JobPlan:
    schedule, zone = _schedule(rng, dst)
    doc: dict[str, Any] = {
        "id": f"job{i:05d}",
        "owner": f"team{i % 7}",
        "schedule": schedule,
        "timezone": zone,
        "command": f"run-job {i}",
        "idempotency_class": rng.choices(["idempotent", "keyed", "unsafe"], [6, 1, 3])[0],
        "overlap": rng.choices(["forbid", "allow", "replace"], [7, 2, 1])[0],
        "catchup": rng.choices(["latest", "all", "none"], [6, 2, 2])[0],
        "catchup_window_s": rng.choice([600, 3600, 86400]),
        "tolerance_s": rng.choice([0, 0, 5, 30, 120] if schedule.count(" ") == 4 else [0, 5]),
    }
    if doc["tolerance_s"] == 0:
        doc["tolerance_reason"] = "starts on the dot"
    if zone != "UTC" and "*" not in schedule.split()[1]:
        doc["dst_gap"] = rng.choice(["shift", "skip"])
        doc["dst_repeat"] = rng.choice(["first", "last", "both"])
    if rng.random() < 0.3 and doc["idempotency_class"] != "unsafe":
        doc["retry"] = {"attempts": rng.choice([2, 3]), "backoff_s": rng.choice([5, 30]), "max_backoff_s": 120}
    if rng.random() < 0.2:
        doc["timeout_s"] = rng.choice([30, 300])
    if rng.random() < 0.1:
        doc["resource"] = rng.choice(sorted(RESOURCES))
    mean = rng.choice([0.5, 2, 10, 60, 400])
    return JobPlan(doc, mean, rng.choice([0.0, 0.0, 0.05, 0.3]))


def maintenance(rng: random.Random) -> tuple[dict[str, Any], ...]:
    """The `window` fault: a recurring maintenance window (every two hours, for 20 to 50
    minutes) over the jobs tagged `maint` (`in_maintenance`)."""
    return (
        {
            "name": "sim-maintenance",
            "reason": "simulated maintenance",
            "timezone": "UTC",
            "cron": f"{rng.randrange(60)} */2 * * *",
            "duration": f"{rng.randrange(20, 51)}m",
            "tags": ["maint"],
        },
    )


def in_maintenance(doc: dict[str, Any], rng: random.Random) -> None:
    """A quarter of the jobs are held by the maintenance window: most deferred (half of
    those catch up `all`), the others skipped."""
    if rng.random() >= 0.25:
        return
    doc["tags"] = ["maint"]
    doc["blackout"] = rng.choice(["defer", "defer", "skip"])
    if doc["blackout"] == "defer" and rng.random() < 0.5:
        doc["catchup"] = "all"


def duration(plan: JobPlan) -> Callable[[random.Random], tuple[float, int]]:
    """How long one attempt of the job takes and its exit code."""

    def draw(rng: random.Random) -> tuple[float, int]:
        return rng.expovariate(1 / plan.mean_s), int(rng.random() < plan.fail_p)

    return draw


@dataclass
class Registry:
    """The registry directory as the simulation writes it. `effective` is what a daemon
    must run: the last good version of each file (a bad file keeps its last good one)."""

    root: Path
    rng: random.Random
    dst: bool
    files: dict[str, list[JobPlan]] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)
    next_id: int = 0
    blackouts: tuple[dict[str, Any], ...] = ()
    windows: random.Random | None = None  # the `window` fault: jobs the window holds (own draws)
    seconds_jobs: int | None = SECONDS_JOBS  # the most jobs with a schedule in seconds (None: as drawn)
    seconds_drawn: int = 0  # schedules in seconds given so far (jobs added or changed)

    def build(self, n: int, docs: tuple[dict[str, Any], ...] = (), mean_s: float = 0.5) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        plans = [JobPlan(dict(d), mean_s, 0.0) for d in docs] or [self.new_job() for _ in range(n)]
        for k in range(0, len(plans), JOBS_PER_FILE):
            name = f"jobs-{k // JOBS_PER_FILE:03d}.yaml"
            self.files[name] = plans[k : k + JOBS_PER_FILE]
            self.write(name)

    def new_job(self) -> JobPlan:
        self.next_id += 1
        plan = make_job(self.next_id, self.rng, self.dst)
        plan.doc["schedule"] = self.capped(plan.doc["schedule"])
        if self.windows is not None:
            in_maintenance(plan.doc, self.windows)
        return plan

    def capped(self, schedule: str) -> str:
        """The schedule drawn, or every five minutes for a schedule in seconds beyond
        `seconds_jobs` (see SECONDS_JOBS)."""
        if not in_seconds(schedule) or self.seconds_jobs is None:
            return schedule
        self.seconds_drawn += 1
        return schedule if self.seconds_drawn <= self.seconds_jobs else "*/5 * * * *"

    def write(self, name: str, bad: bool = False) -> None:
        path = self.root / name
        if bad:
            path.write_text("jobs:\n  - id: [unclosed\n")
            self.broken.add(name)
            return
        self.broken.discard(name)
        docs = [p.doc for p in self.files[name]]
        data: dict[str, Any] = {
            "defaults": {"workdir": "/tmp"},
            "resources": {k: {"max_concurrency": v} for k, v in RESOURCES.items()},
            "jobs": docs,
        }
        if self.blackouts and name == min(self.files):
            data["blackouts"] = [dict(w) for w in self.blackouts]
        text = yaml.dump(data, Dumper=_DUMPER, sort_keys=False)
        path.write_text(text)

    def plans(self) -> dict[str, JobPlan]:
        return {p.id: p for plans in self.files.values() for p in plans}

    def edit(self) -> str:
        """One operator edit: add, remove or change a job, break a file or fix it."""
        rng = self.rng
        if self.broken and rng.random() < 0.6:
            name = min(self.broken)
            self.write(name)
            return f"fixed {name}"
        name = rng.choice(sorted(set(self.files) - self.broken) or sorted(self.files))
        plans = self.files[name]
        r = rng.random()
        if r < 0.15:
            self.write(name, bad=True)
            return f"broke {name}"
        if r < 0.45 or not plans:
            plans.append(self.new_job())
            what = f"added {plans[-1].id}"
        elif r < 0.7:
            gone = plans.pop(rng.randrange(len(plans)))
            what = f"removed {gone.id}"
        else:
            p = plans[rng.randrange(len(plans))]
            p.doc = {
                **p.doc,
                "schedule": self.capped(_schedule(rng, False)[0])
                if p.doc["timezone"] == "UTC"
                else rng.choice(["30 2 * * *", "45 1 * * *"]),
            }
            what = f"changed {p.id} to {p.doc['schedule']!r}"
        if name not in self.broken:
            self.write(name)
        return what


def start_time(cfg: Config, rng: random.Random) -> datetime:
    """Where the simulated calendar starts: a few hours before a DST transition when the
    `dst` fault is on."""
    if cfg.start is not None:
        return cfg.start
    if "dst" in cfg.faults:
        return rng.choice(DST_STARTS) - timedelta(hours=rng.randrange(0, 6))
    return PLAIN_START + timedelta(hours=rng.randrange(0, 24 * 30))


def spec_map(specs: dict[str, JobSpec]) -> dict[str, JobSpec]:
    return dict(specs)
