"""The README's on-call tour, run as written against the examples: list, did-it-run, logs
-f (interrupted, as a person would), show, edit (the editor changes the heartbeat's
schedule), and `missed --since 1h` ends the tour with exit 0. Before, `edit` cancelled the
pending occurrence of the old schedule and `missed` listed it as missed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from chronod.store.api import open_store
from tests.integration.daemon_helpers import BIN, Chronod, chronoctl, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOUR = re.compile(r"^chronoctl .*$", re.MULTILINE)
MOVED = "3-58/5 * * * * *"  # the heartbeat's schedule after the edit


def test_the_readme_tour_as_written_ends_with_missed_exiting_0(tmp_path):
    readme = (EXAMPLES.parent / "README.md").read_text()
    tour = [c.strip() for line in TOUR.findall(readme)[:2] for c in line.split(";")]
    assert tour == [
        "chronoctl list",
        "chronoctl did-it-run demo.heartbeat",
        "chronoctl logs -f demo.heartbeat",
        "chronoctl show demo.heartbeat",
        "chronoctl edit demo.heartbeat",
        "chronoctl missed --since 1h",
    ], "the README's tour changed: change this test with it"
    reg = tmp_path / "examples"
    shutil.copytree(EXAMPLES, reg)
    db = str(tmp_path / "chrono-demo.db")
    env = {"CHRONO_DB": db, "CHRONO_REGISTRY": str(reg)}
    d = Chronod(reg, db, tmp_path / "chronod.log").start()
    try:
        # waited for in the daemon's log, not by polling chronoctl: each poll is a process
        beat = re.compile(r"event=run\.finished job=demo\.heartbeat .*state=succeeded")
        wait_until(lambda: beat.search(d.log_since_start()), timeout=30, what="a heartbeat")
        # what a person does in $EDITOR: the heartbeat moves 3 s later. None of its new fires
        # is an old one (with @every 7s, one edit in seven kept the stored occurrence: 35 s)
        editor = tmp_path / "editor.sh"
        editor.write_text(f'#!/bin/sh\nsed -i \'s|schedule: "@every 5s"|schedule: "{MOVED}"|\' "$1"\n')
        editor.chmod(0o755)
        for command in tour:
            argv = command.split()[1:]
            if argv[:2] == ["logs", "-f"]:
                follow = subprocess.Popen(
                    [str(BIN / "chronoctl"), *argv],
                    stdout=subprocess.PIPE,
                    text=True,
                    env={**os.environ, **env},
                )
                assert follow.stdout is not None
                assert "chrono demo: run" in follow.stdout.readline()
                follow.send_signal(signal.SIGINT)  # Ctrl-C
                assert follow.wait(30) == 130
                continue
            if argv[0] == "missed":  # the daemon has read the edit and withdrawn the old occurrence
                wait_until(lambda: "event=registry.reloaded" in d.log_since_start(), what="the edit's reload")
            res = chronoctl(*argv, env={**env, "EDITOR": str(editor), "VISUAL": ""})
            assert res.returncode == 0, (command, res.stdout, res.stderr)
        assert MOVED in (reg / "jobs.yaml").read_text()
        store = open_store(db)
        try:
            cancelled = [r for r in store.runs("demo.heartbeat") if r.state == "cancelled"]
        finally:
            store.close()
        assert cancelled, "the edit withdrew the occurrence the old schedule had stored"
    finally:
        d.stop()
