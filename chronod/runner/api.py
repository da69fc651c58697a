"""The process runner: launch one attempt of a run and learn how it ended, even across
daemon restarts.

INTERFACE — see docs/architecture.md. Each attempt is launched under a small supervisor
process (forked from the daemon, then detached with setsid) that is the job's parent: it
starts the job in its own process group, drains its output (keeping the tail, counting
every byte), enforces `timeout_s` (SIGTERM to the group, SIGKILL after `kill_grace_s`),
waits for it, and writes a result file atomically into the state directory. The daemon
watches supervisors with pidfds; a new daemon adopts supervisors left by a dead one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from chronod.core.model import JobSpec


@dataclass
class LaunchRequest:
    """Everything needed to start one attempt."""

    run_id: str
    attempt: int
    spec: JobSpec
    env: dict[str, str]  # the CHRONO_* variables; the runner adds the spec's env and the base env


@dataclass
class Handle:
    """A launched (or adopted) attempt that has not been reaped yet."""

    run_id: str
    attempt: int
    supervisor_pid: int
    pid: int | None  # the job's pid (= pgid), once known
    started_at: datetime | None
    fd: int  # a pidfd of the supervisor: readable when it has exited


@dataclass
class Outcome:
    """How an attempt ended, as its supervisor recorded it."""

    run_id: str
    attempt: int
    state: str  # succeeded | failed | timed_out | cancelled | lost
    exit_code: int | None
    signal: int | None
    started_at: datetime | None
    finished_at: datetime | None
    output_tail: str  # the last output_limit_kb of stdout+stderr, decoded with backslashreplace
    output_bytes: int  # every byte the job wrote, counted exactly
    error: str | None  # "no such user 'x'", "command not found", "killed after timeout 5s"
    pid: int | None = None
