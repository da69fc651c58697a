"""The `chrono-validate` pre-commit hook as a team wires it: a sample repository of job files
whose .pre-commit-config.yaml names this checkout (a local clone, no Git hosting involved),
once with a good job file (the commit check passes) and once with a bad one (it fails and
says file, line and what is wrong). pre-commit builds the hook's environment from this
checkout; its cache stays inside the checkout (build/pre-commit)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOOD = """\
jobs:
  - id: reports.nightly
    owner: data-team
    schedule: "@every 1h"
    command: ["/usr/bin/true"]
    idempotency_class: idempotent
"""
BAD = """\
jobs:
  - id: reports.broken
    owner: data-team
    schedule: "61 * * * *"
    command: ["/usr/bin/true"]
    idempotency_class: idempotent
"""


def _why_not() -> str | None:
    if shutil.which("git") is None:
        return "needs git"
    if importlib.util.find_spec("pre_commit") is None:
        return "needs pre-commit (the test extra installs it)"
    head = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "HEAD", ".pre-commit-hooks.yaml"], capture_output=True, text=True
    )
    if head.returncode != 0 or not head.stdout.strip():
        return "this checkout has no committed .pre-commit-hooks.yaml (pre-commit installs a commit)"
    return None


# one worker: the second test reuses the hook's environment the first built (pre-commit's cache),
# instead of holding another worker while it waits for pre-commit's lock
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("pre-commit"),
    pytest.mark.skipif(_why_not() is not None, reason=_why_not() or ""),
]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def sample(tmp_path) -> Path:
    repo = tmp_path / "fleet-jobs"
    (repo / "jobs.d").mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "ops@example.com")
    git(repo, "config", "user.name", "ops")
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {ROOT}\n    rev: {rev}\n    hooks:\n      - id: chrono-validate\n"
        f"        files: ^jobs\\.d/\n"
    )
    return repo


def pre_commit(repo: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(ROOT / "build" / "pre-commit"),
        "PRE_COMMIT_COLOR": "never",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--all-files"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_good_job_file_passes_the_hook(sample):
    (sample / "jobs.d" / "reports.yaml").write_text(GOOD)
    git(sample, "add", "-A")
    res = pre_commit(sample)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "chrono job files" in res.stdout and "Passed" in res.stdout, res.stdout


def test_a_bad_job_file_fails_the_hook_with_file_line_and_reason(sample):
    (sample / "jobs.d" / "reports.yaml").write_text(GOOD)
    (sample / "jobs.d" / "broken.yaml").write_text(BAD)
    git(sample, "add", "-A")
    res = pre_commit(sample)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Failed" in res.stdout, res.stdout
    assert "jobs.d/broken.yaml" in res.stdout and "61 is out of range" in res.stdout, res.stdout
    assert "reports.yaml" not in res.stdout.split("Failed", 1)[1], "only the bad file is reported"
