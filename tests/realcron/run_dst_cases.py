"""Run fixed-time crontab lines through a clock change with Debian's real cron, on a fake clock.

    sudo .venv/bin/python -m tests.realcron.run_dst_cases            # print what ran
    sudo .venv/bin/python -m tests.realcron.run_dst_cases --write    # regenerate the fixture

Needs root, `unshare`, Debian's `cron` and `faketime` (apt-get install cron faketime). cron
runs in a private mount namespace, as in run_env_cases (fresh tmpfs /etc/cron.d, spool and
/run, an empty /etc/crontab), with libfaketime preloaded: its clock starts two minutes before
a zone's clock change and runs ten times faster than the real one, so a few real seconds
cover the change. Each line's job appends the real time to its own file; the fake minute
cron acted in is `start + (real - started) * speed`. The jobs themselves do not see the fake
clock, only cron does, which is all that decides when a job starts.

The fixture (tests/fixtures/cron_dst/cases.json) keeps, per case, the zone, the fake clock's
start, and for each line the local minutes in which cron started it (one entry per start).
tests/unit/test_cron_dst_fixture.py replays it against the cron simulation (vixie.py) and
chrono's engine without cron.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from tests.realcron.run_env_cases import cron_binary, cron_version

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cron_dst" / "cases.json"
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SPEED = 10  # fake seconds per real second (a fall-back case runs faster: it covers an hour and more)


@dataclass(frozen=True)
class DstCase:
    id: str
    tz: str
    start: str  # the fake clock's first local wall time, "YYYY-MM-DD HH:MM:SS"
    minutes: int  # fake minutes to run
    lines: tuple[str, ...]  # five time fields each
    speed: int = SPEED


CASES = (
    DstCase(
        "new-york-spring",
        "America/New_York",
        "2027-03-14 01:57:30",
        6,
        (
            "0,30 2 * * *",
            "30 2 * * *",
            "0 1-3 * * *",
            "15,45 2 * * *",
            "0-59/20 2 * * *",
            "59 1 * * *",
            "*/30 2 * * *",
            "0 3 * * *",
        ),
    ),
    DstCase(
        "new-york-fall",
        "America/New_York",
        "2026-11-01 01:57:30",
        66,
        ("0,30 1 * * *", "*/30 1 * * *", "59 1 * * *", "0 2 * * *"),
        speed=40,
    ),
    DstCase(
        "lord-howe-spring",
        "Australia/Lord_Howe",
        "2026-10-04 01:57:30",
        6,
        ("0,15,30,45 2 * * *", "20 2 * * *", "30 2 * * *"),
    ),
)


def _fake_start_utc(case: DstCase) -> datetime:
    wall = datetime.strptime(case.start, "%Y-%m-%d %H:%M:%S")
    return wall.replace(tzinfo=ZoneInfo(case.tz)).astimezone(UTC)


def run_case(case: DstCase, work: Path, log=print) -> dict:
    """Run cron on the fake clock through one case; {line: [local minute of each start]}."""
    cron = cron_binary()
    if cron is None or not LIBFAKETIME.exists():
        raise RuntimeError("needs Debian's cron and libfaketime: apt-get install cron faketime")
    out = work / case.id
    stage = out / "cron.d"
    stage.mkdir(parents=True)
    (out / "runs").mkdir()
    text = "".join(f"{line} root /bin/date +\\%s.\\%N >> {out}/runs/{k}\n" for k, line in enumerate(case.lines))
    (stage / "chronodst").write_text(text)
    os.chmod(stage / "chronodst", 0o644)
    empty = out / "empty-crontab"
    empty.write_text("")
    script = (
        "set -e; "
        "mount -t tmpfs -o mode=0755 chronodst /etc/cron.d; "
        f"cp {stage}/chronodst /etc/cron.d/; chmod 0644 /etc/cron.d/chronodst; "
        f"mount --bind {empty} /etc/crontab; "
        "mount -t tmpfs -o mode=1730 chronodst /var/spool/cron/crontabs; "
        "mount -t tmpfs -o mode=0755 chronodst /run; "
        f"exec env TZ={case.tz} LD_PRELOAD={LIBFAKETIME} FAKETIME='@{case.start} x{case.speed}' {cron} -f"
    )
    started = time.time()
    with open(out / "cron.log", "w") as logf:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            start_new_session=True,
        )
        try:
            deadline = started + case.minutes * 60 / case.speed
            while time.time() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"cron exited with {proc.returncode}: {(out / 'cron.log').read_text()}")
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(10)
    zone = ZoneInfo(case.tz)
    fake0 = _fake_start_utc(case)
    runs: dict[str, list[str]] = {}
    for k, line in enumerate(case.lines):
        path = out / "runs" / str(k)
        stamps = [float(s) for s in path.read_text().split()] if path.exists() else []
        fake = [fake0 + timedelta(seconds=(s - started) * case.speed) for s in stamps]
        runs[line] = [t.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z") for t in fake]
    log(f"{case.id}: {json.dumps(runs)}")
    return {
        "id": case.id,
        "tz": case.tz,
        "start": case.start,
        "minutes": case.minutes,
        "speed": case.speed,
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write the fixture ({FIXTURE})")
    parser.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: a private mount namespace and /etc/cron.d", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="chrono-crondst-"))
    try:
        results = [run_case(c, work) for c in CASES if not args.only or c.id in args.only]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "about": "When Debian's cron started fixed-time lines across clock changes, on a fake clock; "
            "regenerate with: python -m tests.realcron.run_dst_cases --write (root)",
            "cron": cron_version(),
            "cases": results,
        }
        FIXTURE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
