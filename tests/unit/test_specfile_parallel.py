"""A registry's files validated in worker processes give exactly what validating them here
gives: every spec and its hash, resources, windows, every problem with its file and line,
the file checks, the stored results; and the workers are used only for enough bytes."""

from __future__ import annotations

import dataclasses
import os
import pwd
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chronod import specfile
from chronod.core.model import json_text_and_hash
from chronod.core.occurrence import first_after
from chronod.core.schedule import compile_schedule
from chronod.daemon.filestore import StoredFiles
from chronod.specfile import FileCache, decode_result, load_registry
from chronod.store.memory import MemoryStore
from tests.unit.test_specfile_stored import KEY, NOW, RICH, answers, job, write

BAD_YAML = 'jobs:\n  - id: x\n    schedule: "0 * * * *\n    command: true\n'
BAD_FIELDS = """\
defaults: {owner: ops, idempotency_class: idempotent}
jobs:
  - id: fine
    schedule: "0 3 * * *"
    command: "true"
  - id: broken
    schedule: "61 * * * *"
    command: "true"
    retry: {attempts: 0}
"""


def registry(tmp_path: Path) -> Path:
    d = tmp_path / "jobs.d"
    d.mkdir()
    write(d, "a-rich.yaml", RICH)
    write(d, "b-bad-yaml.yaml", BAD_YAML)
    write(d, "c-bad-fields.yaml", BAD_FIELDS)
    write(d, "d-duplicate.yaml", job("report"))  # an id a-rich.yaml defines
    write(d, "e-plain.yaml", job("plain") + job("plain2").replace("jobs:\n", ""))
    write(d, "f-group-writable.yaml", job("gw"), mode=0o664)
    os.symlink(d / "e-plain.yaml", d / "g-link.yaml")
    write(d, "h-linked.yaml", job("linked"))
    os.link(d / "h-linked.yaml", tmp_path / "second-name.yaml")
    write(d, "i-empty.yaml", "")
    if os.geteuid() == 0:  # delegated files: one holding its owner's job, one a job of root's
        nobody = pwd.getpwnam("nobody")
        write(d, "j-delegated.yaml", job("theirs").replace("idempotency_class", "user: nobody\n    idempotency_class"))
        write(d, "k-delegated-root-job.yaml", job("rootly"))
        for name in ("j-delegated.yaml", "k-delegated-root-job.yaml"):
            os.chown(d / name, nobody.pw_uid, nobody.pw_gid)
    return d


@pytest.fixture
def parallel_always(monkeypatch):
    monkeypatch.setattr(specfile, "PARALLEL_MIN_BYTES", 0)


@pytest.mark.parametrize("secure", [False, True])
def test_workers_and_this_process_give_the_same_answers(tmp_path, parallel_always, secure):
    d = registry(tmp_path)
    here = load_registry([d], now=NOW, secure=secure)
    there = load_registry([d], now=NOW, secure=secure, workers=2)
    assert (here.workers, there.workers) == (0, 2)
    assert answers(there) == answers(here)
    assert list(there.files) == list(here.files)
    assert any(p.line for p in here.problems if p.file.endswith("b-bad-yaml.yaml"))
    assert any(p.job_id == "broken" for p in here.problems)
    assert any("already defined" in p.message for p in here.problems)
    if secure:
        assert any("writable by group" in p.message for p in here.problems)
        assert any("symbolic link" in p.message for p in here.problems)
        assert any("hard links" in p.message for p in here.problems)
        if os.geteuid() == 0:
            assert "theirs" in here.jobs and there.files[str(d / "j-delegated.yaml")].delegated == "nobody"
            assert any("owned by nobody, not root" in p.message for p in here.problems)
    for job_id, spec in here.jobs.items():
        assert there.jobs[job_id].spec_hash() == dataclasses.replace(spec).spec_hash()


def test_workers_store_the_results_this_process_would_store(tmp_path, parallel_always):
    d = registry(tmp_path)
    stores = []
    for workers in (1, 2):
        store = MemoryStore()
        load_registry([d], now=NOW, secure=False, cache=FileCache(StoredFiles(store, "n1", KEY)), workers=workers)
        stores.append(StoredFiles(store, "n1", KEY).load())
    here, there = stores
    assert here.keys() == there.keys() and here
    for name in here:
        assert here[name][0] == there[name][0]
        a, b = decode_result(name, here[name][1]), decode_result(name, there[name][1])
        assert (a.specs, a.resources, a.blackouts, a.problems) == (b.specs, b.resources, b.blackouts, b.problems)


def test_a_spec_validated_by_a_worker_holds_its_stored_json_until_taken_or_let_go(tmp_path, parallel_always):
    d = registry(tmp_path)
    there = load_registry([d], now=NOW, secure=False, workers=2)
    specs = list(there.jobs.values())
    first, rest = specs[0], specs[1:]
    assert first.take_json() == json_text_and_hash(dataclasses.replace(first))[0]
    assert first.take_json() is None  # taken once
    there.let_go()
    assert all(s.take_json() is None for s in rest)
    here = load_registry([d], now=NOW, secure=False)
    assert all(s.take_json() is None for s in here.jobs.values())  # validated here: nothing held


KINDS = """\
defaults: {owner: ops, idempotency_class: idempotent, command: "true"}
jobs:
  - {id: berlin, schedule: "30 2 * * *", timezone: Europe/Berlin, run_on: each}
  - {id: spread, schedule: "*/7 * * * *", tolerance_s: 120, tolerance_reason: spread}
  - {id: every, schedule: "@every 90s"}
  - {id: boot, schedule: "@reboot"}
  - {id: "off", schedule: "0 4 * * *", enabled: false}
  - {id: calendar, schedule: "@calendar Mon *-*-* 06:00:00"}
"""


def test_workers_and_this_process_compute_the_same_first_occurrences(tmp_path, parallel_always):
    """With a node, each validated spec holds its key, jitter offset and first occurrence
    there after the load's `now` (what `first_after` gives), computed where its file was
    validated: a worker gives what this process gives. A disabled or @reboot job holds none."""
    d = registry(tmp_path)
    write(d, "l-kinds.yaml", KINDS)
    here = load_registry([d], now=NOW, secure=False, node="n1")
    there = load_registry([d], now=NOW, secure=False, workers=2, node="n1")
    assert (here.workers, there.workers) == (0, 2)
    firsts = {job_id: spec.take_first() for job_id, spec in here.jobs.items()}
    assert {job_id: spec.take_first() for job_id, spec in there.jobs.items()} == firsts
    for job_id, spec in here.jobs.items():
        first = firsts[job_id]
        if not spec.enabled or spec.schedule == "@reboot":
            assert first is None, job_id
            continue
        schedule = compile_schedule(spec.schedule, spec.timezone, spec.dst_gap, spec.dst_repeat)
        assert first == first_after(spec, schedule, "n1", NOW), job_id
        assert first.scheduled_at is not None and first.scheduled_at.tzinfo is not None
    assert firsts["berlin"].key == "berlin@n1" and firsts["berlin"].scheduled_at == datetime(
        2026, 12, 3, 1, 30, tzinfo=UTC
    )
    assert firsts["spread"].key == "spread" and firsts["spread"].offset_s > 0  # jittered
    assert firsts["boot"] is None and firsts["off"] is None  # @reboot; disabled
    assert sum(f is not None for f in firsts.values()) >= 6
    # without a node, or for a file not validated by this load, nothing is held
    assert all(s.take_first() is None for s in load_registry([d], now=NOW, secure=False, workers=2).jobs.values())
    cache = FileCache()
    load_registry([d], now=NOW, secure=False, cache=cache, node="n1").let_go()
    again = load_registry([d], now=NOW, secure=False, cache=cache, node="n1", workers=2)
    assert all(s.take_first() is None for s in again.jobs.values())


def test_the_first_occurrences_a_load_holds_are_let_go_with_its_json(tmp_path, parallel_always):
    d = registry(tmp_path)
    for workers in (1, 2):
        got = load_registry([d], now=NOW, secure=False, workers=workers, node="n1")
        got.let_go()
        assert all(s.take_first() is None for s in got.jobs.values()), workers


def big_file(directory: Path, name: str, jobs: int) -> Path:
    lines = ["defaults: {owner: ops, idempotency_class: idempotent}", "jobs:"]
    for i in range(jobs):
        lines += [f"  - id: {name}.{i}", f'    schedule: "{i % 60} {i % 24} * * *"', '    command: "true"']
    return write(directory, f"{name}.yaml", "\n".join(lines) + "\n")


def test_workers_validate_only_enough_bytes_in_more_than_one_file(tmp_path, monkeypatch):
    monkeypatch.setattr(specfile, "PARALLEL_MIN_BYTES", 20_000)
    small, large, single = (tmp_path / n for n in ("small", "large", "single"))
    for d in (small, large, single):
        d.mkdir()
    big_file(small, "a", 100)
    big_file(small, "b", 100)
    big_file(large, "a", 300)
    big_file(large, "b", 300)
    big_file(single, "a", 600)
    assert sum(p.stat().st_size for p in small.iterdir()) < 20_000
    assert sum(p.stat().st_size for p in large.iterdir()) >= 20_000
    assert sum(p.stat().st_size for p in single.iterdir()) >= 20_000
    assert load_registry([small], now=NOW, secure=False, workers=2).workers == 0
    assert load_registry([large], now=NOW, secure=False, workers=2).workers == 2
    assert load_registry([large], now=NOW, secure=False, workers=1).workers == 0
    assert load_registry([single], now=NOW, secure=False, workers=2).workers == 0  # one file is one piece of work
    # a file found in the cache is not validated again, here or by a worker
    cache = FileCache()
    load_registry([large], now=NOW, secure=False, cache=cache)
    assert load_registry([large], now=NOW, secure=False, cache=cache, workers=2).workers == 0


def test_the_daemon_validates_here_when_a_worker_fails_and_says_so(tmp_path, monkeypatch):
    from chronod.core.clock import FakeClock
    from chronod.daemon import main
    from chronod.workers import WorkerFailed

    d = registry(tmp_path)
    calls, logged = [], []

    def flaky(paths, *, now, secure, cache, workers=1, node=None):
        calls.append((workers, node))
        if workers > 1:
            raise WorkerFailed("a worker process was killed by signal 9 (SIGKILL) before it sent the results of x")
        return load_registry(paths, now=now, secure=secure, cache=cache, node=node)

    monkeypatch.setattr(specfile, "load_registry", flaky)
    monkeypatch.setattr("chronod.workers.usable_cpus", lambda: 2)
    got = main.load_files(
        [d], FakeClock(NOW), False, FileCache(), lambda event, *a, **kw: logged.append((event, a, kw)), "n1"
    )
    assert calls == [(2, "n1"), (1, "n1")]
    assert answers(got) == answers(load_registry([d], now=NOW, secure=False))
    [(event, level, fields)] = logged
    assert event == "registry.workers_failed" and level == ("error",) and "SIGKILL" in fields["message"]
