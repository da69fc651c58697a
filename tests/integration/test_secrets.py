"""Secrets never in output, and a password on chronod's command line is warned about;
`chronoctl validate` run as root checks the files as the root daemon does."""

from __future__ import annotations

import os

import pytest

from chronod.daemon.main import _has_password
from chronod.store.sql import mask_url
from tests.integration.daemon_helpers import chronoctl, job, jobs_file

SECRET_URLS = [
    ("postgresql+psycopg://u:Sec@ret@host/x", ["Sec", "ret@"]),
    ("postgresql://u:a/b@c@h:5/x", ["a/b", "b@c"]),
    ("postgresql://u@h/x?password=s3cr3t&sslmode=require", ["s3cr3t"]),
    ("postgresql://u:hunter2@h/x", ["hunter2"]),
]


@pytest.mark.parametrize("url, parts", SECRET_URLS)
def test_no_part_of_a_password_is_ever_shown(url, parts, tmp_path):
    shown = mask_url(url)
    assert "***" in shown and not [p for p in parts if p in shown], shown
    res = chronoctl("status", "--db", url, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode in (2, 3), out
    assert not [p for p in parts if p in out], out


def test_a_password_with_a_raw_at_sign_is_refused_with_a_way_out():
    res = chronoctl("status", "--db", "postgresql+psycopg://u:Sec@ret@127.0.0.1/x", timeout=60)
    assert res.returncode == 3 and "%40" in res.stderr and "PGPASSWORD" in res.stderr, res.stderr


@pytest.mark.parametrize(
    "url, has",
    [
        ("postgresql://u:pw@h/x", True),
        ("postgresql://u@h/x", False),
        ("postgresql://h/x?password=p", True),
        ("/var/lib/chrono/chrono.db", False),
        ("postgresql://u@h:5432/x", False),
    ],
)
def test_chronod_knows_when_a_password_came_on_its_command_line(url, has):
    assert _has_password(url) is has


@pytest.mark.root
def test_validate_as_root_applies_the_daemons_file_checks_unless_told_not_to(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: needs root")
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    for i in range(8):
        f = reg / f"j{i}.yaml"
        f.write_text(jobs_file(job(f"j{i}", "@hourly", "true")))
        os.chmod(f, 0o666)
    res = chronoctl("validate", str(reg))
    assert res.returncode == 1 and "writable by group or others" in res.stdout + res.stderr
    assert chronoctl("validate", "--no-file-checks", str(reg)).returncode == 0
    both = chronoctl("validate", "--secure", "--no-file-checks", str(reg))
    assert both.returncode == 2
