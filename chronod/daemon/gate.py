"""Pauses and maintenance windows: whether a run may start now, as a value.

`Gate` alone holds the pauses read from the store and the registry's windows, and answers
`admit(spec, run, now)` with what the rule in chronod.core.blackout decides: `Start`;
`Skip(state, reason)` (paused: skipped_paused; inside a window: skipped_blackout); `Hold(hit)`
(`blackout: defer`: pending until the window ends, then released through the job's
catch-up policy); `Wait(hit)` (a retry waits for the window's end, whatever the policy).
It writes nothing: the admission (chronod.daemon.admission) acts on the answer.

A held occurrence stays `pending` in the store, so a restart finds it again (it falls due
at once and meets the same rule); the chain's next occurrence is stored when it is held.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from chronod.core import blackout
from chronod.core.blackout import Pause, Window
from chronod.core.model import JobSpec, RunState
from chronod.store.api import OperatorState, Run


@dataclass(frozen=True)
class Start:
    """Nothing holds the run."""


@dataclass(frozen=True)
class Skip:
    """Record this terminal state with this reason."""

    state: RunState
    reason: str


@dataclass(frozen=True)
class Hold:
    """Keep the occurrence pending until the window ends (`blackout: defer`)."""

    hit: blackout.Hit


@dataclass(frozen=True)
class Wait:
    """A retry waits for the window's end."""

    hit: blackout.Hit


Verdict = Start | Skip | Hold | Wait


class Gate:
    """The pauses that hold now and the registry's maintenance windows."""

    def __init__(self, store: OperatorState) -> None:
        self._store = store
        self._pauses: list[Pause] = []  # every pause that holds (job, tag, resource)
        self._paused: dict[str, str | None] = {}  # job_id -> reason of the job's own pause
        self._windows: list[Window] = []  # the registry's maintenance windows
        # job id -> (definition, the windows that apply to it): asked at every start, so
        # kept until the windows or the job's definition change
        self._mine: dict[str, tuple[JobSpec, list[Window]]] = {}

    def refresh(self) -> None:
        """Read the pauses that hold now (a pause past its `until` is over by itself). A job
        the loop still runs keeps its pause while a reload that removes it is prepared."""
        rows = self._store.pauses(include_removed=True)
        self._pauses = [Pause(r.kind, r.target, r.reason, r.by, r.since, r.until) for r in rows]
        self._paused = {p.target: p.reason for p in self._pauses if p.kind == "job"}

    def set_windows(self, windows: Sequence[Window]) -> None:
        """The registry's windows after a reload."""
        self._windows = list(windows)
        self._mine = {}

    def windows(self) -> tuple[Window, ...]:
        """The registry's windows now (read by the notifier's thread: a reload swaps the list)."""
        return tuple(self._windows)

    def admit(self, spec: JobSpec, run: Run, now: datetime, pauses: bool = True) -> Verdict:
        """Whether a scheduled occurrence (or a retry) about to start may start now."""
        pause = blackout.paused(spec, self._pauses, now) if pauses else None
        if pause is not None:
            return Skip(RunState.SKIPPED_PAUSED, pause.describe())
        hit = blackout.blackout_at(spec, self._windows_of(spec), now)
        if hit is None:
            return Start()
        if run.state == RunState.RETRY_WAIT:
            return Wait(hit)
        if spec.blackout != "defer":
            return Skip(RunState.SKIPPED_BLACKOUT, hit.describe())
        return Hold(hit)

    def holds_all(self, spec: JobSpec, now: datetime) -> blackout.Hit | None:
        """Inside a window, a `defer` job's due occurrences are all held, before any catch-up
        decision (after a restart too): the window that holds them, if any."""
        if spec.blackout != "defer" or blackout.paused(spec, self._pauses, now) is not None:
            return None
        return blackout.blackout_at(spec, self._windows_of(spec), now)

    def window_at(self, spec: JobSpec, at: datetime) -> blackout.Hit | None:
        """The window of the job that covers `at`, if any."""
        return blackout.blackout_at(spec, self._windows_of(spec), at)

    def held_now(self, spec: JobSpec, now: datetime) -> tuple[bool, datetime | None]:
        """Whether a pause or a window holds the job now, and when that ends by itself (None:
        not by itself)."""
        pause = blackout.paused(spec, self._pauses, now)
        if pause is not None:
            return True, pause.until
        hit = blackout.blackout_at(spec, self._windows_of(spec), now)
        return (True, hit.end) if hit is not None else (False, None)

    def _windows_of(self, spec: JobSpec) -> list[Window]:
        """The windows that apply to the job (`blackout.windows_for`), in registry order."""
        mine = self._mine.get(spec.id)
        if mine is None or mine[0] is not spec:
            mine = self._mine[spec.id] = (spec, blackout.windows_for(spec, self._windows))
        return mine[1]
