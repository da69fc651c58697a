"""chronoctl run inside the test's own process: what a command prints and the exit code its
process would end with, without a new interpreter importing SQLAlchemy for each call (about
a second of CPU each). For tests of what commands answer; what only a real process shows
(signals, terminals, exit by a closed pipe) is tested with real processes."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time


def chronoctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    from chronoctl.main import main

    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update({"NO_COLOR": "1", **(env or {})})
    time.tzset()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # what the console script's sys.exit would end with
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        time.tzset()
    return subprocess.CompletedProcess(["chronoctl", *args], code, out.getvalue(), err.getvalue())
