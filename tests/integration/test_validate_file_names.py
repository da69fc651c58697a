"""`chronoctl validate FILE` on a file chronod would pass by in a registry directory (a
name with a space, a suffix other than .yaml/.yml): valid, so a CI check passed, and
copied into the registry the daemon skipped it with one line in its log. Now validate
warns, naming the rule (a warning: the file itself is valid, and `--strict` fails it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inprocess import chronoctl

JOB = (
    'jobs:\n  - id: a\n    owner: ops\n    schedule: "@daily"\n    command: "true"\n    idempotency_class: idempotent\n'
)


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("my job.yaml", "job file names may use only letters, digits"),
        ("jobs.txt", "chronod reads *.yaml and *.yml files"),
    ],
)
def test_validate_warns_of_a_file_name_chronod_skips(tmp_path: Path, name: str, rule: str):
    f = tmp_path / name
    f.write_text(JOB)
    out = chronoctl("validate", "--no-file-checks", str(f))
    assert out.returncode == 0 and "valid: 1 job, 0 errors, 1 warning" in out.stdout, out.stdout
    assert "in a registry directory chronod does not load this file" in out.stdout and rule in out.stdout
    strict = chronoctl("validate", "--no-file-checks", "--strict", str(f))
    assert strict.returncode == 1, strict.stdout
    good = tmp_path / "jobs.yaml"
    good.write_text(JOB)
    clean = chronoctl("validate", "--no-file-checks", str(good))
    assert clean.returncode == 0 and "0 warnings" in clean.stdout, clean.stdout
