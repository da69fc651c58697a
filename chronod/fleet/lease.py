"""A node's lease: the fencing token it writes under, the local deadline until which it
may launch, and its renewal.

The store keeps the lease (database time on PostgreSQL); this object keeps the node's
view of it. `deadline` is monotonic and set at 90% of the ttl after a successful renewal,
so a node never launches on a lease the database may already consider expired. In a
fleet a thread renews too, so that a loop busy starting hundreds of runs does not lose
the lease (a false failover); a paused process still loses it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from chronod.core.clock import Clock
from chronod.fsutil import process_start
from chronod.store.api import Store, StoreError

SAFE_FRACTION = 0.9  # launch only within this share of the ttl after a renewal


class Lease:
    """The lease of one node under one store: token, deadline, renewal."""

    def __init__(self, *, store: Store, clock: Clock, node: str, boot_id: str, ttl_s: float, fleet: bool):
        self.store, self.clock, self.node, self.boot_id = store, clock, node, boot_id
        self.ttl_s = ttl_s
        # PostgreSQL: a timer wake-up every ttl/3; SQLite: renew when half the lease is used
        self.heartbeat_s = ttl_s / 3 if fleet else ttl_s * 0.5
        self.token = 0
        self.tokens: set[int] = set()  # every token this process held
        self.deadline = 0.0  # monotonic
        self.next_heartbeat = 0.0  # monotonic
        self.gone = False  # set by the renewal thread when it found the lease gone
        self._stop = threading.Event()

    def acquire(self) -> int:
        """A new lease under a new fencing token."""
        mono = self.clock.monotonic()
        self.gone = False
        self.token = self.store.acquire_node(
            self.node,
            pid=os.getpid(),
            pid_start=process_start(os.getpid()),
            hostname=os.uname().nodename,
            boot_id=self.boot_id,
            ttl_s=self.ttl_s,
        )
        self.tokens.add(self.token)
        self.deadline = mono + self.ttl_s * SAFE_FRACTION
        self.next_heartbeat = mono + self.heartbeat_s
        return self.token

    def due(self) -> bool:
        """Whether the next heartbeat is due."""
        return self.clock.monotonic() >= self.next_heartbeat

    def renew(self) -> bool:
        """Renew now (database time); False when the lease is gone and the node must rejoin."""
        mono = self.clock.monotonic()
        self.next_heartbeat = mono + self.heartbeat_s
        if self.gone:
            return False
        if self.store.renew_lease(self.node, self.token, self.ttl_s):
            self.deadline = mono + self.ttl_s * SAFE_FRACTION
            return True
        return False

    def ok(self) -> bool:
        """Launch only while the local monotonic deadline says the lease must still hold."""
        return self.clock.monotonic() < self.deadline

    def start_thread(self) -> None:
        """Renew from a thread as well as from the loop (fleet)."""
        threading.Thread(target=self._renew_forever, name="chrono-lease", daemon=True).start()

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            token, mono = self.token, self.clock.monotonic()
            try:
                ok = self.store.renew_lease(self.node, token, self.ttl_s)
            except StoreError:
                continue  # the loop sees the outage through its own calls
            if token != self.token:
                continue  # the loop rejoined meanwhile
            if ok:
                self.deadline = max(self.deadline, mono + self.ttl_s * SAFE_FRACTION)
            else:
                self.gone = True

    def release(self, log: Any) -> None:
        """Stop renewing and give the lease back (it expires by itself if this fails)."""
        self._stop.set()
        try:
            self.store.release_node(self.node, self.token)
        except StoreError as e:
            log("node.release_failed", "warning", node=self.node, message=str(e), note="the lease expires by itself")
