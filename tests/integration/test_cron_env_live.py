"""A handful of environment-line cases run again by Debian's real cron daemon.

The replay test (tests/unit/test_cron_env_fixture.py) trusts the recorded answers; this
one checks that the daemon on this machine still gives them, and that the importer agrees,
for the cases that matter most: the bug report's file, quoted values ending in blanks,
a line cron refuses, a carriage return, a value at the length limit, cron's own SHELL,
PATH, HOME and LOGNAME against PAM's, and a setting changed part-way through a file.
Root only (a private mount namespace), about one minute.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from chronoctl.importer import cron_environment
from tests.realcron.env_cases import generate
from tests.realcron.run_env_cases import FIXTURE, run_live
from tests.unit.test_cron_env_fixture import PAM, ROOT, _parse

LIVE = [
    "k001",
    "e058",
    "e081",
    "u170",
    "h131",
    "n089",
    "r208",
    "l236",
    "s262",
    "s275",
    "s271",
    "p297",
    "p300",
    "n100",
    "m154",
]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.xdist_group("cron")  # the tests that run Debian's cron take turns
def test_debian_cron_still_gives_the_recorded_environments(debian_cron, tmp_path):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("SKIPPED THE REAL-CRON ENVIRONMENT TEST: needs root and unshare (a private mount namespace)")
    cases = [c for c in generate() if c.id in LIVE]
    assert len(cases) == len(LIVE)
    recorded = {c["id"]: c for c in json.loads(FIXTURE.read_text())["cases"]}
    live = run_live(cases, tmp_path, with_all=False)["results"]
    for case_id in LIVE:
        got, want = live[case_id], recorded[case_id]
        assert (got["file_read"], got["jobs"]) == (want["file_read"], want["jobs"]), case_id
        parsed, entries = _parse(want)
        assert (parsed.ignored_by_cron is None) == got["file_read"], case_id
        for entry, seen in zip(entries, got["jobs"]) if got["file_read"] else ():
            assert cron_environment(entry, ROOT, PAM) == seen["env"], case_id
