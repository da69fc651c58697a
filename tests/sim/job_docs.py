"""Job documents the one-node scenarios share."""

from __future__ import annotations

from typing import Any

EXACT: dict[str, Any] = {
    "owner": "ops",
    "command": "true",
    "idempotency_class": "idempotent",
    "tolerance_s": 0,
    "tolerance_reason": "exact times",
}
# a job that needs the simulation's one-slot resource and catches up every occurrence
ONE_SLOT_ALL: dict[str, Any] = {**EXACT, "resource": "db", "catchup": "all", "catchup_window_s": 7200}
# a job due every minute whose backlog drains one run at a time, in a line a window defers
DEFER_LINE: dict[str, Any] = {
    **EXACT,
    "id": "line",
    "schedule": "* * * * *",
    "overlap": "forbid",
    "catchup": "all",
    "catchup_window_s": 86400,
    "blackout": "defer",
}
