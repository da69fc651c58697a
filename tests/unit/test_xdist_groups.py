"""Tests marked with one `xdist_group` run on one worker (tests/xdist_groups.py): the package
test, the real-cron tests and the tests that create users rely on it not to run at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GROUPED = """\
import os
import pytest

@pytest.mark.xdist_group("host")
@pytest.mark.parametrize("n", range(4))
def test_grouped(n, tmp_path_factory):
    out = os.environ["WITNESS"]
    with open(out, "a") as f:
        f.write(f"{__name__} {n} {os.environ['PYTEST_XDIST_WORKER']}\\n")

@pytest.mark.parametrize("n", range(4))
def test_free(n):
    pass
"""


def test_tests_of_one_group_in_two_files_run_on_one_worker(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text("from tests.xdist_groups import pytest_collection_modifyitems  # noqa\n")
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / name).write_text(GROUPED)
    witness = tmp_path / "witness"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WITNESS": str(witness)}
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    seen = [line.split() for line in witness.read_text().splitlines()]
    assert len(seen) == 8, seen
    assert len({worker for *_, worker in seen}) == 1, f"one group ran on several workers: {seen}"
