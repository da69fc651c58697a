"""No control character reaches the daemon's log raw: C0, C1, DEL and bidi controls fed
through a job file name, a key, an id and a job's output all come out escaped."""

from __future__ import annotations

import json
import re

from chronod.daemon.log import Log
from tests.integration.daemon_helpers import Chronod, job, jobs_file, wait_until, write_jobs

# one of each class: C0 (ESC, BEL, NUL-free), C1 (NEL, CSI), DEL, bidi override and isolate
CONTROLS = "\x1b[31m\x07\x85\x9b\x7f\u202e\u2066\u200f\u2028"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def test_every_field_and_name_of_a_log_line_is_escaped():
    import io

    out = io.StringIO()
    Log(out, timestamps=False)(f"ev{CONTROLS}", "error", **{f"k{CONTROLS}": f"v{CONTROLS}", "plain": CONTROLS})
    line = out.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    assert not RAW.search(line), repr(line)
    assert "\\x1b" in line and "\\u202e" in line and "\\x85" in line and "\\x7f" in line


def test_control_characters_from_files_keys_ids_and_output_never_reach_the_log_raw(tmp_path):
    reg = tmp_path / "jobs.d"
    reg.mkdir()
    db, log = str(tmp_path / "chrono.db"), tmp_path / "chronod.log"
    # a file name (skipped for its name: the daemon says so), a key, an id
    write_jobs(reg / f"bad{CONTROLS}name.yaml", jobs_file(job("named", "@every 1s", "true")))
    write_jobs(reg / "bad name$.yaml", jobs_file(job("dollar", "@every 1s", "true")))
    write_jobs(
        reg / "key.yaml",
        jobs_file(job("keyed", "@every 1s", "true")).replace(
            "    owner: team\n", f"    owner: team\n    {json.dumps('sched' + CONTROLS)}: 1\n"
        ),
    )
    write_jobs(
        reg / "id.yaml",
        jobs_file(job("placeholder", "@every 1s", "true"))
        .replace('"placeholder"', json.dumps("id" + CONTROLS))
        .replace("id: placeholder", f"id: {json.dumps('id' + CONTROLS)}"),
    )
    # job output: a failing job whose notify command complains with every class on stderr
    noisy = f"printf '{CONTROLS}' >&2; exit 1"
    write_jobs(
        reg / "out.yaml",
        jobs_file(job("noisy", "@every 1s", noisy)).replace(
            "    owner: team\n", f"    owner: team\n    notify:\n      - on: [failed]\n        command: {noisy!r}\n"
        ),
    )
    d = Chronod(reg, db, log).start()
    wait_until(lambda: "event=notify.failed" in d.log_since_start(), timeout=30, what="a failed notify command")
    d.stop()
    text = log.read_bytes().decode("utf-8", "surrogateescape")
    assert "event=registry.skipped" in text and "bad\\x1b[31m" in text
    assert 'bad name$.yaml" message=' in text  # the daemon says what it skips, as validate does
    assert text.count("event=registry.error") >= 2
    assert "sched\\x1b[31m" in text and "jobs[0].id" in text and "exited 1: \\x9b" in text
    bad = [line for line in text.splitlines() if RAW.search(line)]
    assert not bad, bad[:3]
