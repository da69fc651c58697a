"""docs/reference.md is the contract as users read it: it names every job field, every final
state and every exit status the code has, and nothing a user sees points outside the repo."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from chronod.core import model, validate
from chronod.daemon import main as chronod_main

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "reference.md").read_text()


def section(title: str) -> str:
    start = REFERENCE.index(title)
    nxt = REFERENCE.find("\n## ", start + len(title))
    return REFERENCE[start : nxt if nxt > 0 else None]


@pytest.mark.parametrize("field", [f.name for f in validate.FIELDS])
def test_every_job_field_has_a_row_in_the_reference(field):
    assert f"| `{field}` |" in section("## Job files"), (
        f"add a row for `{field}` to the field table of docs/reference.md"
    )


@pytest.mark.parametrize("state", model.TERMINAL_STATES)
def test_every_final_state_is_explained(state):
    assert f"| `{state}` |" in section("## Run states"), f"add `{state}` to docs/reference.md's states"


def test_every_chronod_exit_status_is_in_the_reference():
    table = section("## Exit statuses").split("chronoctl:")[0]
    documented = {int(n) for n in re.findall(r"^\| (\d+) \|", table, re.M)}
    used = {v for k, v in vars(chronod_main).items() if k.startswith("EXIT_")}
    assert used <= documented, sorted(used - documented)


def test_nothing_a_user_reads_points_at_a_document_they_do_not_have():
    paths = ["README.md", "docs", "man", "chronod", "chronoctl"]
    res = subprocess.run(["grep", "-rn", r"shared/DESIGN\|§", *paths], cwd=ROOT, capture_output=True, text=True)
    assert res.stdout == "", "references to a document users do not have:\n" + res.stdout
