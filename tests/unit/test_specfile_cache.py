"""Reloads skip unchanged job files by digest: same answers as a fresh load, one copy of each spec."""

from __future__ import annotations

import os
import pwd
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chronod import specfile
from chronod.specfile import FileCache, load_registry

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
JOB = """\
jobs:
  - id: {id}
    owner: team
    schedule: "0 4 * * *"
    command: echo hi
    idempotency_class: idempotent
"""


def write(directory: Path, name: str, text: str = "", job_id: str = "nightly", mode: int = 0o644) -> Path:
    path = directory / name
    path.write_text(text or JOB.format(id=job_id))
    path.chmod(mode)
    return path


def messages(result) -> list[str]:
    return [p.format() for p in result.problems]


def count_validations(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = specfile.validate_document

    def counting(doc, *, now):
        seen.append(os.path.basename(doc.file))
        return real(doc, now=now)

    monkeypatch.setattr(specfile, "validate_document", counting)
    return seen


def test_an_unchanged_file_is_not_validated_again_and_keeps_its_spec_objects(tmp_path, monkeypatch):
    write(tmp_path, "a.yaml", job_id="a")
    write(tmp_path, "b.yaml", job_id="b")
    seen = count_validations(monkeypatch)
    cache = FileCache()
    first = load_registry([tmp_path], now=NOW, secure=False, cache=cache)
    again = load_registry([tmp_path], now=NOW + timedelta(hours=1), secure=False, cache=cache)
    assert seen == ["a.yaml", "b.yaml"]
    assert again.jobs == first.jobs and sorted(again.jobs) == ["a", "b"]
    assert all(again.jobs[i] is first.jobs[i] for i in first.jobs)
    assert (cache.hits, cache.misses) == (2, 2)


def test_a_changed_file_is_validated_again_and_only_that_one(tmp_path, monkeypatch):
    write(tmp_path, "a.yaml", job_id="a")
    path = write(tmp_path, "b.yaml", job_id="b")
    cache = FileCache()
    load_registry([tmp_path], now=NOW, secure=False, cache=cache)
    seen = count_validations(monkeypatch)
    path.write_text(JOB.format(id="b").replace("0 4 * * *", "0 5 * * *"))
    again = load_registry([tmp_path], now=NOW, secure=False, cache=cache)
    assert seen == ["b.yaml"]
    assert again.jobs["b"].schedule == "0 5 * * *"


def test_a_file_with_the_same_size_and_time_but_other_bytes_is_read_again(tmp_path):
    path = write(tmp_path, "a.yaml", job_id="aa")
    cache = FileCache()
    load_registry([tmp_path], now=NOW, secure=False, cache=cache)
    st = path.stat()
    path.write_text(JOB.format(id="ab"))  # same length
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert list(load_registry([tmp_path], now=NOW, secure=False, cache=cache).jobs) == ["ab"]


def test_errors_and_duplicates_are_reported_again_on_every_load(tmp_path):
    write(tmp_path, "a.yaml", job_id="same")
    write(tmp_path, "b.yaml", job_id="same")
    write(tmp_path, "c.yaml", JOB.format(id="c").replace("idempotent", "sometimes"))
    cache = FileCache()
    fresh = [messages(load_registry([tmp_path], now=NOW, secure=False)) for _ in range(2)]
    cached = [messages(load_registry([tmp_path], now=NOW, secure=False, cache=cache)) for _ in range(3)]
    assert fresh[0] == fresh[1] == cached[0] == cached[1] == cached[2]
    assert any("already defined" in m for m in fresh[0]) and any("sometimes" in m for m in fresh[0])
    assert cache.hits == 6


def test_a_removed_file_leaves_the_cache_and_its_jobs_leave_the_registry(tmp_path):
    write(tmp_path, "a.yaml", job_id="a")
    gone = write(tmp_path, "b.yaml", job_id="b")
    cache = FileCache()
    load_registry([tmp_path], now=NOW, secure=False, cache=cache)
    gone.unlink()
    assert list(load_registry([tmp_path], now=NOW, secure=False, cache=cache).jobs) == ["a"]
    assert list(cache._results) == [str(tmp_path / "a.yaml")]


def test_the_file_checks_apply_to_an_unchanged_file_on_every_load(tmp_path):
    path = write(tmp_path, "a.yaml")
    cache = FileCache()
    assert list(load_registry([tmp_path], now=NOW, secure=True, cache=cache).jobs) == ["nightly"]
    path.chmod(0o666)
    result = load_registry([tmp_path], now=NOW, secure=True, cache=cache)
    assert result.jobs == {} and any("writable by group or others" in m for m in messages(result))


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_cached_file_given_to_another_owner_is_refused(tmp_path):
    path = write(tmp_path, "a.yaml")
    cache = FileCache()
    assert list(load_registry([tmp_path], now=NOW, secure=True, cache=cache).jobs) == ["nightly"]
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    result = load_registry([tmp_path], now=NOW, secure=True, cache=cache)
    assert result.jobs == {} and any("owned by nobody" in m for m in messages(result))


def test_a_new_day_validates_again(tmp_path, monkeypatch):
    write(tmp_path, "a.yaml")
    cache = FileCache()
    load_registry([tmp_path], now=NOW, secure=False, cache=cache)
    seen = count_validations(monkeypatch)
    load_registry([tmp_path], now=NOW + timedelta(days=1), secure=False, cache=cache)
    assert seen == ["a.yaml"]
