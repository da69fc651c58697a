"""The node's start limit: at most `--max-starts` runs started per second. Past its
ceiling a node then starts what it can, every second, and the catch-up rule decides which
of the runs that wait are skipped (`chronod.core.policy.start_admission`); without it a
node past its ceiling fell further behind each second and started less and less.

A node of a fleet past its ceiling (a run left waiting 2 s late: `overload`) also
sheds, at each wake-up, the runs it would start more than `overload.OVERLOAD_LAG_S` late
at the rate it measured itself starting (recorded skipped_outage, naming the overload):
waiting would start nothing more and make every start late."""

from __future__ import annotations

import dataclasses
from collections import deque
from datetime import datetime, timedelta
from typing import Collection

from chronod.core import overload, policy, shares
from chronod.core.clock import Clock
from chronod.core.model import RunState, Trigger
from chronod.daemon.runs import Job
from chronod.daemon.seams import Log, Metrics
from chronod.store.api import Run

DEFAULT_MAX_STARTS_PER_S = 1000.0  # about what one core forks and execs from Python; see chronod(8)
LOG_EVERY_S = 10.0  # the summary of waits and skips is logged at most this often
ENDINGS_WAIT_MAX_S = 1.0  # starts owed go before recording endings, for at most this long


class StartLimit:
    """Admission of due runs under the start limit; the runs that wait for it (`backlog`)."""

    def __init__(
        self, clock: Clock, log: Log, metrics: Metrics, rate: float | None, node: str = "", sheds: bool = False
    ) -> None:
        self.clock, self.log, self.metrics, self.node = clock, log, metrics, node
        self.sheds = sheds  # a node of a fleet sheds past its ceiling (`overload`)
        self.backlog: list[tuple[Job, Run]] = []  # due runs waiting to start (start limit, busy wake-up)
        self.max_starts = rate if rate and rate > 0 else None
        self.budget = policy.Budget(self.max_starts or 0.0, self.clock.monotonic())
        self.admit_retry: float | None = None  # monotonic: when the budget has a start again
        self.skipped = 0  # runs skipped since the last summary
        self.limited_logged = float("-inf")  # the first summary at once
        self.owed_since: float | None = None  # monotonic: since when admitted runs wait to start
        self.late_at: float | None = None  # monotonic: when a run last waited late, or the overload shed
        self.starts: deque[tuple[float, int, float]] = deque()  # (monotonic, runs, seconds): the start rate
        self.shed_count = 0  # runs shed since the last summary

    def admit_starts(
        self, claims: list[tuple[Job, Run]], settles: list[tuple[str, str, str | None]]
    ) -> list[tuple[Job, Run]]:
        """Of this wake-up's runs to start, the ones the start limit lets through now (in
        order). The others wait in `self.backlog` for the next wake-up; those the catch-up
        rule skips join `settles` (skipped_outage, with the reason)."""
        if not claims:
            return []
        by_id = {run.run_id: (job, run) for job, run in claims}
        line = [candidate(job, run) for job, run in claims]
        a = policy.start_admission(self.max_starts, self.budget, line, self.clock.now(), self.clock.monotonic())
        self.budget, self.admit_retry = a.budget, a.retry_at
        self.budget.turns.update(a.served)  # the fair shares' turns, carried by the budget
        start, wait, skip = list(a.start), list(a.wait), list(a.skip)
        mono = self.clock.monotonic()
        if self.sheds and overload.overloaded(self.late_at, mono) and (start or wait):
            start, wait, shed = self.shed(start, wait, mono)
            skip += shed
        for c, why in skip:
            settles.append((c.run_id, RunState.SKIPPED_OUTAGE, why))
            self.metrics.runs.labels(c.spec.id, RunState.SKIPPED_OUTAGE).inc()
        self.backlog = [by_id[c.run_id] for c in wait]
        self.skipped += len(skip)
        self.log_limited()
        return [by_id[c.run_id] for c in start]

    def shed(
        self, start: list[policy.Candidate], wait: list[policy.Candidate], mono: float
    ) -> tuple[list[policy.Candidate], list[policy.Candidate], list[tuple[policy.Candidate, str]]]:
        """Past the ceiling: of the runs to start now and those to wait (in the order they
        would start, the waiting ones in fair order too), the ones kept, and the ones shed
        (`overload.shed`) at the start rate this node measured."""
        rate = overload.start_rate(self.starts, mono)
        if self.max_starts is not None:
            rate = min(rate, self.max_starts)
        owner, job = (lambda c: shares.principal(c.spec.user)), (lambda c: c.spec.id)
        line = start + shares.fair_order(wait, owner, job, self.budget.turns)
        why = overload.reason(self.node, overload.started_per_s(self.starts, mono))
        keep, shed = overload.shed(line, rate, self.clock.now(), why)
        if shed:
            self.late_at = mono
            self.shed_count += len(shed)
        kept = {c.run_id for c in keep}
        return [c for c in start if c.run_id in kept], [c for c in wait if c.run_id in kept], shed

    def started(self, n: int, spent_s: float) -> None:
        """`n` runs were claimed and started now, in `spent_s` seconds (the start rate an
        overloaded node measures itself by)."""
        mono = self.clock.monotonic()
        if n:
            self.starts.append((mono, n, spent_s))
        while self.starts and self.starts[0][0] < mono - overload.RATE_WINDOW_S:
            self.starts.popleft()

    def wakeup_ended(self) -> None:
        """A wake-up's starts are done: a run it left waiting late makes the node
        overloaded (`overload.late`)."""
        if self.sheds and self.backlog and overload.late((candidate(j, r) for j, r in self.backlog), self.clock.now()):
            self.late_at = self.clock.monotonic()

    def overloaded(self) -> bool:
        """Whether this node is past its ceiling (`overload.overloaded`)."""
        return self.sheds and overload.overloaded(self.late_at, self.clock.monotonic())

    def take_backlog(self) -> list[tuple[Job, Run]]:
        """The runs waiting to start, first in this wake-up's claims; the line is empty after."""
        backlog, self.backlog = self.backlog, []
        return backlog

    def drop(self, job_ids: Collection[str] | None = None) -> None:
        """Runs of these jobs (None: of every job) no longer wait: their occurrences are read again."""
        self.backlog = [] if job_ids is None else [(j, r) for j, r in self.backlog if r.job_id not in job_ids]

    def give_back(self, runs: list[tuple[Job, Run]]) -> None:
        """Runs admitted but not started this wake-up (its time slice ran out): first in line next time."""
        self.backlog = runs + self.backlog
        self.refund(len(runs))
        if self.owed_since is None:
            self.owed_since = self.clock.monotonic()

    def starts_owed(self) -> bool:
        """Whether runs admitted to start still wait for a wake-up's time slice (a burst
        longer than one). The loop then starts them before it records any ending: a
        burst of 1,000 runs spent a third of its time recording the first ones' endings."""
        if self.owed_since is not None and not self.backlog:
            self.owed_since = None
        return self.owed_since is not None

    def endings_wait(self) -> bool:
        """Whether endings still wait for the starts owed (asked after a wake-up's starts).
        They wait at most ENDINGS_WAIT_MAX_S, their result files on disk meanwhile, and are
        then recorded after that wake-up's starts, never before them; the starts still
        owed go first again from then on."""
        if not self.starts_owed():
            return False
        mono = self.clock.monotonic()
        if self.owed_since is not None and mono - self.owed_since > ENDINGS_WAIT_MAX_S:
            self.owed_since = mono
            return False
        return True

    def refund(self, n: int) -> None:
        """`n` admitted runs were not started after all (another node claimed or settled
        them): their starts go back to the budget, or a line full of runs the other nodes
        took would spend it all and start nothing."""
        if n > 0 and self.max_starts is not None:
            self.budget = dataclasses.replace(self.budget, tokens=min(self.budget.tokens + n, self.max_starts))

    def backlog_wake(self, now: datetime) -> datetime | None:
        """When the loop must wake for the runs waiting to start (None: none wait)."""
        if not self.backlog:
            return None
        if self.admit_retry is None:
            return now
        return now + timedelta(seconds=max(self.admit_retry - self.clock.monotonic(), 0.0))

    def log_limited(self) -> None:
        """A summary of what waits and what was skipped, at most every LOG_EVERY_S (each
        skipped run also says why in its own record)."""
        mono = self.clock.monotonic()
        if not (self.backlog or self.skipped) or mono - self.limited_logged < LOG_EVERY_S:
            return
        self.log(
            "runs.start_limited",
            "warning",
            limit_per_s=self.max_starts or "none",
            waiting=len(self.backlog),
            skipped=self.skipped,
            shed_overloaded=self.shed_count,
            hint="more runs fall due than this node starts: add nodes, spread the jobs (tolerance_s), "
            "or raise --max-starts if the host has room",
        )
        self.skipped = self.shed_count = 0
        self.limited_logged = mono


def candidate(job: Job, run: Run) -> policy.Candidate:
    """A run asking to start. Only a first attempt of a scheduled occurrence may be skipped:
    a retry or a manual run waits its turn whatever the catch-up rule says."""
    skippable = run.trigger == Trigger.SCHEDULE and run.attempts == 0 and run.state == RunState.PENDING
    return policy.Candidate(run.run_id, job.spec, run.scheduled_at, run.fire_at, skippable)
