"""The seams of the daemon: what its objects are given from outside, as Protocols. The
real kinds are built by the composition root (chronod.daemon.main); the simulation
(chronod.sim) and the tests give their own, and mypy checks both against these.

- `Runner`: starts an attempt, watches it, collects or adopts its outcome
  (chronod.runner.runner.Runner; chronod.sim.world.SimRunner);
- `Waker`: what the loop sleeps on (chronod.daemon.waker.Waker; SimWaker);
- `Notifier`: systemd's sd_notify (chronod.daemon.sysd.Notifier; SimNotifier);
- `Metrics`: the Prometheus instruments (chronod.daemon.metrics.Metrics; NullMetrics);
- `Reloads`: where a reload's heavy half runs (chronod.daemon.reloads);
- `NotifyService`: the notifier thread the loop wakes (chronod.notify.service);
- `Log`: a structured log line (chronod.daemon.log.Log);
- `Accounts`: what the shadow file says of a job's account (chronod.daemon.accounts).
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from chronod.daemon.waker import Wakeups
from chronod.runner.api import Handle, LaunchRequest, Outcome

if TYPE_CHECKING:
    from chronod.core.accounts import Account
    from chronod.daemon.registry import Prepared


class Accounts(Protocol):
    def account(self, user: str) -> "Account | None":
        """The account `user` as the shadow file says it (None: not known, or not readable)."""
        ...


class Log(Protocol):
    def __call__(self, event: str, level: str = "info", **fields: object) -> None: ...


class Runner(Protocol):
    @property
    def state_dir(self) -> str | os.PathLike[str]: ...

    def launch(self, req: LaunchRequest) -> Handle: ...

    def cancel(self, handle: Handle) -> None: ...

    def collect(self, handle: Handle) -> Outcome | None: ...

    def adopt(self, run_id: str, attempt: int) -> Handle | Outcome | None: ...

    def orphans(self, known: Iterable[tuple[str, int]] = ()) -> list[tuple[str, int]]: ...

    def discard(self, run_id: str, attempt: int) -> None: ...


class Waker(Protocol):
    @property
    def stop_requested(self) -> bool:
        """SIGTERM arrived (readable in the middle of a wake-up: a long burst checks it)."""
        ...

    def wait(self, deadline: datetime | None, handles: list[Handle]) -> Wakeups: ...


class Notifier(Protocol):
    @property
    def watchdog_interval_s(self) -> float | None: ...

    def ready(self, status: str) -> None: ...

    def status(self, status: str) -> None: ...

    def reloading(self) -> None: ...

    def watchdog(self) -> None: ...

    def stopping(self) -> None: ...


class Counting(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Setting(Protocol):
    def set(self, value: float) -> None: ...


class Observing(Protocol):
    def observe(self, amount: float) -> None: ...


class CountingBy(Protocol):
    def labels(self, *labelvalues: str) -> Counting: ...


class SettingBy(Protocol):
    def labels(self, *labelvalues: str) -> Setting: ...


class Metrics(Protocol):
    """The instruments the loop updates (chronod.daemon.metrics.Metrics names each)."""

    @property
    def fire_lag(self) -> Observing: ...
    @property
    def runs(self) -> CountingBy: ...
    @property
    def running(self) -> Setting: ...
    @property
    def jobs(self) -> Setting: ...
    @property
    def without_next(self) -> Setting: ...
    @property
    def repairs(self) -> Counting: ...
    @property
    def last_success(self) -> SettingBy: ...
    @property
    def registry_errors(self) -> Setting: ...
    @property
    def db_restored(self) -> CountingBy: ...
    @property
    def quarantined(self) -> Setting: ...
    @property
    def stale(self) -> Counting: ...
    @property
    def lease_token(self) -> Setting: ...
    @property
    def rescued(self) -> Counting: ...
    @property
    def takeovers(self) -> CountingBy: ...
    @property
    def store_up(self) -> Setting: ...

    def beat(self) -> None: ...


class Reloads(Protocol):
    """Runs a reload's preparation (`Registry.prepare`) and hands its result, or what it
    raised, back to the loop from `take`."""

    @property
    def busy(self) -> bool: ...

    def submit(self, work: Callable[[], Prepared]) -> None: ...

    def take(self) -> Prepared | None: ...

    def resume(self) -> None: ...

    def cancel(self) -> None: ...

    def tidy(self) -> None: ...


class NotifyService(Protocol):
    def launching(self) -> None:
        """A burst of starts begins: the notifier's next round waits for it."""
        ...

    def wake(self) -> None:
        """Outcomes were recorded: look at them."""
        ...
