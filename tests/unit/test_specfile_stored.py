"""A restart reuses each unchanged job file's validated result from the store: the same
answers as a cold start (jobs, resources, windows, every problem), no file validated again;
an edited file, a file that became invalid, a removed file, another owner or mode, another
day or another validator take effect exactly as on a cold start."""

from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chronod import specfile
from chronod.daemon.filestore import StoredFiles
from chronod.specfile import FileCache, decode_result, encode_result, load_file, load_registry
from chronod.store.memory import MemoryStore
from tests.unit.test_specfile_cache import count_validations

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
KEY = b"k" * 32  # the node's sealing key
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

RICH = """\
defaults:
  owner: ops
  idempotency_class: idempotent
resources:
  db: {max_concurrency: 2}
blackouts:
  - name: db-upgrade
    reason: "CHG-42: database upgrade"
    timezone: America/New_York
    from: 2027-03-14 01:00
    to: "2027-03-14 04:00"
    tags: [db]
  - reason: weekly patching
    cron: "0 1 * * sun"
    duration: 3h
    jobs: [backup]
jobs:
  - id: backup
    schedule: "30 2 * * *"
    timezone: Europe/Berlin
    command: [/usr/bin/backup, --all]
    blackout: defer
    resource: db
    env: {ZED: "1", ALPHA: "two words"}
    tags: [db, nightly]
    retry: {attempts: 3, backoff: 30s}
    notify:
      - on: [failed]
        command: "mail -s fail root"
    run_on: each
    timeout: 1h
  - id: report
    schedule: "@every 10m"
    command: "echo report"
    description: "a report"
    enabled: false
  - id: odd
    schedule: "0 1 * * *"
    command: "true"
    overlap: allow
    unknown_field_here: 1
"""


def write(directory: Path, name: str, text: str, mode: int = 0o644) -> Path:
    path = directory / name
    path.write_text(text)
    path.chmod(mode)
    return path


def job(job_id: str, schedule: str = "0 4 * * *") -> str:
    return (
        f'jobs:\n  - id: {job_id}\n    owner: team\n    schedule: "{schedule}"\n'
        "    command: echo hi\n    idempotency_class: idempotent\n"
    )


def answers(result) -> tuple:
    """Everything a load says: jobs (every field), resources, windows, problems, per file."""
    return (
        result.jobs,
        result.resources,
        result.blackouts,
        [p.format() for p in result.problems],
        {p: (f.specs, f.resources, f.blackouts, f.problems, f.digest, f.delegated) for p, f in result.files.items()},
    )


@pytest.fixture
def store():
    return MemoryStore()


def restart(store, directory: Path, *, now: datetime = NOW, secure: bool = False):
    """A new daemon process: an empty cache over the same store."""
    cache = FileCache(StoredFiles(store, "n1", KEY))
    return load_registry([directory], now=now, secure=secure, cache=cache), cache


def cold(directory: Path, *, now: datetime = NOW, secure: bool = False):
    return load_registry([directory], now=now, secure=secure)


def test_a_stored_result_decodes_to_exactly_the_validated_one(tmp_path):
    path = write(tmp_path, "rich.yaml", RICH)
    fres = load_file(path, now=NOW, secure=False)
    assert fres.specs and fres.resources and len(fres.blackouts) == 2
    assert fres.problems  # the unknown key is reported
    back = decode_result(str(path), encode_result(fres))
    assert back.specs == fres.specs and back.resources == fres.resources and back.blackouts == fres.blackouts
    assert back.problems == fres.problems and back.digest == fres.digest
    for a, b in zip(back.specs, fres.specs, strict=True):
        assert a.env == b.env  # in the file's order, as validated
        hashed = dataclasses.replace(b)  # the same fields, no hash kept
        assert a.spec_hash() == hashed.spec_hash()


PLAIN = """\
defaults:
  owner: ops
  idempotency_class: idempotent
jobs:
  - id: argv
    schedule: "*/5 * * * *"
    timezone: Asia/Kolkata
    command: [/usr/bin/report, --since, 1h]
    env: {ZED: "1", ALPHA: "two words"}
    tags: [reports, hourly]
    workdir: /srv
    timeout_s: 600
    overlap: replace
    description: "every five minutes"
  - id: shell
    schedule: "@every 90s"
    command: "echo 'a | b' > /dev/null"
    enabled: false
"""


def test_plain_specs_decode_to_exactly_the_validated_ones_with_their_hashes(tmp_path):
    """Specs without retry, placement or notification (most jobs) are stored as their fields
    in order and handed straight back to the constructor."""
    path = write(tmp_path, "plain.yaml", PLAIN)
    fres = load_file(path, now=NOW, secure=False)
    assert [s.id for s in fres.specs] == ["argv", "shell"] and not [p for p in fres.problems if p.severity == "error"]
    back = decode_result(str(path), encode_result(fres))
    assert back.specs == fres.specs
    for a, b in zip(back.specs, fres.specs, strict=True):
        assert (a.command, a.env, a.tags, a.source_file) == (b.command, b.env, b.tags, str(path))
        assert type(a.command) is type(b.command) and type(a.tags) is tuple
        assert a.spec_hash() == dataclasses.replace(b).spec_hash()
    moved = decode_result("/elsewhere/plain.yaml", encode_result(fres))  # the file's own name is not stored
    assert {s.source_file for s in moved.specs} == {"/elsewhere/plain.yaml"}


def test_spec_of_makes_what_the_constructor_makes(tmp_path):
    """Plain specs are decoded by `spec_of`, which sets each slot itself: the very spec that
    `JobSpec(*values)` makes (equal, the same hash and repr, as frozen), and JobSpec has no
    `__post_init__` that it would skip."""
    from chronod.core.model import JobSpec, spec_of

    assert not hasattr(JobSpec, "__post_init__")
    for spec in load_file(write(tmp_path, "plain.yaml", PLAIN), now=NOW, secure=False).specs:
        values = [getattr(spec, f.name) for f in dataclasses.fields(JobSpec)]
        made, built = spec_of(values), JobSpec(*values)
        assert type(made) is JobSpec and made == built and hash(made) == hash(built) and repr(made) == repr(built)
        assert made.spec_hash() == built.spec_hash()
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.id = "other"  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_the_example_files_decode_to_exactly_their_validated_results(name, tmp_path):
    path = tmp_path / name
    shutil.copy(EXAMPLES / name, path)
    fres = load_file(path, now=NOW, secure=False)
    back = decode_result(str(path), encode_result(fres))
    assert (back.specs, back.resources, back.blackouts, back.problems) == (
        fres.specs,
        fres.resources,
        fres.blackouts,
        fres.problems,
    )


def test_a_restart_with_unchanged_files_validates_nothing_and_answers_as_a_cold_start(tmp_path, store, monkeypatch):
    write(tmp_path, "a.yaml", job("a"))
    write(tmp_path, "rich.yaml", RICH)
    write(tmp_path, "dup.yaml", job("a"))  # a duplicate id: an error every time
    first, _ = restart(store, tmp_path)
    seen = count_validations(monkeypatch)
    again, cache = restart(store, tmp_path, now=NOW + timedelta(hours=1))
    assert seen == [] and (cache.reused, cache.misses) == (3, 0)
    assert answers(again) == answers(first) == answers(cold(tmp_path))


def test_an_edited_file_is_validated_again_on_restart_and_only_that_one(tmp_path, store, monkeypatch):
    write(tmp_path, "a.yaml", job("a"))
    path = write(tmp_path, "b.yaml", job("b"))
    restart(store, tmp_path)
    path.write_text(job("b", "0 5 * * *"))
    seen = count_validations(monkeypatch)
    again, _ = restart(store, tmp_path)
    assert seen == ["b.yaml"] and again.jobs["b"].schedule == "0 5 * * *"
    assert answers(again) == answers(cold(tmp_path))
    seen.clear()
    restart(store, tmp_path)  # the edited file's new result was stored
    assert seen == []


def test_a_file_that_became_invalid_is_refused_on_restart_as_on_a_cold_start(tmp_path, store):
    write(tmp_path, "a.yaml", job("a"))
    path = write(tmp_path, "b.yaml", job("b"))
    restart(store, tmp_path)
    path.write_text(job("b").replace("idempotent", "sometimes"))
    again, _ = restart(store, tmp_path)
    assert "b" not in again.jobs and any("sometimes" in p.format() for p in again.problems)
    assert answers(again) == answers(cold(tmp_path))


def test_a_removed_file_leaves_the_store_and_its_jobs_the_registry(tmp_path, store):
    write(tmp_path, "a.yaml", job("a"))
    gone = write(tmp_path, "b.yaml", job("b"))
    restart(store, tmp_path)
    gone.unlink()
    again, _ = restart(store, tmp_path)
    assert list(again.jobs) == ["a"] and answers(again) == answers(cold(tmp_path))
    assert list(store.registry_files("n1")) == [str(tmp_path / "a.yaml")]


def test_a_stored_file_made_group_writable_is_refused_on_restart(tmp_path, store):
    path = write(tmp_path, "a.yaml", job("a"))
    assert list(restart(store, tmp_path, secure=True)[0].jobs) == ["a"]
    path.chmod(0o666)
    again, _ = restart(store, tmp_path, secure=True)
    assert again.jobs == {} and any("writable by group or others" in p.format() for p in again.problems)
    assert answers(again) == answers(cold(tmp_path, secure=True))


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_stored_file_given_to_another_owner_is_refused_on_restart_and_taken_back(tmp_path, store):
    path = write(tmp_path, "a.yaml", job("a"))
    assert list(restart(store, tmp_path, secure=True)[0].jobs) == ["a"]
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    again, _ = restart(store, tmp_path, secure=True)
    assert again.jobs == {} and any("owned by nobody" in p.format() for p in again.problems)
    assert answers(again) == answers(cold(tmp_path, secure=True))
    os.chown(path, 0, -1)
    assert list(restart(store, tmp_path, secure=True)[0].jobs) == ["a"]


def test_another_day_or_another_validator_validates_again(tmp_path, store, monkeypatch):
    write(tmp_path, "a.yaml", job("a"))
    restart(store, tmp_path)
    seen = count_validations(monkeypatch)
    restart(store, tmp_path, now=NOW + timedelta(days=1))  # DST warnings look ahead from the day
    assert seen == ["a.yaml"]
    monkeypatch.setattr(specfile, "_VALIDATOR", ["another chrono"])
    restart(store, tmp_path, now=NOW + timedelta(days=1))
    assert seen == ["a.yaml", "a.yaml"]


def test_a_stored_result_that_does_not_decode_is_validated_again(tmp_path, store):
    path = write(tmp_path, "a.yaml", job("a"))
    restart(store, tmp_path)
    [(key, _)] = store.registry_files("n1").values()
    store.set_registry_files("n1", {str(path): (key, b"not what was stored")})
    again, cache = restart(store, tmp_path)
    assert list(again.jobs) == ["a"] and (cache.reused, cache.misses) == (0, 1)
    assert answers(again) == answers(cold(tmp_path))


def test_a_reload_stores_only_the_files_that_changed(tmp_path, store, monkeypatch):
    write(tmp_path, "a.yaml", job("a"))
    path = write(tmp_path, "b.yaml", job("b"))
    cache = FileCache(StoredFiles(store, "n1", KEY))
    load_registry([tmp_path], now=NOW, secure=False, cache=cache)
    written: list[dict] = []
    real = store.set_registry_files
    monkeypatch.setattr(
        store, "set_registry_files", lambda node, files: (written.append(dict(files)), real(node, files))
    )
    load_registry([tmp_path], now=NOW, secure=False, cache=cache)
    assert written == []  # nothing changed: nothing written
    path.write_text(job("b", "0 5 * * *"))
    load_registry([tmp_path], now=NOW, secure=False, cache=cache)
    assert [list(w) for w in written] == [[str(path)]]


def test_a_result_written_to_the_database_without_the_nodes_key_is_never_run(tmp_path, store):
    """Who may write the database may pause and trigger, not change what runs: a result
    forged into `registry_files` (the right file key, another command) is validated again."""
    path = write(tmp_path, "a.yaml", job("a"))
    restart(store, tmp_path)
    [(file_key, _)] = store.registry_files("n1").values()
    (tmp_path / "elsewhere").mkdir()
    forged_file = write(tmp_path / "elsewhere", "a.yaml", job("a").replace("command: echo hi", "command: evil"))
    forged = encode_result(load_file(forged_file, now=NOW, secure=False))
    assert forged != store.registry_files("n1")[str(path)][1]
    for sealed_by in (None, StoredFiles(MemoryStore(), "n1", b"x" * 32)):
        blob = forged if sealed_by is None else sealed_by._seal(str(path), file_key, forged) + forged
        store.set_registry_files("n1", {str(path): (file_key, blob)})
        again, cache = restart(store, tmp_path)
        assert (cache.reused, cache.misses) == (0, 1)
        assert answers(again) == answers(cold(tmp_path))


def test_the_node_key_is_made_once_private_and_kept(tmp_path):
    from chronod.daemon.filestore import KEY_FILE, node_key

    key = node_key(tmp_path)
    assert len(key) == 32 and node_key(tmp_path) == key
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    (tmp_path / KEY_FILE).write_bytes(b"short")  # a crash while it was written
    assert node_key(tmp_path) not in (key, b"short") and len(node_key(tmp_path)) == 32
