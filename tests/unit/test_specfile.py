"""Reading job files safely (DESIGN §9): YAML that executes nothing, and root's file checks."""

from __future__ import annotations

import os
import pwd
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from chronod.specfile import MAX_FILE_BYTES, load_file, load_registry, parse_text, skip_decision

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
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


def only_error(result) -> str:
    errs = [p for p in result.problems if p.severity == "error"]
    assert len(errs) == 1, messages(result)
    return errs[0].format()


def test_a_python_tag_executes_nothing_and_names_its_line(tmp_path):
    target = tmp_path / "pwned"
    text = f"jobs:\n  - id: x\n    owner: !!python/object/apply:os.system ['touch {target}']\n"
    doc = parse_text(text, "evil.yaml")
    assert not target.exists()
    assert doc.data is None
    problem = doc.problems[0]
    assert problem.line == 3 and "tags are not allowed (!!python/object/apply:os.system)" in problem.message


@pytest.mark.parametrize("value", ["!!binary aGVsbG8=", "!custom x", "!!str 12:30", "! x", "!!map {a: 1}"])
def test_every_explicit_tag_is_refused(value):
    doc = parse_text(f"jobs:\n  - id: x\n    owner: {value}\n", "t.yaml")
    assert doc.data is None and doc.problems[0].line == 3 and "tags are not allowed" in doc.problems[0].message


def test_anchors_and_aliases_are_refused_with_their_line():
    doc = parse_text("defaults: &base {owner: x}\njobs: []\n", "a.yaml")
    assert doc.problems[0].line == 1 and "anchors (&base)" in doc.problems[0].message
    doc = parse_text("jobs:\n  - *nothing\n", "a.yaml")
    assert doc.problems[0].line == 2 and "aliases (*nothing)" in doc.problems[0].message


def test_a_billion_laughs_alias_bomb_is_refused_in_well_under_a_second():
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    bomb = "\n".join(lines) + "\njobs: *a9\n"
    started = time.monotonic()
    doc = parse_text(bomb, "bomb.yaml")
    elapsed = time.monotonic() - started
    assert doc.data is None and "anchors (&a0)" in doc.problems[0].message
    assert elapsed < 1.0  # a safety property: expansion would take minutes and gigabytes


def test_duplicate_keys_are_errors_naming_both_lines():
    doc = parse_text(JOB.format(id="x") + "    owner: other\n", "d.yaml")
    (problem,) = doc.problems
    assert problem.line == 7 and problem.path == "jobs[0].owner"
    assert "duplicate key 'owner': first given at line 3" in problem.message
    assert doc.data["jobs"][0]["owner"] == "team"


def test_keys_are_kept_as_written_so_on_and_no_stay_strings():
    doc = parse_text("jobs:\n  - notify: [{on: [failed]}]\n    no: 1\n", "k.yaml")
    item = doc.data["jobs"][0]
    assert item["notify"][0]["on"] == ["failed"] and item["no"] == 1


def test_unquoted_scalars_yaml_reads_as_non_strings_keep_their_raw_text():
    doc = parse_text("jobs:\n  - schedule: 12:30\n    user: no\n    owner: 'no'\n", "r.yaml")
    assert doc.data["jobs"][0] == {"schedule": 750, "user": False, "owner": "no"}
    assert doc.plain == {"jobs[0].schedule": "12:30", "jobs[0].user": "no"}
    assert doc.lines["jobs[0].user"] == 3


def test_schedule_1230_and_user_no_are_errors_telling_to_quote_them(tmp_path):
    path = write(tmp_path, "j.yaml", JOB.format(id="x").replace('"0 4 * * *"', "12:30") + "    user: no\n")
    result = load_file(path, now=NOW, secure=False)
    text = "\n".join(messages(result))
    assert (
        "j.yaml:4: error: job 'x': schedule: must be a string, but YAML reads the unquoted 12:30 as the base-60 number 750 (hint: quote it: schedule: \"12:30\")"
        in text
    )
    assert (
        "j.yaml:7: error: job 'x': user: must be a string, but YAML reads the unquoted no as the boolean false" in text
    )
    assert result.specs == ()


def test_files_over_the_size_cap_are_refused_before_parsing(tmp_path, monkeypatch):
    import yaml

    monkeypatch.setattr(yaml, "parse", lambda *a, **k: pytest.fail("parsed a file over the cap"))
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * MAX_FILE_BYTES + "\n")
    assert f"job files are limited to {MAX_FILE_BYTES} bytes" in only_error(load_file(path, now=NOW, secure=False))


def test_deep_nesting_and_syntax_errors_are_refused_with_a_line():
    assert "nested more than" in parse_text("jobs: " + "[" * 100 + "]" * 100 + "\n", "n.yaml").problems[0].message
    problem = parse_text("jobs:\n  - id: x\n   owner: y\n", "s.yaml").problems[0]
    assert problem.line == 3 and problem.message.startswith("YAML syntax")


def test_an_unclosed_quote_is_pointed_at_where_it_opens_not_past_the_end_of_the_file():
    """PyYAML finds an unclosed quote at the end of the file (line 5 of a 4-line file): the
    error pointed there and dropped where the quote opened."""
    problem = parse_text('jobs:\n  - id: a\n    schedule: "0 * * * *\n    command: x\n', "q.yaml").problems[0]
    assert problem.line == 3, problem
    assert "at the end of the file, while scanning a quoted scalar that began at line 3, column 15" in problem.message
    bad = parse_text("jobs:\n  - id: a\n    owner: x\n   schedule: y", "e.yaml").problems[0]
    assert bad.line == 4 and "at line 4, column 4" in bad.message  # never past the last line


def test_non_utf8_files_are_refused(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"jobs: []\n# caf\xe9\n")
    assert "not UTF-8" in only_error(load_file(path, now=NOW, secure=False))


# --- the registry ------------------------------------------------------------------------


def test_a_directory_loads_yaml_and_yml_files_in_name_order(tmp_path):
    write(tmp_path, "b.yml", job_id="two")
    write(tmp_path, "a.yaml", job_id="one")
    write(tmp_path, "README.md", "not a job file")
    result = load_registry([tmp_path], now=NOW, secure=True)
    assert list(result.files) == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yml")]
    assert sorted(result.jobs) == ["one", "two"] and result.ok


def test_a_single_path_is_accepted_as_well_as_a_list(tmp_path):
    assert list(load_registry(write(tmp_path, "a.yaml"), now=NOW, secure=False).jobs) == ["nightly"]


def test_ids_are_unique_across_files_and_the_error_names_both(tmp_path):
    write(tmp_path, "a.yaml", job_id="same")
    write(tmp_path, "b.yaml", job_id="same")
    result = load_registry([tmp_path], now=NOW, secure=False)
    assert result.jobs["same"].source_file == str(tmp_path / "a.yaml")
    problem = only_error(result)
    assert (
        problem
        == f"{tmp_path}/b.yaml:2: error: job 'same': id: id 'same' is already defined at {tmp_path}/a.yaml:2 (hint: ids are unique across the registry; rename one of the two)"
    )
    assert not result.files[str(tmp_path / "b.yaml")].ok


def test_a_bad_file_keeps_its_good_jobs_but_is_marked_not_ok(tmp_path):
    write(tmp_path, "good.yaml", job_id="good")
    write(
        tmp_path,
        "mixed.yaml",
        JOB.format(id="fine") + JOB.format(id="broken").replace("jobs:\n", "").replace("echo hi", "[]"),
    )
    result = load_registry([tmp_path], now=NOW, secure=False)
    mixed = result.files[str(tmp_path / "mixed.yaml")]
    assert not mixed.ok and [s.id for s in mixed.specs] == ["fine"]
    assert result.files[str(tmp_path / "good.yaml")].ok and sorted(result.jobs) == ["fine", "good"]


def test_a_missing_path_is_an_error_naming_it(tmp_path):
    result = load_registry([tmp_path / "nope"], now=NOW, secure=False)
    assert only_error(result) == f"{tmp_path}/nope: error: no such file or directory"


@pytest.mark.parametrize(
    "name",
    [
        ".hidden.yaml",
        "jobs.yaml~",
        "jobs.yaml.dpkg-old",
        "jobs.yaml.dpkg-new",
        "jobs.yaml.dpkg-dist",
        "jobs.yaml.rpmnew",
        "jobs.yaml.rpmsave",
        "jobs.yaml.ucf-dist",
        "jobs.yaml.swp",
        "jobs.yaml.bak",
        "jobs.yaml.orig",
        "notes.txt",
    ],
)
def test_dotfiles_backups_and_package_leftovers_are_skipped_silently(tmp_path, name):
    write(tmp_path, name)
    result = load_registry([tmp_path], now=NOW, secure=True)
    assert result.files == {} and result.jobs == {} and result.problems == []
    assert skip_decision(name) == (False, "")


def test_a_yaml_file_with_characters_outside_the_name_set_is_skipped_with_a_warning(tmp_path):
    write(tmp_path, "my jobs.yaml")
    result = load_registry([tmp_path], now=NOW, secure=True)
    assert result.jobs == {} and [p.severity for p in result.problems] == ["warning"]
    assert "my jobs.yaml" in result.problems[0].file


def test_secure_mode_refuses_a_symbolic_link(tmp_path):
    registry = tmp_path / "jobs.d"
    registry.mkdir()
    real = write(tmp_path, "outside.yaml")
    (registry / "linked.yaml").symlink_to(real)
    result = load_registry([registry], now=NOW, secure=True)
    assert result.jobs == {}
    assert "linked.yaml: error: is a symbolic link" in only_error(result)
    assert list(load_registry([registry], now=NOW, secure=False).jobs) == ["nightly"]


@pytest.mark.parametrize("mode, shown", [(0o664, "0664"), (0o646, "0646")])
def test_secure_mode_refuses_group_or_world_writable_files(tmp_path, mode, shown):
    write(tmp_path, "w.yaml", mode=mode)
    result = load_registry([tmp_path], now=NOW, secure=True)
    assert result.jobs == {} and f"is writable by group or others (mode {shown})" in only_error(result)


def test_secure_mode_refuses_a_file_with_more_than_one_hard_link(tmp_path):
    registry = tmp_path / "jobs.d"
    registry.mkdir()
    path = write(registry, "a.yaml")
    os.link(path, tmp_path / "elsewhere.yaml")
    result = load_registry([registry], now=NOW, secure=True)
    assert result.jobs == {} and "has 2 hard links" in only_error(result)


def _nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' on this host")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_secure_mode_refuses_a_file_owned_by_another_user_whose_jobs_run_as_root(tmp_path):
    nobody = _nobody()
    path = write(tmp_path, "theirs.yaml")
    os.chown(path, nobody.pw_uid, -1)
    result = load_registry([tmp_path], now=NOW, secure=True)
    assert result.jobs == {}
    assert f"the file is owned by {nobody.pw_name}, not root, but the job runs as the daemon user" in only_error(result)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_secure_mode_accepts_a_file_owned_by_the_user_its_jobs_run_as(tmp_path):
    nobody = _nobody()
    path = write(tmp_path, "theirs.yaml", JOB.format(id="mine") + f"    user: {nobody.pw_name}\n")
    os.chown(path, nobody.pw_uid, -1)
    result = load_registry([tmp_path], now=NOW, secure=True)
    assert result.ok and list(result.jobs) == ["mine"]


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.yaml")
    result = load_registry([tmp_path], now=NOW, secure=True)
    assert "is not a regular file" in only_error(result)


def test_resources_with_one_name_must_agree_across_files(tmp_path):
    res = "resources:\n  db: {max_concurrency: %d}\n"
    write(tmp_path, "a.yaml", res % 1 + JOB.format(id="a"))
    write(tmp_path, "b.yaml", res % 2 + JOB.format(id="b"))
    result = load_registry([tmp_path], now=NOW, secure=False)
    assert "resource 'db' has max_concurrency 2 here but 1 in another file" in only_error(result)
    assert result.resources["db"].max_concurrency == 1


def test_of_two_files_defining_an_id_the_newer_one_is_the_duplicate(tmp_path):
    write(tmp_path, "a.yaml", job_id="same")
    write(tmp_path, "a-copy.yaml", job_id="same")  # `cp a.yaml a-copy.yaml`: sorts first, is newer
    os.utime(tmp_path / "a.yaml", ns=(1_000_000_000, 1_000_000_000))
    result = load_registry([tmp_path], now=NOW, secure=False)
    assert result.jobs["same"].source_file == str(tmp_path / "a.yaml")
    assert only_error(result).startswith(
        f"{tmp_path}/a-copy.yaml:2: error: job 'same': id: id 'same' is already defined at {tmp_path}/a.yaml:2"
    )
