"""Is chrono healthy? The judgement behind `chronoctl status` (and its exit code), pure.

The rule, before the code:

- A node (one chronod) that stopped cleanly is `stopped`. Otherwise, on this host's
  current boot it is `up` exactly while its process runs: the pid *and* the process's start
  time it recorded must still match (a zombie is dead; a pid the kernel gave to another
  process is not the old daemon), so a kill -9 shows at once, not when the lease ends. On
  this host after a reboot it is `down`. On another host (a fleet, or a database on a
  shared disk) nothing can be probed, and it is `up` while its lease lasts.
- The installation is `down` (exit 3) when no node is up; `degraded` (exit 1) when a node
  is up but something needs a look: registry errors (the last good version of the file
  keeps running), quarantined jobs, a fleet node that died (not cleanly stopped); else
  `healthy` (exit 0). `status JOB` judges the same, with only the errors of that job's file
  and that job's quarantine.

The shell probes the process (`chronod.fsutil.same_process`) and passes what it found as a
`Probe`; `now` is an argument like everywhere in the core.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Iterable, Mapping, Sequence


class Probe(str, Enum):
    """What this host can tell of a node's process."""

    RUNNING = "running"  # on this boot, its pid still holds the process that started with it
    GONE = "gone"  # on this boot, and that process is gone (or only its zombie is left)
    REBOOTED = "rebooted"  # this host booted again since the node started
    REMOTE = "remote"  # another host: only the lease can tell


class Verdict(str, Enum):
    """The installation's health, with the exit code `chronoctl status` ends with."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"

    @property
    def exit_code(self) -> int:
        return {"healthy": 0, "degraded": 1, "down": 3}[self.value]


@dataclass(frozen=True)
class NodeHealth:
    """One chronod as `status` shows it: `state` up, down or stopped, and why in words."""

    name: str
    hostname: str
    pid: int
    state: str  # up | down | stopped
    why: str  # "" when up
    started_at: datetime
    heartbeat_at: datetime
    lease_expires_at: datetime
    stopped_at: datetime | None
    probe: Probe
    token: int = 0

    @property
    def up(self) -> bool:
        return self.state == "up"

    @property
    def crashed(self) -> bool:
        """Down without a clean stop: a daemon that died, which someone must look at."""
        return self.state == "down"


@dataclass(frozen=True)
class Health:
    """The verdict, every reason for it (one line each), and the nodes it judged."""

    verdict: Verdict
    reasons: tuple[str, ...]
    nodes: tuple[NodeHealth, ...]

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def _stamp(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_health(node: Any, now: datetime, probe: Probe) -> NodeHealth:
    """Judge one node (read by attribute: name, hostname, pid, token, started_at,
    heartbeat_at, lease_expires_at, stopped_at) from what this host found of its process."""
    lease = f"its lease is held until {_stamp(node.lease_expires_at)}" if node.lease_expires_at > now else ""
    beat = f"last heartbeat {_stamp(node.heartbeat_at)}"
    if node.stopped_at is not None:
        state, why = "stopped", f"stopped cleanly at {_stamp(node.stopped_at)}"
    elif probe is Probe.RUNNING:
        state, why = "up", ""
    elif probe is Probe.GONE:
        state, why = "down", f"died: process {node.pid} is gone ({beat})"
    elif probe is Probe.REBOOTED:
        state, why = "down", f"died: the host booted again since it started ({beat})"
    elif node.lease_expires_at > now:
        state, why = "up", ""
    else:
        state, why = "down", f"no heartbeat since {_stamp(node.heartbeat_at)}: its lease ended"
        lease = ""
    if state == "down" and lease:
        why = f"{why}; {lease}"
    return NodeHealth(
        node.name,
        node.hostname,
        node.pid,
        state,
        why,
        node.started_at,
        node.heartbeat_at,
        node.lease_expires_at,
        node.stopped_at,
        probe,
        node.token,
    )


def quarantined(errors: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The registry errors that say a job was set aside (the daemon writes them so)."""
    return [e for e in errors if "is quarantined:" in str(e.get("message") or "")]


def judge(nodes: Sequence[NodeHealth], errors: Sequence[Mapping[str, Any]]) -> Health:
    """The installation's health from its nodes and the registry errors the daemons stored
    (`file`, `line`, `message`, `node`)."""
    reasons: list[str] = []
    if not any(n.up for n in nodes):
        reasons.append("no chronod is running: nothing runs until one starts")
        dead = [n for n in nodes if n.crashed]
        reasons += [f"chronod {n.name} (pid {n.pid} on {n.hostname}) {n.why}" for n in dead]
        return Health(Verdict.DOWN, tuple(reasons), tuple(nodes))
    reasons += [f"chronod {n.name} on {n.hostname} is down: {n.why}" for n in nodes if n.crashed]
    held = quarantined(errors)
    if held:
        reasons.append(f"{len(held)} job{'' if len(held) == 1 else 's'} quarantined")
    files = {e.get("file") for e in errors if e not in held}
    if files:
        reasons.append(
            f"registry errors in {len(files)} file{'' if len(files) == 1 else 's'} (the last good version runs)"
        )
    return Health(Verdict.DEGRADED if reasons else Verdict.HEALTHY, tuple(reasons), tuple(nodes))


def judge_job(health: Health, job_id: str, source_file: str | None, errors: Sequence[Mapping[str, Any]]) -> Health:
    """`status JOB`: down as the installation is; degraded when this job is quarantined or
    its file has registry errors (only its last good version runs)."""
    if health.verdict is Verdict.DOWN:
        return health
    mine = [
        e
        for e in errors
        if (source_file and e.get("file") == source_file) or f"job {job_id!r} is quarantined" in str(e.get("message"))
    ]
    held = quarantined(mine)
    reasons = []
    if held:
        reasons.append(f"{job_id} is quarantined: the daemon set it aside")
    if len(held) < len(mine):
        reasons.append(f"its file {source_file} has registry errors: its last good version runs")
    return Health(Verdict.DEGRADED if reasons else Verdict.HEALTHY, tuple(reasons), health.nodes)
