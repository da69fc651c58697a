"""What to tell a job's owner, decided from the history alone (pure: `now` is an argument).

A job is in one condition at a time: `ok`, or failing as its last bad run ended
(`failed`, `timed_out`, `lost`). A notice goes out when the condition CHANGES, not for
every run: a job failing every minute sends one `failed`, then one `recovered` at its
first success. Beside it run two flags with the same rule: `overlap` (a streak of
`skipped_overlap`) and `silent` (no success for `max_silence_s`, the dead man's switch).
`succeeded` and `cancelled` are per-run events, sent only to routes that ask for them.

Every notice carries a dedupe key computed from the history only (`job|event|run id` or
`job|silence|<start of the silence>`), so two nodes, or one node before and after a
restart, deciding the same thing produce the same key; the outbox keeps one row per key.

The reconciler's findings read the schedule, not only the runs table: an occurrence that
fell due and that nothing claimed (no row, or a row still `pending` past its fire time +
tolerance + grace), and an enabled job with nothing waiting for it (no next occurrence).
Both are sent as `silence` notices, their `state` saying which (`unclaimed`,
`no_next_occurrence`), because both mean the job is not doing what its schedule says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Container, Iterable, Mapping, Sequence

from chronod.core import history
from chronod.core.model import JobSpec, RunState

BAD = (RunState.FAILED, RunState.TIMED_OUT, RunState.LOST)
PER_RUN = (RunState.SUCCEEDED, RunState.CANCELLED)
SILENT = "silent"
UNCLAIMED = "unclaimed"
NO_NEXT = "no_next_occurrence"
RECONCILE_GRACE_S = 60  # beyond fire time + tolerance: a busy node may start a little late


@dataclass(frozen=True, slots=True)
class NotifyState:
    """What the owner was last told about a job, persisted between steps and restarts.

    `seen_at`/`seen_run` mark the last run taken into account (finish time, then run id);
    `basis` is when the current silence clock started (the last success, or when the job
    was first known); `no_next` remembers a reported missing next occurrence."""

    condition: str = "ok"
    overlap: bool = False
    silent: bool = False
    no_next: bool = False
    seen_at: datetime | None = None
    seen_run: str = ""
    basis: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO-8601 UTC)."""
        return {
            "condition": self.condition,
            "overlap": self.overlap,
            "silent": self.silent,
            "no_next": self.no_next,
            "seen_at": history.iso(self.seen_at),
            "seen_run": self.seen_run,
            "basis": history.iso(self.basis),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> "NotifyState":
        """The state written by `to_json`; a fresh state for None or {}."""
        if not d:
            return cls()

        def t(k: str) -> datetime | None:
            return datetime.fromisoformat(d[k]) if d.get(k) else None

        return cls(
            d.get("condition", "ok"),
            bool(d.get("overlap")),
            bool(d.get("silent")),
            bool(d.get("no_next")),
            t("seen_at"),
            d.get("seen_run", ""),
            t("basis"),
        )


@dataclass(frozen=True)
class Notice:
    """One thing to tell the owner of `job_id`. `state` is the run state behind it (or
    `silent`, `unclaimed`, `no_next_occurrence`); `at` is when it became true."""

    job_id: str
    event: str
    state: str
    dedupe_key: str
    at: datetime
    run_id: str | None = None
    detail: str = ""


def _key(job_id: str, event: str, what: str) -> str:
    return f"{job_id}|{event}|{what}"


def _stamp(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _finished(run: Any) -> datetime:
    at: datetime = run.finished_at or run.updated_at or run.scheduled_at
    return at


def unseen(runs: Iterable[Any], state: NotifyState, news: Container[str] = ()) -> list[Any]:
    """Terminal runs not yet taken into account, in the order they ended: those that ended
    after the seen mark, and those the reader knows it never saw (`news`, by run id).

    The mark follows the wall clock, so after a step back a run that ended since shows an
    earlier time than the mark: only the reader can tell it is new (it read the rows
    before the step and this one was not among them)."""
    mark = (state.seen_at, state.seen_run) if state.seen_at else None
    out = [r for r in runs if r.state not in (RunState.PENDING, RunState.RUNNING, RunState.RETRY_WAIT)]
    if mark is not None:
        out = [r for r in out if r.run_id in news or (_finished(r), r.run_id) > mark]
    return sorted(out, key=lambda r: (_finished(r), r.run_id))


def after_run(spec: JobSpec, run: Any, state: NotifyState) -> tuple[list[Notice], NotifyState]:
    """The notices one ended run causes, and the state after it."""
    s, at, rid = run.state, _finished(run), run.run_id
    out: list[Notice] = []
    # the mark never moves back: a run the reader knew was new (`unseen`) may show a time
    # before it after a wall-clock step back, and the runs seen before the step stay seen
    behind = state.seen_at is not None and (state.seen_at, state.seen_run) > (at, rid)
    new = state if behind else replace(state, seen_at=at, seen_run=rid)
    if s in PER_RUN and routes_for(spec, s):
        out.append(Notice(spec.id, s, s, _key(spec.id, s, rid), at, rid, history.describe_run(run, at, spec)))
    if s == RunState.SUCCEEDED:
        if state.condition != "ok" or state.silent:
            was = SILENT if state.silent and state.condition == "ok" else state.condition
            out.append(
                Notice(
                    spec.id,
                    "recovered",
                    s,
                    _key(spec.id, "recovered", rid),
                    at,
                    rid,
                    f"succeeded again after {was.replace('_', ' ')}",
                )
            )
        return out, replace(new, condition="ok", overlap=False, silent=False, basis=at)
    if s in BAD:
        if state.condition != s:
            out.append(Notice(spec.id, s, s, _key(spec.id, s, rid), at, rid, history.describe_run(run, at, spec)))
        return out, replace(new, condition=s, overlap=False)
    if s == RunState.SKIPPED_OVERLAP:
        if not state.overlap:
            out.append(Notice(spec.id, s, s, _key(spec.id, s, rid), at, rid, history.describe_run(run, at, spec)))
        return out, replace(new, overlap=True)
    return out, new


def worth_saving(before: NotifyState, after: NotifyState, notices: Sequence[Notice]) -> bool:
    """Whether a job's new state must be stored: anything but its seen mark changed, or
    it told the owner something. A state stored with an older seen mark differs only in
    runs that told nothing and changed nothing else (a shed run, a failure of a job already
    failing): a node that reads it back (a restart, another node taking over) decides those
    runs again to the same state, with no notice. Past a fleet's ceiling most ended runs are
    sheds: this keeps one state write per shed run out of the database."""
    return bool(notices) or replace(after, seen_at=before.seen_at, seen_run=before.seen_run) != before


def silence_deadline(spec: JobSpec, state: NotifyState) -> datetime | None:
    """When the job goes silent if nothing succeeds first (None: never, or already silent)."""
    if state.silent or state.basis is None or not spec.max_silence_s or not spec.enabled:
        return None
    return state.basis + timedelta(seconds=history.silence_limit_s(spec))


def check_silence(
    spec: JobSpec, state: NotifyState, now: datetime, *, paused: bool = False, resumed: bool = False
) -> tuple[list[Notice], NotifyState]:
    """A `silence` notice once the dead man's switch trips: not while the job is held
    (`paused`: a pause of its own, its tag's or its resource's, or a maintenance window
    it is inside), and counted afresh from the moment a hold is seen to end (`resumed`)."""
    deadline = silence_deadline(spec, state)
    if deadline is not None and paused:
        # A hold is deliberate: the silence clock restarts when the job is resumed.
        assert spec.max_silence_s is not None and state.basis is not None  # a deadline needs both
        half = timedelta(seconds=spec.max_silence_s / 2)
        return [], (replace(state, basis=now) if now - state.basis > half else state)
    if deadline is not None and resumed and state.basis is not None and state.basis < now:
        state = replace(state, basis=now)
        deadline = silence_deadline(spec, state)
    if deadline is None or now < deadline:
        return [], state
    assert state.basis is not None  # a deadline counts from it
    age = history.silence(spec, state.basis, now)
    detail = (
        f"no success for {round(age.age_s or 0)}s (max_silence_s {spec.max_silence_s}); silent since {_stamp(deadline)}"
    )
    n = Notice(spec.id, "silence", SILENT, _key(spec.id, "silence", _stamp(state.basis)), deadline, None, detail)
    return [n], replace(state, silent=True)


def decide(
    spec: JobSpec,
    runs: Iterable[Any],
    state: NotifyState,
    now: datetime,
    *,
    known_since: datetime | None = None,
    paused: bool = False,
    resumed: bool = False,
    down_s: float = 0.0,
    news: Container[str] = (),
) -> tuple[list[Notice], NotifyState]:
    """Every notice the job's ended runs and the clock call for, given what was already
    told (`state`), and the new state to persist. `runs` may repeat runs already seen;
    they are skipped, except those the reader knows are new (`news`: `unseen`). `known_since` starts the silence clock of a job that never succeeded;
    `paused`/`resumed` say the job is held now or was until just now (`check_silence`);
    `down_s` is how long no notifier was deciding before this round (`excuse_downtime`,
    applied after the runs that ended meanwhile)."""
    if state.basis is None and known_since is not None:
        state = replace(state, basis=known_since)
    out: list[Notice] = []
    for run in unseen(runs, state, news):
        more, state = after_run(spec, run, state)
        out += more
    state = excuse_downtime(spec, state, down_s, now)
    more, state = check_silence(spec, state, now, paused=paused, resumed=resumed)
    return out + more, state


def excuse_downtime(spec: JobSpec, state: NotifyState, down_s: float, now: datetime) -> NotifyState:
    """The silence clock does not run while chronod itself is down: a job cannot succeed
    while nothing runs it, and a restart's catch-up runs it at once. After `down_s` seconds
    without a deciding notifier (a restart, a node taking over: the `down_s` before `now`),
    a silence not yet called counts without the part of them after its start (a success
    that ended while chronod was down starts it when chronod is back). A crash loop still
    trips the switch: only the time down is forgiven, never the time up."""
    if down_s <= 0 or state.silent or state.basis is None or not spec.max_silence_s:
        return state
    after = max(0.0, min(down_s, (now - state.basis).total_seconds()))
    return replace(state, basis=state.basis + timedelta(seconds=after))


def downtime_s(alive: Mapping[str, Any] | None, now: datetime, mono: float, boot: str | None = None) -> float:
    """How long no notifier decided before `now`: from `alive` (the ALIVE state the last
    deciding round wrote: its wall time `at`, and its monotonic reading `mono` on boot
    `boot`) to this round (`now`, `mono`, `boot`). 0.0 when nothing was written yet.

    The wall clock alone is wrong across a clock step made while chronod was down: a step
    back of 100 s shortens the wall span by 100 s, and a success that ended during the
    down, stamped by the stepped clock, then looks as if it had ended before chronod
    stopped (its seconds counted as silence). On the same boot the monotonic clock gives
    the seconds that really passed; the longer of the two spans is taken, so that a step
    either way leaves no part of the down counted as silence (a forward step is in the
    wall span, a step back in the monotonic one). Another boot, or a state written before
    the monotonic reading was kept: the wall span only."""
    if not alive or not alive.get("at"):
        return 0.0
    wall = (now - datetime.fromisoformat(alive["at"])).total_seconds()
    then = alive.get("mono")
    if boot is not None and alive.get("boot") == boot and isinstance(then, (int, float)) and mono >= then:
        return max(0.0, wall, mono - then)
    return max(0.0, wall)


def unclaimed(
    spec: JobSpec,
    schedule: Any,
    runs: Iterable[Any],
    *,
    since: datetime,
    now: datetime,
    nodes: Iterable[str] = (),
    grace_s: int = RECONCILE_GRACE_S,
    marks: Iterable[Any] | None = None,
) -> list[Notice]:
    """Occurrences in (since, now] that fell due and that nothing claimed: no row at all,
    or a row still `pending` after fire time + tolerance + grace (`history.missed` judges).
    `runs` are the job's runs in the window; with `marks` (every run, slim) they need only
    hold the pending ones."""
    grace = spec.tolerance_s + grace_s
    misses = history.missed(
        [spec], runs, since=since, now=now, nodes=nodes, grace_s=grace, schedules={spec.id: schedule}, marks=marks
    )
    return [
        Notice(spec.id, "silence", UNCLAIMED, _key(spec.id, UNCLAIMED, m.run_id), m.fire_at, m.run_id, m.reason)
        for m in misses
        if m.state in (history.NO_RECORD, RunState.PENDING)
    ]


def no_next(
    spec: JobSpec, schedule: Any, waiting: bool, latest_run_id: str | None, state: NotifyState, now: datetime
) -> tuple[list[Notice], NotifyState]:
    """A notice when an enabled, scheduled job has nothing waiting (no pending, running or
    retrying run): the chain of occurrences is broken until the daemon's reconciler repairs
    it. One notice per break (keyed on the job's latest run)."""
    broken = spec.enabled and schedule.kind != "reboot" and not waiting
    if not broken:
        return [], replace(state, no_next=False)
    if state.no_next:
        return [], state
    what = latest_run_id or "none"
    detail = (
        "no next occurrence is stored for this enabled job: nothing will start it "
        "until chronod's reconciler re-creates it (it runs at start and every 5 minutes)"
    )
    n = Notice(spec.id, "silence", NO_NEXT, _key(spec.id, NO_NEXT, what), now, None, detail)
    return [n], replace(state, no_next=True)


def routes_for(spec: JobSpec, event: str) -> list[int]:
    """Indexes of the job's notify routes that subscribe to `event`."""
    return [i for i, n in enumerate(spec.notify) if event in n.on]
