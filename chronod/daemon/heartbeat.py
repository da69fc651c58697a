"""The lease's heartbeat: renew it when due (every ttl/3 in a fleet) and at once after the
wall clock was stepped; a lost lease means rejoin. In a fleet each heartbeat also takes
over the runs of expired nodes, checks which version of each job the fleet runs, and
looks for backfills another node was told about.

`Heartbeat` alone holds the wall-minus-monotonic skew seen at the last wake-up."""

from __future__ import annotations

from chronod.core.clock import Clock
from chronod.daemon.backfills import Backfills
from chronod.daemon.fleetview import FleetView
from chronod.daemon.outage import Connectivity
from chronod.daemon.recovery import Recovery
from chronod.daemon.registry import Registry
from chronod.fleet.lease import Lease

CLOCK_STEP_S = 5.0  # a change of wall minus monotonic time larger than this is a clock step


class Heartbeat:
    def __init__(
        self,
        *,
        clock: Clock,
        lease: Lease,
        registry: Registry,
        recovery: Recovery,
        placement: FleetView,
        backfills: Backfills,
        link: Connectivity,
    ) -> None:
        self.clock, self.lease, self.registry, self.recovery = clock, lease, registry, recovery
        self.placement, self.backfills, self.link = placement, backfills, link
        self._skew: float | None = None  # wall minus monotonic time at the last wake-up

    def keep_lease(self) -> None:
        """Heartbeat when it is due, and at once after the wall clock was stepped: the lease
        expires in database (wall) time, so a step forward past the ttl ends it while the
        monotonic deadline still says it holds."""
        skew = self.clock.now().timestamp() - self.clock.monotonic()
        stepped = self._skew is not None and abs(skew - self._skew) > CLOCK_STEP_S
        self._skew = skew
        if stepped or self.lease.due():
            self.beat()

    def beat(self) -> None:
        """Renew the lease (database time); a lost lease means rejoin. In a fleet, also take
        over the runs of expired nodes and check which version of each job the fleet runs."""
        mono = self.clock.monotonic()
        if not self.lease.renew():
            self.recovery.lease_lost()
        self.link.replay_kept()  # offline runs stored before anything else may start them again
        if self.placement.fleet:
            self.backfills.look()  # a backfill announced to another node may be this node's to drive
            if self.link.may_take_over(mono):
                self.recovery.take_over()
            self.placement.heartbeat(self.registry.jobs, mono)
