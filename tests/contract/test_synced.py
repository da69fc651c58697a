"""A reload whose definitions match the last sync writes and reads no stored definition;
any other writer of the jobs table sends the next reload back to the full comparison."""

from __future__ import annotations

from dataclasses import replace

from chronod.core.model import JobSpec
from chronod.daemon.synced import Synced


def spec(job_id: str, command: str = "true") -> JobSpec:
    return JobSpec(id=job_id, owner="ops", schedule="*/5 * * * *", command=command, idempotency_class="idempotent")


class Counting:
    """The store, counting the full comparisons (`sync_jobs`)."""

    def __init__(self, store):
        self.store, self.syncs = store, 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def sync_jobs(self, node, specs, fell_due=None):
        self.syncs += 1
        return self.store.sync_jobs(node, specs, fell_due)


def test_the_same_definitions_again_skip_the_store(store):
    counting, synced = Counting(store), Synced()
    carried = {"backup": spec("backup"), "rotate": spec("rotate")}
    assert synced.sync(counting, "n1", carried) is True
    assert synced.sync(counting, "n1", dict(carried)) is False  # the same objects
    # equal definitions in new objects (a file validated again on a new day): still nothing
    assert synced.sync(counting, "n1", {"backup": spec("backup"), "rotate": spec("rotate")}) is False
    assert counting.syncs == 1


def test_a_changed_added_or_removed_definition_is_synced(store):
    counting, synced = Counting(store), Synced()
    synced.sync(counting, "n1", {"backup": spec("backup"), "rotate": spec("rotate")})
    assert synced.sync(counting, "n1", {"backup": spec("backup", "false"), "rotate": spec("rotate")}) is True
    assert store.get_job("backup").spec.command == "false"
    assert synced.sync(counting, "n1", {"backup": spec("backup", "false")}) is True
    assert store.get_job("rotate").removed_at is not None
    assert synced.sync(counting, "n1", {"backup": spec("backup", "false"), "new": spec("new")}) is True
    assert {j.job_id for j in store.jobs()} == {"backup", "new"}


def test_another_writer_of_the_jobs_table_brings_the_comparison_back(store):
    counting, synced = Counting(store), Synced()
    carried = {"backup": spec("backup")}
    synced.sync(counting, "n1", carried)
    store.sync_jobs("n2", [replace(spec("backup"), command="other")])  # another node's version
    assert synced.sync(counting, "n1", carried) is True
    assert store.get_job("backup").spec.command == "true"  # this node's version is stored again
    store.set_paused("backup", True, "disk swap")
    assert synced.sync(counting, "n1", carried) is True
    assert synced.sync(counting, "n1", carried) is False
    assert counting.syncs == 3


def test_forget_compares_again(store):
    counting, synced = Counting(store), Synced()
    carried = {"backup": spec("backup")}
    synced.sync(counting, "n1", carried)
    synced.forget()
    assert synced.sync(counting, "n1", carried) is True


def test_the_published_hashes_are_encoded_once_for_the_same_jobs():
    class Job:
        def __init__(self, s):
            self.spec = s

    synced = Synced()
    jobs = {"b": Job(spec("b")), "a": Job(spec("a"))}
    first = synced.node_info_json({"jobs": 2, "pid": 1}, jobs)
    assert synced.node_info_json({"jobs": 2, "pid": 1}, dict(jobs)) == first
    import json

    assert json.loads(first)["spec_hashes"] == {"a": spec("a").spec_hash(), "b": spec("b").spec_hash()}
    changed = {**jobs, "b": Job(spec("b", "false"))}
    assert json.loads(synced.node_info_json({"jobs": 2}, changed))["spec_hashes"]["b"] == spec("b", "false").spec_hash()


def test_the_published_digest_changes_with_the_hashes_and_only_with_them():
    """Other nodes compare `spec_digest` first and the hashes only when it changed."""

    class Job:
        def __init__(self, s):
            self.spec = s

    import json

    jobs = {"b": Job(spec("b")), "a": Job(spec("a"))}
    first = json.loads(Synced().node_info_json({"jobs": 2, "pid": 1}, jobs))
    again = json.loads(Synced().node_info_json({"jobs": 2, "pid": 2}, {**jobs, "a": Job(spec("a"))}))
    changed = json.loads(Synced().node_info_json({"jobs": 2, "pid": 1}, {**jobs, "b": Job(spec("b", "false"))}))
    assert first["spec_digest"] == again["spec_digest"] != changed["spec_digest"]
    assert first["spec_hashes"] == again["spec_hashes"] != changed["spec_hashes"]
