"""FleetView's version check: the vote follows the nodes' published hashes, which it
compares only when a node's published digest of them changed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from chronod.core.clock import FakeClock
from chronod.core.model import JobSpec
from chronod.daemon.fleetview import FleetView
from chronod.daemon.runs import Job
from chronod.store.api import Node

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
FLEET = "f" * 16  # greater than any spec hash: a tie would go to it too


class Untouchable(dict[str, str]):
    """Published hashes that fail the check if it reads them."""

    def _read(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the hashes were read although no digest changed")

    __eq__ = __ne__ = __len__ = __iter__ = __getitem__ = get = items = keys = values = _read  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]


class Nodes:
    """The `Leases` part FleetView reads: the nodes as published."""

    def __init__(self) -> None:
        self.published: dict[str, dict[str, Any]] = {}

    def nodes(self) -> list[Node]:
        later = T0 + timedelta(minutes=5)
        return [Node(name, 1, 1, "h", "b", T0, T0, later, None, info) for name, info in self.published.items()]

    def live_nodes(self) -> list[tuple[str, int]]:
        return sorted((name, 1) for name in self.published)


@pytest.fixture
def setting() -> tuple[FleetView, Nodes, dict[str, Job], list[str]]:
    spec = JobSpec(id="backup", owner="ops", schedule="*/5 * * * *", command="true", idempotency_class="idempotent")
    jobs = {"backup": Job.on(spec, "n1")}
    store, logged = Nodes(), []
    view = FleetView(store, FakeClock(T0), "n1", lambda event, level="info", **f: logged.append(event), True)  # type: ignore[arg-type]
    store.published["n1"] = {"spec_hashes": {"backup": spec.spec_hash()}, "spec_digest": "mine"}
    return view, store, jobs, logged


def test_the_vote_is_taken_again_only_when_a_published_digest_changes(setting):
    view, store, jobs, logged = setting
    for name in ("n2", "n3"):
        store.published[name] = {"spec_hashes": {"backup": FLEET}, "spec_digest": "d1"}
    view.check_versions(jobs)
    assert logged == ["job.version_outvoted"] and view.outvoted_here(jobs["backup"])
    for name in ("n2", "n3"):
        store.published[name] = {"spec_hashes": Untouchable(), "spec_digest": "d1"}
    view.check_versions(jobs)
    assert logged == ["job.version_outvoted"] and view.outvoted_here(jobs["backup"])
    ours = store.published["n1"]["spec_hashes"]["backup"]
    store.published["n2"] = {"spec_hashes": {"backup": ours}, "spec_digest": "d2"}
    store.published["n3"] = {"spec_hashes": {"backup": ours}, "spec_digest": "d2"}
    view.check_versions(jobs)
    assert logged == ["job.version_outvoted", "job.version_agreed"] and not view.outvoted_here(jobs["backup"])


def test_a_node_that_publishes_no_digest_has_its_hashes_compared_at_every_check(setting):
    view, store, jobs, logged = setting
    ours = store.published["n1"]["spec_hashes"]["backup"]
    store.published["n2"] = {"spec_hashes": {"backup": ours}}
    store.published["n3"] = {"spec_hashes": {"backup": ours}, "spec_digest": "d1"}
    view.check_versions(jobs)
    assert logged == []
    store.published["n2"] = {"spec_hashes": {"backup": FLEET}}
    store.published["n3"] = {"spec_hashes": {"backup": FLEET}, "spec_digest": "d2"}
    view.check_versions(jobs)
    assert logged == ["job.version_outvoted"]
    store.published["n3"] = {"spec_hashes": {"backup": ours}, "spec_digest": "d2"}  # compared too: n2 has none
    store.published["n2"] = {"spec_hashes": {"backup": ours}}
    view.check_versions(jobs)
    assert logged == ["job.version_outvoted", "job.version_agreed"]


def test_a_node_leaving_is_a_change_although_the_others_publish_the_same(setting):
    view, store, jobs, logged = setting
    for name in ("n2", "n3"):
        store.published[name] = {"spec_hashes": {"backup": FLEET}, "spec_digest": "d1"}
    view.check_versions(jobs)
    del store.published["n3"]
    view.check_versions(jobs)  # one against one: the greater hash still wins
    assert logged == ["job.version_outvoted"]
    del store.published["n2"]
    view.check_versions(jobs)
    assert logged == ["job.version_outvoted", "job.version_agreed"]
