"""Job documents the fleet scenarios share."""

from __future__ import annotations


def every_ten_seconds(i: int) -> dict:
    """Job `tick{i}`, every 10 s at second i % 10: a fleet of them owes JOBS / 10 a second."""
    return {
        "id": f"tick{i:03d}",
        "owner": "ops",
        "schedule": f"{i % 10}/10 * * * * *",
        "command": "true",
        "idempotency_class": "idempotent",
        "overlap": "allow",
        "catchup": "latest",
        "tolerance_s": 0,
        "tolerance_reason": "on the dot",
    }


EACH_TICK = {
    "id": "tick",
    "owner": "ops",
    "schedule": "*/10 * * * * *",
    "command": "true",
    "run_on": "each",
    "idempotency_class": "idempotent",
    "overlap": "allow",
    "catchup": "latest",
    "tolerance_s": 0,
    "tolerance_reason": "on the dot",
}
"""A `run_on: each` job every 10 s, on the dot: a process on every node at each fire time."""
