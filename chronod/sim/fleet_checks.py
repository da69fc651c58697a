"""The promises of a fleet, each checked from the fleet simulation's own record
(chronod.sim.fleet): what each node's runner launched, when each node was down or stopped,
each node's lease deadline, every takeover, and every write made after a lease lapsed.

Each check returns its counterexamples, oldest first; a promise holds when there are none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime

from chronod.core import occurrence, overload
from chronod.core.model import JobSpec
from chronod.core.schedule import compile_schedule
from chronod.sim.fleet import TTL_S, FleetOutcome
from chronod.sim.invariants import Counterexample
from chronod.sim.world import Proc
from chronod.specfile import load_registry

LAG_S = 2.0  # an undisturbed node starts its runs this soon
RESCUE_S = 2.0  # another node takes an unclaimed `any` occurrence this soon after its fire time (the bound)
TAKEOVER_S = TTL_S / 3 + 2.0  # a live node takes over an expired node's runs this soon after the expiry
EDGE_S = 10.0  # a node this fresh may still be loading


class FleetFacts:
    """What the fleet checks read, indexed once."""

    def __init__(self, out: FleetOutcome):
        self.out = out
        root = out.tmp / "jobs.d"
        self.specs: dict[str, JobSpec] = dict(load_registry([root], now=out.start, secure=False).jobs)
        self.horizon = out.world.mono() - 120  # later occurrences may not have started yet
        self.shed = {
            r.run_id for r in out.store.runs(states=["skipped_outage"]) if overload.shed_record(r.state, r.error)
        }
        self.by_occurrence: dict[tuple[str, str | None, datetime], list[Proc]] = defaultdict(list)
        self.by_job: dict[str, list[Proc]] = defaultdict(list)  # the launches of each job, in order
        for p in out.launches:
            self.by_job[p.job_id].append(p)
            each = self.specs[p.job_id].run_on.each if p.job_id in self.specs else False
            self.by_occurrence[(p.job_id, p.node if each else None, p.scheduled_at)].append(p)

    def node_up(self, node: str, start: float, end: float) -> bool:
        """The node's daemon was ready and undisturbed from `start` to `end` (monotonic)."""
        if not any(a + EDGE_S <= start and end <= b for a, b in self.out.lives[node]):
            return False
        return not self.disturbed({node, "*"}, start, end)

    def disturbed(self, nodes: set[str], start: float, end: float) -> bool:
        return any(g.node in nodes and g.start <= end and start <= g.end + TTL_S for g in self.out.gaps)

    def fires(self, spec: JobSpec, node: str | None) -> Iterable[tuple[datetime, float]]:
        """(scheduled_at, fire time as monotonic) of each occurrence inside the checked span."""
        out = self.out
        key = occurrence.job_key(spec.id, spec.run_on.each, node)
        offset = occurrence.jitter_offset(key, spec.tolerance_s)
        sched = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
        lo, hi = out.wall(out.t0 + 60), out.wall(self.horizon)
        for at in sched.fires(lo, hi):
            yield at, out.t0 + (at - out.start).total_seconds() + offset


def attempt_started_once(f: FleetFacts) -> list[Counterexample]:
    """No attempt of a run is started twice, on one node or across nodes."""
    seen: dict[tuple[str, int], Proc] = {}
    out = []
    for p in f.out.launches:
        first = seen.setdefault((p.run_id, p.attempt), p)
        if first is not p:
            what = f"attempt {p.attempt} started on {first.node} and again on {p.node}"
            out.append(Counterexample(p.started_wall, p.job_id, p.run_id, what))
    return out


def unsafe_at_most_once(f: FleetFacts) -> list[Counterexample]:
    """No `unsafe` occurrence is started twice, across crashes, takeovers and nodes."""
    by_run: dict[str, list[Proc]] = defaultdict(list)
    for p in f.out.launches:
        if p.unsafe:
            by_run[p.run_id].append(p)
    out = []
    for run_id, procs in by_run.items():
        if len(procs) > 1:
            nodes = ", ".join(p.node for p in procs)
            out.append(Counterexample(procs[1].started_wall, procs[1].job_id, run_id, f"unsafe run started on {nodes}"))
    return sorted(out, key=lambda c: c.at)


def stale_writes_refused(f: FleetFacts) -> list[Counterexample]:
    """A node whose lease lapsed (a stop past its ttl) writes nothing about runs under its
    old token: fencing refuses every such write."""
    return [
        Counterexample(s.at, "-", "-", f"{s.node}'s {s.call} was accepted after its lease had lapsed")
        for s in f.out.stale
        if s.accepted
    ]


def any_runs_once(f: FleetFacts) -> list[Counterexample]:
    """Each occurrence of a `run_on: any` job starts on exactly one node: never two, and
    never none while every node was up and the database reachable."""
    out = []
    everyone = {*f.out.nodes, "*"}
    for spec in f.specs.values():
        if spec.run_on.each:
            continue
        for at, fire in f.fires(spec, None):
            firsts = [p for p in f.by_occurrence.get((spec.id, None, at), []) if p.attempt == 1]
            rid = occurrence.run_id(spec.id, at)
            if len({p.node for p in firsts}) > 1:
                what = "started on " + ", ".join(p.node for p in firsts)
                out.append(Counterexample(f.out.wall(fire), spec.id, rid, what))
            elif rid in f.shed:
                continue  # an overloaded node shed it, and said so (fire_lag of what started is the test)
            elif not firsts and not f.disturbed(everyone, fire - TTL_S, fire + spec.tolerance_s + RESCUE_S):
                if not all(any(a + EDGE_S <= fire for a, _ in f.out.lives[n]) for n in f.out.nodes):
                    continue
                if spec.overlap == "forbid" and _alive(f, spec.id, fire):
                    continue
                out.append(Counterexample(f.out.wall(fire), spec.id, rid, "never started on any node"))
    return sorted(out, key=lambda c: c.at)


def rescue_prompt(f: FleetFacts) -> list[Counterexample]:
    """An `any` occurrence starts within RESCUE_S (plus its jitter) of its fire time
    whenever some node that carries it was up, undisturbed and had its database from just
    before the fire time to that bound, whatever became of the job's owner (dead, stopped,
    a zombie): the others rescue its occurrences before its lease has even expired
    (docs/fleet.md). Under `overlap: forbid` an occurrence may wait for a run of the job
    that is still going."""
    out = []
    for spec in f.specs.values():
        if spec.run_on.each:
            continue
        for at, fire in f.fires(spec, None):
            bound = fire + RESCUE_S
            if f.disturbed({"*"}, fire - 1, bound) or not any(f.node_up(n, fire - 1, bound) for n in f.out.nodes):
                continue
            firsts = [p for p in f.by_occurrence.get((spec.id, None, at), []) if p.attempt == 1]
            first = min((p.started_mono for p in firsts), default=None)
            if first is not None and first <= bound:
                continue
            if spec.overlap == "forbid" and _alive(f, spec.id, fire):
                continue
            late = "never started" if first is None else f"started {first - fire:.1f}s after its fire time"
            what = f"{late} while a node that carries it was up (bound {RESCUE_S}s)"
            out.append(Counterexample(f.out.wall(fire), spec.id, occurrence.run_id(spec.id, at), what))
    return sorted(out, key=lambda c: c.at)


def _alive(f: FleetFacts, job: str, mono: float) -> bool:
    return any(p.started_mono <= mono + RESCUE_S and p.end_mono() > mono for p in f.by_job.get(job, ()))


def each_runs_everywhere(f: FleetFacts) -> list[Counterexample]:
    """Each occurrence of a `run_on: each` job starts on every node that was up, not
    stopped and had its database."""
    out = []
    for spec in f.specs.values():
        if not spec.run_on.each:
            continue
        for node in f.out.nodes:
            for at, fire in f.fires(spec, node):
                if not f.node_up(node, fire - 1, fire + spec.tolerance_s + LAG_S):
                    continue
                if not f.by_occurrence.get((spec.id, node, at)):
                    rid = occurrence.run_id(occurrence.job_key(spec.id, True, node), at)
                    out.append(Counterexample(f.out.wall(fire), spec.id, rid, f"did not start on {node}"))
    return sorted(out, key=lambda c: c.at)


def takeover_bounded(f: FleetFacts) -> list[Counterexample]:
    """The `any` runs a node held when it died or stopped are taken over by another node
    within TAKEOVER_S of its lease's expiry (when it is not back by then)."""
    out = []
    for g in f.out.gaps:
        if g.node == "*" or g.lease_until is None:
            continue
        expiry = g.start + (g.lease_until - f.out.wall(g.start)).total_seconds()
        deadline = expiry + TAKEOVER_S
        others = {n for n in f.out.nodes if n != g.node} | {"*"}
        if g.end <= deadline or deadline > f.out.world.mono() or f.disturbed(others, expiry - TTL_S, deadline):
            continue
        if not any(f.node_up(n, expiry, deadline) for n in others - {"*"}):
            continue
        for run in g.running:
            if run.job_key != run.job_id:
                continue  # an `each` run waits for its own node
            took = [(n, t) for n, t in f.out.takeovers.get((run.run_id, run.attempts), []) if n != g.node]
            if not any(t <= deadline for _, t in took):
                when = f"{min(t for _, t in took) - expiry:.1f}s" if took else "never"
                what = f"{g.node} ({g.kind}) held it; taken over {when} after its lease expired (bound {TAKEOVER_S}s)"
                out.append(Counterexample(f.out.wall(expiry), run.job_id, run.run_id, what))
    return sorted(out, key=lambda c: c.at)


def reasons_true(f: FleetFacts) -> list[Counterexample]:
    """A fleet's skipped states agree with what happened (the `reason_truth` of one node,
    across nodes): `skipped_overlap` only while a run of the job was running on some node
    when it was recorded; `skipped_outage` only if no node that carries the job was up,
    undisturbed and had its database from the fire time to the record (a dead owner is
    no outage while another node can rescue its occurrences)."""
    from chronod.core.model import RunState

    out = []
    lo, hi = f.out.wall(f.out.t0 + 60), f.out.wall(f.horizon)
    for row in f.out.store.runs():
        spec = f.specs.get(row.job_id)
        if spec is None or row.finished_at is None or row.trigger != "schedule" or not lo <= row.fire_at <= hi:
            continue
        fire = f.out.t0 + (row.fire_at - f.out.start).total_seconds()
        at = f.out.t0 + (row.finished_at - f.out.start).total_seconds()
        if row.state == RunState.SKIPPED_OVERLAP:
            going = [
                p
                for p in f.by_job.get(row.job_id, ())
                if p.run_id != row.run_id and p.started_mono - 0.001 <= at <= p.end_mono()
            ]
            if not going and not f.disturbed({"*"}, fire - 1, at):
                what = f"recorded skipped_overlap ({row.error}) while no run of the job was running"
                out.append(Counterexample(row.fire_at, row.job_id, row.run_id, what))
        elif row.state == RunState.SKIPPED_OUTAGE:
            if f.disturbed({"*"}, fire - 1, at) or row.run_id in f.shed:
                continue  # an overloaded node's shed, named as such (as the start limit's on one node)
            carriers = [row.node] if spec.run_on.each and row.node else list(f.out.nodes)
            up = [n for n in carriers if f.node_up(n, fire - 1, max(at, fire + spec.tolerance_s + RESCUE_S))]
            if up:
                what = f"recorded skipped_outage ({row.error}) while {up[0]} was up and carried it"
                out.append(Counterexample(row.fire_at, row.job_id, row.run_id, what))
    return sorted(out, key=lambda c: c.at)


def none_left_waiting(f: FleetFacts) -> list[Counterexample]:
    """No scheduled occurrence stays `pending` at the end while a node that carries it (its
    own node for `run_on: each`) was up and undisturbed through the last two minutes, all
    of them after its fire time: it was started, skipped or rescued long before."""
    out = []
    lo, hi, end = f.out.wall(f.out.t0 + 60), f.out.wall(f.horizon), f.out.world.mono()
    up = {n for n in f.out.nodes if f.node_up(n, f.horizon, end)}
    for row in f.out.store.runs(states=["pending"]):
        spec = f.specs.get(row.job_id)
        if spec is None or row.trigger != "schedule" or not lo <= row.fire_at <= hi:
            continue
        carriers = {row.job_key.rpartition("@")[2]} if spec.run_on.each else set(f.out.nodes)
        if carriers & up:
            what = f"still pending at the end while {min(carriers & up)} was up and carried it"
            out.append(Counterexample(row.fire_at, row.job_id, row.run_id, what))
    return sorted(out, key=lambda c: c.at)


FLEET_CHECKS: dict[str, Callable[[FleetFacts], list[Counterexample]]] = {
    "attempt_started_once": attempt_started_once,
    "unsafe_at_most_once": unsafe_at_most_once,
    "stale_writes_refused": stale_writes_refused,
    "any_runs_once": any_runs_once,
    "each_runs_everywhere": each_runs_everywhere,
    "takeover_bounded": takeover_bounded,
    "rescue_prompt": rescue_prompt,
    "reasons_true": reasons_true,
    "none_left_waiting": none_left_waiting,
}


def check_fleet(out: FleetOutcome, names: Iterable[str] | None = None) -> dict[str, list[Counterexample]]:
    """Every fleet check (or the named ones) over one fleet simulation."""
    facts = FleetFacts(out)
    return {name: FLEET_CHECKS[name](facts) for name in (names or FLEET_CHECKS)}
