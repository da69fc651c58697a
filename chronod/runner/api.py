"""The process runner: launch one attempt of a run and learn how it ended, even across
daemon restarts.

INTERFACE — see docs/architecture.md and docs/launcher.md. chronod launches attempts
through the launcher, one long-lived process that supervises many runs; a small
supervisor process per attempt is the fallback. Either way the job's parent starts it in
its own process group, drains its output (keeping the tail, counting every byte),
enforces `timeout_s` (SIGTERM to every process of the run: its cgroup, or the fallback's
subreaper view; SIGKILL after `kill_grace_s`), waits for it,
and writes a result file atomically into the state directory. The daemon watches each
attempt through a descriptor that becomes readable when the outcome is on disk; a new
daemon adopts the attempts left by a dead one."""

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
    supervisor_pid: int  # the launcher's (or the per-run supervisor's) pid
    pid: int | None  # the job's pid (= pgid), once known
    started_at: datetime | None
    fd: int  # readable once the outcome is on disk or its supervisor is gone: an end pipe, or a pidfd


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
