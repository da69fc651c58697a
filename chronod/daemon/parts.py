"""The daemon's objects, wired together (`assemble`): each is given the shared
infrastructure and the objects it asks; none is given the `Daemon` (chronod.daemon.loop),
which keeps the `Parts` and drives them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from chronod.core.clock import Clock
from chronod.daemon.accounts import NoAccounts
from chronod.daemon.admission import Admission
from chronod.daemon.backfills import Backfills
from chronod.daemon.dispatch import Dispatch
from chronod.daemon.endings import Endings
from chronod.daemon.fleetview import FleetView
from chronod.daemon.gate import Gate
from chronod.daemon.heartbeat import Heartbeat
from chronod.daemon.ledger import Ledger
from chronod.daemon.occurrences import Occurrences
from chronod.daemon.outage import Connectivity
from chronod.daemon.recovery import Recovery
from chronod.daemon.registry import Registry
from chronod.daemon.reloads import InlineReloads
from chronod.daemon.seams import Accounts, Log, Metrics, NotifyService, Reloads, Runner, Waker
from chronod.daemon.starter import Starter
from chronod.daemon.startlimit import StartLimit
from chronod.daemon.timeline import Timeline
from chronod.daemon.waits import Lines
from chronod.fleet.lease import Lease
from chronod.specfile import RegistryResult
from chronod.store.api import Store


@dataclass(frozen=True)
class Parts:
    """The objects one daemon is made of (docs/architecture.md, "The daemon's objects")."""

    registry: Registry
    occurrences: Occurrences
    timeline: Timeline
    gate: Gate
    lines: Lines
    limit: StartLimit
    starter: Starter
    admission: Admission
    dispatch: Dispatch
    endings: Endings
    recovery: Recovery
    link: Connectivity
    placement: FleetView
    backfills: Backfills
    heartbeat: Heartbeat


def assemble(
    *,
    clock: Clock,
    store: Store,
    runner: Runner,
    load_registry: Callable[[], RegistryResult],
    node: str,
    metrics: Metrics,
    log: Log,
    waker: Waker,
    lease: Lease,
    fleet: bool,
    lease_ttl_s: float,
    rng: random.Random,
    reloads: Reloads | None,
    max_starts_per_s: float | None,
    notify_service: NotifyService | None,
    accounts: Accounts | None = None,
) -> Parts:
    """Build the objects, each with what it is given (the order is what each needs)."""
    accounts = accounts or NoAccounts()  # no account known, none refused (the simulation)
    reg = Registry(
        clock=clock,
        store=store,
        log=log,
        node=node,
        lease=lease,
        metrics=metrics,
        load=load_registry,
        reloads=reloads or InlineReloads(),
        state_dir=str(runner.state_dir),
        containment=_containment(runner),
    )
    tl = Timeline()
    gate = Gate(store)
    lines = Lines()
    limit = StartLimit(clock, log, metrics, max_starts_per_s, node=node, sheds=fleet)
    ledger = Ledger(store, node, lease, metrics, log)
    view = FleetView(store, clock, node, log, fleet)
    beat: list[Heartbeat] = []  # the heartbeat, once built (the starter renews a lapsed lease)
    starter = Starter(
        clock=clock,
        store=store,
        log=log,
        runner=runner,
        node=node,
        lease=lease,
        renew=lambda: beat[0].beat(),
        waker=waker,
        metrics=metrics,
        ledger=ledger,
        limit=limit,
        timeline=tl,
        notify=notify_service,
        fleet=fleet,
    )
    occ = Occurrences(
        clock=clock,
        store=store,
        log=log,
        node=node,
        lease=lease,
        metrics=metrics,
        quarantine=reg.quarantine,
        registry=reg,
        timeline=tl,
        gate=gate,
        limit=limit,
    )
    admission = Admission(
        clock=clock,
        store=store,
        log=log,
        node=node,
        lease=lease,
        registry=reg,
        timeline=tl,
        gate=gate,
        lines=lines,
        ledger=ledger,
        starter=starter,
        placement=view,
        accounts=accounts,
    )
    dispatch = Dispatch(
        clock=clock,
        store=store,
        log=log,
        metrics=metrics,
        waker=waker,
        quarantine=reg.quarantine,
        registry=reg,
        occurrences=occ,
        timeline=tl,
        gate=gate,
        lines=lines,
        ledger=ledger,
        limit=limit,
        starter=starter,
        placement=view,
        admission=admission,
        started=clock.monotonic(),
    )

    def carried(job_id: str) -> bool:
        """Whether a job is registered: in this node's registry, or a fleet's other node's."""
        if job_id in reg.jobs:
            return True
        row = store.get_job(job_id)
        return row is not None and row.removed_at is None

    endings = Endings(
        clock=clock, store=store, log=log, lease=lease, metrics=metrics, rng=rng, timeline=tl, carried=carried
    )
    recovery = Recovery(
        clock=clock,
        store=store,
        log=log,
        runner=runner,
        node=node,
        lease=lease,
        metrics=metrics,
        registry=reg,
        timeline=tl,
        starter=starter,
        endings=endings,
    )
    link = Connectivity(
        clock=clock,
        store=store,
        log=log,
        node=node,
        lease=lease,
        metrics=metrics,
        rng=rng,
        fleet=fleet,
        lease_ttl_s=lease_ttl_s,
        spool_path=Path(runner.state_dir) / "spool.jsonl",
        registry=reg,
        occurrences=occ,
        timeline=tl,
        starter=starter,
        accounts=accounts,
    )
    backfills = Backfills(
        clock=clock,
        store=store,
        log=log,
        quarantine=reg.quarantine,
        registry=reg,
        timeline=tl,
        gate=gate,
        starter=starter,
        placement=view,
        admission=admission,
        lines=lines,
    )
    heartbeat = Heartbeat(
        clock=clock,
        lease=lease,
        registry=reg,
        recovery=recovery,
        placement=view,
        backfills=backfills,
        link=link,
    )
    beat.append(heartbeat)
    return Parts(
        registry=reg,
        occurrences=occ,
        timeline=tl,
        gate=gate,
        lines=lines,
        limit=limit,
        starter=starter,
        admission=admission,
        dispatch=dispatch,
        endings=endings,
        recovery=recovery,
        link=link,
        placement=view,
        backfills=backfills,
        heartbeat=heartbeat,
    )


def _containment(runner: Runner) -> str | None:
    """What keeps a run's processes together (`chronoctl status` shows it)."""
    found = getattr(runner, "containment", None)
    return found.describe() if found is not None else None
