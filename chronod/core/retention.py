"""Retention: how long a job's runs are kept, and what an audit says where they were pruned.

Each job keeps its runs for `history_days` (a file's `defaults:` may set it for every job
of the file; 400 days otherwise). Older terminal runs are deleted in small batches, oldest
first, never the job's latest success; the store remembers per job the newest run it
deleted (the watermark) and the retention that deleted it. An occurrence at or before
the watermark that has no row is "pruned (history kept N days)", never "missing".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from chronod.core.durations import format_duration

DEFAULT_HISTORY_DAYS = 400
DAY_S = 86400
PRUNED = "pruned"  # the word an audit uses for an occurrence retention removed


def cutoff(now: datetime, kept_s: int) -> datetime:
    """Runs scheduled before this instant are past a retention of `kept_s` seconds."""
    return now - timedelta(seconds=kept_s)


def by_retention(history_days: Mapping[str, int]) -> dict[int, list[str]]:
    """Job ids grouped by their retention in seconds: one look for old runs per group."""
    groups: dict[int, list[str]] = defaultdict(list)
    for job_id, days in history_days.items():
        groups[days * DAY_S].append(job_id)
    return {kept_s: sorted(ids) for kept_s, ids in groups.items()}


def unknown_jobs(old: Iterable[str], history_days: Mapping[str, int]) -> list[str]:
    """Job ids with old runs but no definition at all: kept for the default retention."""
    return sorted(j for j in old if j not in history_days)


def kept_text(kept_s: int) -> str:
    """A retention in words: '400 days', '1 day', '36h'."""
    if kept_s % DAY_S == 0:
        days = kept_s // DAY_S
        return f"{days} day" if days == 1 else f"{days} days"
    return format_duration(kept_s)


def pruned_reason(kept_s: int) -> str:
    """What an audit says for an occurrence retention removed."""
    return f"pruned (history kept {kept_text(kept_s)})"


def was_pruned(scheduled_at: datetime, mark: Any | None) -> bool:
    """Whether an occurrence without a row lies where retention deleted runs (`mark` is the
    job's store.api.Pruned, or None when nothing of the job was ever pruned)."""
    return mark is not None and scheduled_at <= mark.through
