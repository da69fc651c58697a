"""When a node of a fleet looks for the other nodes' late occurrences, and which it takes
(chronod.core.rescue)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chronod.core import rescue

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@dataclass
class Late:
    run_id: str
    job_id: str
    job_key: str


def test_a_node_behind_or_overloaded_does_not_look():
    assert rescue.looks(behind=False, overloaded=False)
    assert not rescue.looks(behind=True, overloaded=False)
    assert not rescue.looks(behind=False, overloaded=True)


def test_late_means_pending_past_the_rescue_delay():
    assert rescue.late_before(NOW) == NOW - timedelta(seconds=rescue.RESCUE_AFTER_S)
    assert rescue.late_before(NOW, 6.0) == NOW - timedelta(seconds=6)


def test_the_next_look_is_when_the_next_occurrence_would_be_late_within_bounds():
    after = timedelta(seconds=rescue.RESCUE_AFTER_S)
    # a sparse fleet: exactly when the next one would be late
    assert rescue.next_look(NOW, NOW + timedelta(seconds=7)) == NOW + timedelta(seconds=7) + after
    # a busy one: not more often than LOOK_EVERY_S, however many fall due
    assert rescue.next_look(NOW, NOW - timedelta(seconds=1.9)) == NOW + timedelta(seconds=rescue.LOOK_EVERY_S)
    # nothing stored, or the next one far away: still every LOOK_AT_MOST_S
    assert rescue.next_look(NOW, None) == NOW + timedelta(seconds=rescue.LOOK_AT_MOST_S)
    assert rescue.next_look(NOW, NOW + timedelta(hours=1)) == NOW + timedelta(seconds=rescue.LOOK_AT_MOST_S)


def test_a_node_rescues_only_what_it_carries_in_the_fleet_version_and_does_not_handle_itself():
    late = [
        Late("a1", "a", "a"),
        Late("b1", "b", "b"),  # handled here (tracked, waiting to start or running)
        Late("c1", "c", "c"),  # not carried here, or outvoted, or set aside
        Late("d1", "d", "d"),  # carried under another key (another definition)
        Late("a2", "a", "a"),
    ]
    taken = rescue.to_rescue(late, {"b1"}, {"a": "a", "b": "b", "d": "d@n2"})
    assert [r.run_id for r in taken] == ["a1", "a2"]
