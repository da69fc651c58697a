"""Deterministic jitter and run identity, exactly as DESIGN.md §4 states them."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone


def job_key(job_id: str, run_on_each: bool, node: str | None) -> str:
    """`id` for jobs that run once per fleet, `id@node` for jobs that run on each node."""
    if run_on_each:
        if not node:
            raise ValueError(f"job {job_id!r} runs on each node: its key needs the node name")
        return f"{job_id}@{node}"
    return job_id


def jitter_offset(key: str, tolerance_s: int) -> int:
    """Seconds added to every scheduled time of `key`; stable across days, nodes and restarts."""
    if tolerance_s <= 0:
        return 0
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % tolerance_s


def utc_stamp(at: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SSZ` of an aware datetime, in UTC."""
    if at.tzinfo is None:
        raise ValueError("run identity needs an aware datetime")
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_id(key: str, scheduled_at: datetime) -> str:
    """The identity of one occurrence: the same on every retry and every node."""
    return hashlib.sha256(f"{key}|{utc_stamp(scheduled_at)}".encode()).hexdigest()[:16]
