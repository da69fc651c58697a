"""Maintenance windows and pauses: whether an occurrence may start at a given instant.

The rule, before the code:

- A *window* comes from `blackouts:` in a registry file. It is absolute (`from`/`to`,
  wall times read in its `timezone`) or recurring (a cron expression read in its
  `timezone`, each fire opening the window for `duration` of elapsed time, so a window
  that crosses a daylight-saving change lasts as long as it says, not an hour more or
  less). A window covers the instants `start <= t < end`.
- A window applies to a job named in its `jobs:`, carrying one of its `tags:`, or in one
  of its `resources:`.
- A *pause* is set at run time (`chronoctl pause`) on a job, a tag or a resource; it covers
  `since <= t < until` (no `until`: until someone resumes it).
- An occurrence that would start at `t` while a pause covers its job is `skipped_paused`;
  otherwise, inside an applying window it is `skipped_blackout` (`blackout: skip`) or held
  until the window ends (`blackout: defer`). Overlapping or back-to-back windows are one
  window for a deferred run: it starts when the last of them ends.

Everything here is a function of its arguments; `now` is always passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, Sequence
from zoneinfo import ZoneInfo

from chronod.core.model import JobSpec
from chronod.core.schedule import Schedule, compile_schedule

MAX_CHAIN = 64  # windows followed end to end when merging; more means a registry mistake
PAUSE_KINDS = ("job", "tag", "resource")
DEFERRED_BY = "deferred by maintenance window "  # how a held row's error begins
WAITING_FOR = "waiting for a slot of resource "  # how the row of a run waiting in a resource's line begins


@dataclass(frozen=True, slots=True)
class Window:
    """One maintenance window of a registry file (validated)."""

    name: str  # as written, or "FILE:LINE" when the window has no name
    reason: str
    timezone: str = "UTC"
    start: datetime | None = None  # absolute windows: aware UTC
    end: datetime | None = None
    cron: str | None = None  # recurring windows
    duration_s: int = 0
    jobs: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    source_file: str = ""
    source_line: int = 0
    only_file: str = ""  # a window from a file not owned by root holds only that file's jobs

    def applies_to(self, spec: JobSpec) -> bool:
        """Whether the window names the job, one of its tags, or its resource."""
        if self.only_file and spec.source_file != self.only_file:
            return False
        return (
            spec.id in self.jobs
            or any(t in self.tags for t in spec.tags)
            or (spec.resource is not None and spec.resource in self.resources)
        )

    def schedule(self) -> Schedule:
        """The compiled cron expression of a recurring window."""
        assert self.cron is not None
        return compile_schedule(self.cron, self.timezone)

    def covering(self, at: datetime) -> tuple[datetime, datetime] | None:
        """The (start, end) of this window's span that covers `at`, or None."""
        if self.cron is None:
            assert self.start is not None and self.end is not None
            return (self.start, self.end) if self.start <= at < self.end else None
        length = timedelta(seconds=self.duration_s)
        opened = self.schedule().next_after(at - length)  # fires in (at - length, at]
        if opened is None or opened > at:
            return None
        return opened, opened + length

    def spans(self, start: datetime, end: datetime, limit: int = 10_000) -> list[tuple[datetime, datetime]]:
        """Every span of this window that overlaps [start, end), in order (at most `limit`)."""
        if self.cron is None:
            assert self.start is not None and self.end is not None
            return [(self.start, self.end)] if self.start < end and self.end > start else []
        length = timedelta(seconds=self.duration_s)
        fires = self.schedule().fires(start - length, end - timedelta(microseconds=1), limit=limit + 1)
        return [(f, f + length) for f in fires if f + length > start][:limit]

    def describe(self) -> str:
        """'nightly-db (database upgrade)': how a skipped run names its window."""
        return f"{self.name} ({self.reason})"


@dataclass(frozen=True, slots=True)
class Pause:
    """A pause set at run time on a job, a tag or a resource."""

    kind: str  # job | tag | resource
    target: str
    reason: str
    by: str | None = None  # the user who paused it
    since: datetime | None = None
    until: datetime | None = None  # None: until resumed

    def applies_to(self, spec: JobSpec) -> bool:
        if self.kind == "job":
            return spec.id == self.target
        if self.kind == "tag":
            return self.target in spec.tags
        return spec.resource == self.target

    def active(self, now: datetime) -> bool:
        return (self.since is None or self.since <= now) and (self.until is None or now < self.until)

    def describe(self) -> str:
        """What a skipped_paused run records: 'paused (tag db) by alice: INC-7 until ...'."""
        until = f" until {stamp(self.until)}" if self.until else ""
        if self.kind == "job":
            who = f" (by {self.by})" if self.by else ""
            return f"job paused: {self.reason}{who}{until}"
        who = f" by {self.by}" if self.by else ""
        return f"paused ({self.kind} {self.target}){who}: {self.reason}{until}"


@dataclass(frozen=True, slots=True)
class Hit:
    """An occurrence inside a window: which one, and when the (merged) window ends."""

    window: Window
    start: datetime
    end: datetime

    def describe(self) -> str:
        return f"inside maintenance window {self.window.describe()} until {stamp(self.end)}"

    def deferral(self) -> str:
        """What a deferred occurrence's row says while it waits (`blackout: defer`); the
        audit reads the window back from it (chronod.core.history.hold_of)."""
        return f"{DEFERRED_BY}{self.window.describe()} until {stamp(self.end)}"


@dataclass(frozen=True)
class Hold:
    """Why a due occurrence has not started on purpose: a maintenance window deferred it
    (`window`: its name and reason, `until` its end), a pause holds its job (`pause`:
    its scope such as "tag db", who set it, why, `until` None when it lasts until resumed),
    or it waits in the line of its resource (`resource`: the resource's name, its limit,
    `since` when it began waiting, `until` when it gives up: fire time + catchup_window_s)."""

    kind: str  # window | pause | resource
    name: str
    reason: str
    until: datetime | None
    by: str | None = None
    since: datetime | None = None

    def describe(self, fire_at: datetime) -> str:
        due = f"due at {stamp(fire_at)}"
        if self.kind == "resource":
            since = f" since {stamp(self.since)}" if self.since else ""
            end = f", or ends skipped_resource at {stamp(self.until)}" if self.until else ""
            return f"waiting for a slot of resource {self.name} ({self.reason}){since}: {due}, it starts when a slot frees{end}"
        if self.kind == "window":
            return f"deferred by maintenance window {self.name} ({self.reason}) until {stamp(self.until)}: {due}, it starts when the window ends"  # type: ignore[arg-type]
        who = f" by {self.by}" if self.by else ""
        until = f" until {stamp(self.until)}" if self.until else " until resumed"
        return (
            f"held by a pause ({self.name}){who}: {self.reason}{until}: {due}, it does not start while the pause lasts"
        )


def paused(spec: JobSpec, pauses: Iterable[Pause], now: datetime) -> Pause | None:
    """The pause that holds the job at `now` (a job's own pause first), or None."""
    live = [p for p in pauses if p.active(now) and p.applies_to(spec)]
    live.sort(key=lambda p: PAUSE_KINDS.index(p.kind) if p.kind in PAUSE_KINDS else len(PAUSE_KINDS))
    return live[0] if live else None


def pause_hold(p: Pause) -> Hold:
    """A pause as a hold: its scope as the name ("job", "tag batch"), who, why, until when."""
    return Hold("pause", "job" if p.kind == "job" else f"{p.kind} {p.target}", p.reason, p.until, p.by)


def held(spec: JobSpec, pauses: Iterable[Pause], windows: Sequence[Window], at: datetime) -> Hold | None:
    """Why an occurrence of `spec` that fires at `at` will not start then, or None: a pause
    that still holds the job at `at` (a job's own first), else the maintenance window
    that covers `at` (`until`: when the merged window ends). What every view that shows a
    next fire says next to it (list, status, next, the agenda, explain)."""
    p = paused(spec, pauses, at)
    if p is not None:
        return pause_hold(p)
    hit = blackout_at(spec, windows, at)
    if hit is None:
        return None
    return Hold("window", hit.window.name, hit.window.reason, hit.end)


def windows_for(spec: JobSpec, windows: Iterable[Window]) -> list[Window]:
    """The windows that apply to a job, in registry order."""
    return [w for w in windows if w.applies_to(spec)]


def blackout_at(spec: JobSpec, windows: Sequence[Window], at: datetime) -> Hit | None:
    """The window covering an occurrence that would start at `at`, or None.

    `end` is when the job may start again: applying windows that overlap or touch are
    followed to the last one's end."""
    mine = windows_for(spec, windows)
    first = _cover(mine, at)
    if first is None:
        return None
    window, start, end = first
    for _ in range(MAX_CHAIN):
        more = _cover(mine, end)
        if more is None:
            break
        end = max(end, more[2])
    return Hit(window, start, end)


def _cover(windows: Sequence[Window], at: datetime) -> tuple[Window, datetime, datetime] | None:
    best = None
    for w in windows:
        span = w.covering(at)
        if span is not None and (best is None or span[1] > best[2]):
            best = (w, span[0], span[1])
    return best


def spans(
    spec: JobSpec, windows: Sequence[Window], start: datetime, end: datetime
) -> list[tuple[Window, datetime, datetime]]:
    """Every span of an applying window that overlaps [start, end), by start time (forecast, explain)."""
    out = [(w, a, b) for w in windows_for(spec, windows) for a, b in w.spans(start, end)]
    return sorted(out, key=lambda x: (x[1], x[2], x[0].name))


def wall_to_utc(text_or_dt: datetime, zone: str) -> datetime:
    """A wall time read in `zone` (an aware datetime keeps its own offset). An ambiguous wall
    time (fall-back) means its first pass; one a spring-forward skips is read with the offset
    in force before the change (02:30 on a skipped hour is 03:30 daylight time)."""
    if text_or_dt.tzinfo is not None:
        return text_or_dt.astimezone(timezone.utc)
    return text_or_dt.replace(tzinfo=ZoneInfo(zone), fold=0).astimezone(timezone.utc)


def release(catchup: str, held: Sequence[datetime]) -> tuple[list[datetime], list[datetime]]:
    """Deferred occurrences (scheduled times) at the end of their window: which run, which are
    recorded skipped_blackout. `catchup` is the job's catch-up policy: `latest` runs the
    newest once, `all` runs each in order, `none` runs none."""
    held = sorted(held)
    if not held or catchup == "none":
        return [], held
    if catchup == "all":
        return held, []
    return held[-1:], held[:-1]


def slot_wait(resource: str, limit: int, since: datetime) -> str:
    """What the row of a run waiting for a slot of its resource says while it waits; the
    audit reads the resource back from it (chronod.core.history.hold_of)."""
    return f"{WAITING_FOR}{resource} (max_concurrency {limit}, every slot taken) since {stamp(since)}"


def stamp(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
