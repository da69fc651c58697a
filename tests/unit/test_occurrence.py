"""chronod.core.occurrence: the one place where a job's key, jitter, fire times and run ids
are computed. Expected values are the formulas written out again here, by hand."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronod.core import occurrence
from chronod.core.model import JobSpec, RunOn
from chronod.core.schedule import compile_schedule

UTC = timezone.utc


def T(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def spec(run_on: str = "any", tolerance_s: int = 300, job_id: str = "nightly") -> JobSpec:
    return JobSpec(
        id=job_id,
        owner="ops",
        schedule="0 4 * * *",
        command="true",
        idempotency_class="idempotent",
        tolerance_s=tolerance_s,
        run_on=RunOn(mode=run_on),
    )


def by_hand_offset(key: str, tolerance_s: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % tolerance_s


def by_hand_run_id(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Every:
    """A schedule firing every `step` seconds from the epoch."""

    def __init__(self, step: int):
        self.step = step

    def next_after(self, after: datetime) -> datetime:
        ts = int(after.timestamp()) // self.step * self.step + self.step
        return datetime.fromtimestamp(ts, UTC)


@pytest.mark.parametrize(
    "run_on, node, key",
    [
        ("any", "web1", "nightly"),
        ("any", None, "nightly"),
        ("each", "web1", "nightly@web1"),
        ("each", "web2", "nightly@web2"),
    ],
)
def test_a_job_is_keyed_by_its_id_or_by_id_at_node_when_it_runs_on_each_node(run_on, node, key):
    place = occurrence.placement(spec(run_on), node)
    assert place.key == key
    assert place.offset_s == by_hand_offset(key, 300)
    assert place.node == (node if run_on == "each" else None)


def test_a_job_on_each_node_cannot_be_keyed_without_a_node():
    with pytest.raises(ValueError, match="needs the node name"):
        occurrence.placement(spec("each"), None)


def test_two_nodes_of_an_each_job_fire_at_different_offsets_and_ids():
    web1, web2 = occurrence.placements(spec("each"), ["web2", "web1", "web1"])
    assert (web1.node, web2.node) == ("web1", "web2")
    at = T("2026-03-10 04:00")
    one, two = web1.at(at), web2.at(at)
    assert one.fire_at == at + timedelta(seconds=by_hand_offset("nightly@web1", 300))
    assert two.fire_at == at + timedelta(seconds=by_hand_offset("nightly@web2", 300))
    assert one.run_id == by_hand_run_id("nightly@web1|2026-03-10T04:00:00Z") != two.run_id


def test_a_job_that_runs_once_per_fleet_has_one_placement_whatever_the_nodes():
    assert [p.key for p in occurrence.placements(spec("any"), ["web1", "web2"])] == ["nightly"]


def test_a_tolerance_of_zero_means_no_jitter():
    assert occurrence.placement(spec(tolerance_s=0), None).offset_s == 0


def test_the_run_id_hangs_on_the_nominal_time_in_utc_not_on_the_fire_time():
    place = occurrence.placement(spec(), None)
    at = datetime(2026, 3, 10, 5, 0, tzinfo=timezone(timedelta(hours=1)))
    assert place.at(at).run_id == by_hand_run_id("nightly|2026-03-10T04:00:00Z")


def test_a_manual_run_id_never_equals_the_scheduled_one_at_the_same_instant():
    at = T("2026-03-10 04:00")
    assert occurrence.manual_run_id("nightly", at) == by_hand_run_id("nightly|manual|2026-03-10T04:00:00Z")
    assert occurrence.manual_run_id("nightly", at) != occurrence.run_id("nightly", at)


def test_the_next_occurrence_is_the_first_whose_fire_time_is_after_the_instant():
    place = occurrence.Placement("j", "j", None, 45)
    after = T("2026-01-01 00:00:30")
    got = place.upcoming(Every(60), after, 2)
    assert [o.scheduled_at for o in got] == [T("2026-01-01 00:00"), T("2026-01-01 00:01")]
    assert [o.fire_at for o in got] == [T("2026-01-01 00:00:45"), T("2026-01-01 00:01:45")]
    assert place.next_after(Every(60), after) == got[0]
    assert occurrence.Placement("j", "j", None, 0).next_after(Every(60), after).scheduled_at == T("2026-01-01 00:01")


def test_a_bare_expression_is_its_own_key_without_jitter():
    place = occurrence.expression("0 4 * * *")
    nxt = place.next_after(compile_schedule("0 4 * * *", "UTC"), T("2026-03-10 05:00"))
    assert nxt.fire_at == nxt.scheduled_at == T("2026-03-11 04:00")
    assert nxt.run_id == by_hand_run_id("0 4 * * *|2026-03-11T04:00:00Z")


@pytest.mark.parametrize("key, node", [("nightly", None), ("nightly@web1", "web1"), ("a@b@c", "b@c")])
def test_the_node_of_a_key_is_what_follows_the_first_at_sign(key, node):
    assert occurrence.node_of_key(key) == node


@given(
    at=st.datetimes(min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30)),
    zone=st.sampled_from(["UTC", "America/New_York", "Asia/Kolkata", "Pacific/Chatham"]),
)
def test_the_run_id_stamp_is_the_utc_strftime_whatever_the_zone(at, zone):
    aware = at.replace(tzinfo=ZoneInfo(zone))
    assert occurrence.utc_stamp(aware) == aware.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("run_on", ["any", "each"])
@pytest.mark.parametrize("tolerance_s", [0, 300])
@pytest.mark.parametrize("expr", ["30 2 * * *", "@every 90s", "*/7 * * * *"])
def test_first_after_is_the_placements_next_occurrence_and_holds_until_it_fires(run_on, tolerance_s, expr):
    s = spec(run_on, tolerance_s)
    schedule = compile_schedule(expr, "Europe/Berlin")
    after = T("2026-03-29T00:59:30Z")
    first = occurrence.first_after(s, schedule, "n1", after)
    nxt = occurrence.placement(s, "n1").next_after(schedule, after)
    assert nxt is not None
    assert (first.key, first.scheduled_at, first.run_id) == (nxt.job_key, nxt.scheduled_at, nxt.run_id)
    assert first.scheduled_at + timedelta(seconds=first.offset_s) == nxt.fire_at
    just_before = nxt.fire_at - timedelta(microseconds=1)
    assert first.holds_at("n1", after) and first.holds_at("n1", just_before)
    assert not first.holds_at("n1", nxt.fire_at), "it fired: the next one is another"
    assert not first.holds_at("n1", after - timedelta(seconds=1)), "the clock stepped back"
    assert not first.holds_at("n2", after), "another node"
    for now in (after + timedelta(seconds=1), just_before):  # the first after any instant before it fires
        later = occurrence.placement(s, "n1").next_after(schedule, now)
        assert later is not None and later.run_id == first.run_id
