"""Run Debian's real anacron on a fake clock and record which jobs it starts, from which timestamps.

    .venv/bin/python -m tests.realcron.run_anacron_cases            # print what ran
    .venv/bin/python -m tests.realcron.run_anacron_cases --write    # regenerate the fixture

Needs Debian's `anacron` and `faketime` (apt-get install anacron faketime); no root, no
daemon: each case is one `anacron -d -n -s -t TAB -S SPOOL` run in a temporary directory,
its clock set by libfaketime, its spool holding the timestamps the case gives (the date each
job last started, as anacron writes them). Each job appends a line to its own file, so the
fixture (tests/fixtures/anacron/cases.json) records how many times each job started and the
timestamps anacron left. tests/unit/test_anacron_fixture.py replays it against chrono's model
of anacron (chronoctl.anacrontab.due) and the imported jobs' catch-up, without anacron.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "anacron" / "cases.json"
TAB = (("daily", "1"), ("every3", "3"), ("weekly", "7"), ("monthly", "@monthly"), ("yearly", "@yearly"))

# (id, fake "now", {job: last start as YYYYMMDD})
CASES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("never-run", "2027-03-10 09:00:00", {}),
    ("ran-yesterday", "2027-03-10 09:00:00", {"daily": "20270309", "every3": "20270309", "weekly": "20270309"}),
    ("ran-today", "2027-03-10 09:00:00", {"daily": "20270310", "weekly": "20270310", "monthly": "20270310"}),
    (
        "off-five-days",
        "2027-03-10 09:00:00",
        {"daily": "20270305", "every3": "20270305", "weekly": "20270305", "monthly": "20270305", "yearly": "20270305"},
    ),
    ("week-minus-one", "2027-03-10 09:00:00", {"weekly": "20270304", "every3": "20270308"}),
    ("week-exactly", "2027-03-10 09:00:00", {"weekly": "20270303", "every3": "20270307"}),
    ("new-month", "2027-03-01 07:30:00", {"monthly": "20270228", "daily": "20270228"}),
    ("month-after-31", "2027-04-01 07:30:00", {"monthly": "20270331"}),
    ("same-month", "2027-03-31 23:00:00", {"monthly": "20270301"}),
    ("new-year", "2027-01-01 07:30:00", {"yearly": "20261231", "monthly": "20261231"}),
    ("off-three-months", "2027-06-15 10:00:00", {"daily": "20270301", "monthly": "20270301", "weekly": "20270301"}),
    ("monthly-28-days-in-march", "2027-03-29 09:00:00", {"monthly": "20270301"}),
    ("monthly-27-days-in-march", "2027-03-28 09:00:00", {"monthly": "20270301"}),
    ("monthly-in-leap-february", "2028-02-29 09:00:00", {"monthly": "20280131"}),
    ("monthly-30-days-in-may", "2027-05-01 09:00:00", {"monthly": "20270401"}),
    ("monthly-29-days-in-april", "2027-04-30 09:00:00", {"monthly": "20270401"}),
    ("yearly-365-days", "2028-12-30 09:00:00", {"yearly": "20271231"}),
    ("yearly-364-days", "2028-12-29 09:00:00", {"yearly": "20271231"}),
)


def anacron_version() -> str:
    res = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "anacron"], capture_output=True, text=True)
    return res.stdout.strip() or "unknown"


def run_case(now: str, stamps: dict[str, str], work: Path) -> dict:
    tab, spool, out = work / "anacrontab", work / "spool", work / "out"
    spool.mkdir()
    out.mkdir()
    tab.write_text("SHELL=/bin/sh\n" + "".join(f"{period}\t0\t{job}\techo ran >> {out}/{job}\n" for job, period in TAB))
    for job, date in stamps.items():
        (spool / job).write_text(date + "\n")
    res = subprocess.run(
        [
            "faketime",
            now,
            shutil.which("anacron") or "/usr/sbin/anacron",
            "-d",
            "-n",
            "-s",
            "-t",
            str(tab),
            "-S",
            str(spool),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TZ": "UTC"},
    )
    if res.returncode != 0:
        raise RuntimeError(f"anacron failed: {res.stderr}")
    started = {job: len((out / job).read_text().split()) if (out / job).exists() else 0 for job, _ in TAB}
    after = {job: (spool / job).read_text().strip() if (spool / job).exists() else None for job, _ in TAB}
    return {"started": started, "stamps_after": after}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write the fixture ({FIXTURE})")
    args = parser.parse_args()
    if not shutil.which("faketime") or not (shutil.which("anacron") or os.path.exists("/usr/sbin/anacron")):
        print("needs anacron and faketime: apt-get install anacron faketime", file=sys.stderr)
        return 2
    results = []
    for case_id, now, stamps in CASES:
        with tempfile.TemporaryDirectory(prefix="chrono-anacron-") as tmp:
            got = run_case(now, stamps, Path(tmp))
        print(f"{case_id} at {now}: started {got['started']}")
        results.append({"id": case_id, "now": now, "stamps": stamps, **got})
    if args.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "about": "Which jobs Debian's anacron started from given timestamps, on a fake clock; "
            "regenerate with: python -m tests.realcron.run_anacron_cases --write",
            "anacron": anacron_version(),
            "anacrontab": [list(t) for t in TAB],
            "cases": results,
        }
        FIXTURE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
