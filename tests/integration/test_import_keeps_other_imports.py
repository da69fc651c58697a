"""`chronoctl import` writes one registry file per crontab, named after it or after its
user. A second crontab of the same user (`--user root` twice, or the spool file and then
`crontab -l | chronoctl import -`) was written to the same file and replaced the first
one's jobs without a word. Now the import refuses, naming both; re-importing the same
crontab still replaces its own file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.inprocess import chronoctl


def ids(reg: Path) -> list[str]:
    return sorted(
        line.split(":", 1)[1].strip()
        for f in reg.glob("*.yaml")
        for line in f.read_text().splitlines()
        if "- id:" in line
    )


def test_a_second_crontab_of_the_same_user_does_not_replace_the_first_ones_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    reg = tmp_path / "reg"
    reg.mkdir()
    one, two = tmp_path / "one.crontab", tmp_path / "two.crontab"
    one.write_text("0 1 * * * /usr/local/bin/first-job\n")
    two.write_text("0 2 * * * /usr/local/bin/second-job\n")
    first = chronoctl("import", str(one), "--user", "root", "--registry", str(reg))
    assert first.returncode == 0, first.stdout + first.stderr
    assert ids(reg) == ["root-first-job"]

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(two.read_bytes())))
    for args, stdin_note in (([str(two)], str(two)), (["-"], "<stdin>")):
        refused = chronoctl("import", *args, "--user", "root", "--registry", str(reg))
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"holds the jobs imported from {one}; importing {stdin_note} would replace them" in refused.stderr
        assert "hint:" in refused.stderr and "remove" in refused.stderr
        assert ids(reg) == ["root-first-job"]  # nothing written

    dry = chronoctl("import", str(two), "--user", "root", "--registry", str(reg), "--dry-run", "--json")
    assert dry.returncode == 1 and "would replace them" in dry.stderr

    one.write_text("0 1 * * * /usr/local/bin/first-job\n30 1 * * * /usr/local/bin/third-job\n")
    again = chronoctl("import", str(one), "--user", "root", "--registry", str(reg), "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["summary"]["written"] and ids(reg) == ["root-first-job", "root-third-job"]


def test_a_file_import_did_not_write_is_not_replaced(tmp_path: Path):
    reg = tmp_path / "reg"
    reg.mkdir()
    mine = reg / "imported-crontab-root.yaml"
    mine.write_text("jobs:\n  - id: hand-written\n    owner: ops\n    schedule: '@daily'\n    command: 'true'\n")
    src = tmp_path / "root.crontab"
    src.write_text("0 2 * * * /usr/local/bin/second-job\n")
    refused = chronoctl("import", str(src), "--user", "root", "--registry", str(reg))
    assert refused.returncode == 1 and "was not written by `chronoctl import`" in refused.stderr
    assert "hand-written" in mine.read_text()


def test_the_same_crontab_from_another_directory_is_the_same_and_another_one_of_that_name_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The header names the crontab by its absolute path: `crontab` imported in a/ and then
    a/crontab from its parent is one crontab; b/crontab, also `crontab`, is another."""
    reg = tmp_path / "reg"
    for d, cmd in (("a", "backup-a"), ("b", "cleanup-b")):
        (tmp_path / d).mkdir()
        (tmp_path / d / "crontab").write_text(f"0 1 * * * root /usr/bin/{cmd}\n")
    reg.mkdir()
    monkeypatch.chdir(tmp_path / "a")
    assert chronoctl("import", "crontab", "--format", "system", "--registry", str(reg)).returncode == 0
    assert (reg / "imported-crontab.yaml").read_text().startswith(f"# Imported from {tmp_path / 'a' / 'crontab'} by")
    monkeypatch.chdir(tmp_path)
    again = chronoctl("import", "a/crontab", "--format", "system", "--registry", str(reg))
    assert again.returncode == 0, again.stderr
    monkeypatch.chdir(tmp_path / "b")
    other = chronoctl("import", "crontab", "--format", "system", "--registry", str(reg))
    assert other.returncode == 1 and f"importing {tmp_path / 'b' / 'crontab'} would replace them" in other.stderr
    assert "backup-a" in (reg / "imported-crontab.yaml").read_text()
