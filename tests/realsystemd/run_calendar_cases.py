"""Ask systemd for the elapses of every OnCalendar= expression of calendar_cases.py.

    .venv/bin/python -m tests.realsystemd.run_calendar_cases            # compare with chrono
    .venv/bin/python -m tests.realsystemd.run_calendar_cases --write    # regenerate the fixture

Needs Debian's `systemd-analyze` (systemd 252; PID 1 need not be systemd: `systemd-analyze
calendar` works offline). Each expression is run in three zones (UTC, America/New_York and
Australia/Lord_Howe, whose clock moves by half an hour) from several base times: the start of
2026, a day before each clock change of 2027, inside a repeated hour, and mid-2031; systemd
lists the next elapses (`--iterations`), chained fire by fire from the base. The fixture
(tests/fixtures/systemd_calendar/cases.json) keeps, per expression, zone and base, the UTC
elapses as seconds after the base; tests/unit/test_calendar_fixture.py replays it without
systemd. Expressions systemd refuses are recorded too: chrono must refuse them as well.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from tests.realsystemd.calendar_cases import CHRONO_REFUSES, INVALID, generate

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "systemd_calendar" / "cases.json"

# (zone, base time as UTC, iterations)
RUNS: tuple[tuple[str, str, int], ...] = (
    ("UTC", "2026-01-01 00:00:00", 12),
    ("UTC", "2031-06-01 00:00:00", 4),
    ("America/New_York", "2026-01-01 00:00:00", 12),
    ("America/New_York", "2027-03-13 12:00:00", 8),  # spring forward 2027-03-14 07:00Z
    ("America/New_York", "2027-11-06 12:00:00", 8),  # fall back 2027-11-07 06:00Z
    ("America/New_York", "2027-11-07 06:10:00", 4),  # inside the repeated hour's second pass
    ("America/New_York", "2031-06-01 00:00:00", 4),
    ("Australia/Lord_Howe", "2026-01-01 00:00:00", 12),
    ("Australia/Lord_Howe", "2027-04-03 12:00:00", 8),  # back half an hour 2027-04-03 15:00Z
    ("Australia/Lord_Howe", "2027-10-02 12:00:00", 8),  # forward half an hour 2027-10-02 15:30Z
)


def systemd_version() -> str:
    out = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True, check=False).stdout
    return out.split("\n", 1)[0].strip()


def _stamp(line: str) -> int:
    """'... Fri 2027-01-01 01:30:00 UTC' -> epoch seconds."""
    words = line.split()
    at = datetime.strptime(" ".join(words[-3:-1]), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    assert words[-1] == "UTC", line
    return int(at.timestamp())


def elapses(expressions: list[str], zone: str, base: str, iterations: int) -> dict[str, list[int]]:
    """{expression: [UTC epoch seconds of each elapse]} from one systemd-analyze run."""
    res = subprocess.run(
        ["systemd-analyze", "calendar", f"--iterations={iterations}", f"--base-time={base} UTC", *expressions],
        capture_output=True,
        text=True,
        env={**os.environ, "TZ": zone, "SYSTEMD_COLORS": "0", "LC_ALL": "C"},
        check=False,
    )
    out: dict[str, list[int]] = {}
    blocks = res.stdout.split("Normalized form: ")[1:]  # "Original form" only when it differs
    for expr, block in zip(expressions, blocks):
        lines = block.split("\n")
        found: list[int] = []
        for i, line in enumerate(lines):
            text = line.strip()
            if text.startswith(("Next elapse:", "Iter. #")) and "never" not in text:
                nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
                found.append(_stamp(nxt if nxt.startswith("(in UTC):") else text))
        out[expr] = found
    if len(out) != len(expressions) or "Failed to determine next elapse" in res.stderr:
        # systemd gave up on some expression ("Infinite loop in calendar calculation"): ask
        # one by one, and mark where each one stopped
        return {e: _one(e, zone, base, iterations) for e in expressions}
    return out


STUCK = -1  # after the elapses listed, systemd's search gave up (the timer stops)


def encode(base: int, elapses: list[int] | None) -> list[int] | None:
    """Elapses as seconds after the one before (the first after the base): small numbers that
    repeat, so the fixture stays small. STUCK stays STUCK; None (refused) stays None."""
    if elapses is None:
        return None
    out, before = [], base
    for t in elapses:
        if t == STUCK:
            out.append(STUCK)
            break
        out.append(t - before)
        before = t
    return out


def decode(base: int, steps: list[int]) -> list[int]:
    """encode's inverse: UTC epoch seconds (and STUCK)."""
    out, at = [], base
    for step in steps:
        if step == STUCK:
            out.append(STUCK)
            break
        at += step
        out.append(at)
    return out


def _one(expr: str, zone: str, base: str, iterations: int) -> list[int]:
    found: list[int] = []
    for n in range(1, iterations + 1):
        res = subprocess.run(
            ["systemd-analyze", "calendar", f"--iterations={n}", f"--base-time={base} UTC", expr],
            capture_output=True,
            text=True,
            env={**os.environ, "TZ": zone, "SYSTEMD_COLORS": "0", "LC_ALL": "C"},
            check=False,
        )
        if "Failed to determine next elapse" in res.stderr:
            return found + [STUCK]
        found = elapses([expr], zone, base, n)[expr]
        if len(found) < n:
            return found
    return found


def refused(expr: str, zone: str = "America/New_York") -> bool:
    res = subprocess.run(
        ["systemd-analyze", "calendar", expr], capture_output=True, text=True, env={**os.environ, "TZ": zone}
    )
    return res.returncode != 0


def run() -> dict:
    expressions = generate()
    bad = [e for e in expressions if refused(e)]
    if bad:
        raise RuntimeError(f"systemd refuses expressions meant to be valid: {bad}")
    # a zone's own abbreviation (EST, EDT) is an expression's zone only there: elsewhere
    # systemd refuses it ("t": null), and so must chrono
    valid = {zone: [e for e in expressions if not refused(e, zone)] for zone in {z for z, _, _ in RUNS}}
    cases = []
    for zone, base, iterations in RUNS:
        base_s = int(datetime.strptime(base, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp())
        got = elapses(valid[zone], zone, base, iterations)
        for expr in expressions:
            cases.append({"e": expr, "z": zone, "b": base_s, "n": iterations, "t": encode(base_s, got.get(expr))})
    return {
        "systemd": systemd_version(),
        "expressions": len(expressions),
        "cases": cases,
        "refused": {e: refused(e) for e in INVALID + CHRONO_REFUSES},
    }


def compare(doc: dict) -> list[str]:
    """Where chrono's elapses differ from the fixture's (empty: every one matches)."""
    from chronod.core.calendar import CalendarError, CalendarStuck, next_elapse, parse_calendar

    wrong = []
    for case in doc["cases"]:
        base = datetime.fromtimestamp(case["b"], UTC)
        ours: list[int] = []
        try:
            spec = parse_calendar(case["e"], case["z"])
        except CalendarError as exc:
            if case["t"] is not None:
                wrong.append(f"{case['e']!r} in {case['z']}: chrono refuses it ({exc.message})")
            continue
        if case["t"] is None:
            wrong.append(f"{case['e']!r} in {case['z']}: systemd refuses it, chrono does not")
            continue
        t: datetime | None = base
        while t is not None and len(ours) < case["n"]:
            try:
                t = next_elapse(spec, t, case["z"])
            except CalendarStuck:
                ours.append(STUCK)
                break
            if t is not None:
                ours.append(int(t.timestamp()))
        theirs = decode(case["b"], case["t"])
        if ours != theirs:
            wrong.append(f"{case['e']!r} in {case['z']} from {base:%Y-%m-%d %H:%M}Z: systemd {theirs}, chrono {ours}")
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write the fixture ({FIXTURE})")
    args = parser.parse_args()
    doc = run()
    wrong = compare(doc)
    print(f"{doc['expressions']} expressions, {len(doc['cases'])} cases, {len(wrong)} differ from chrono")
    for line in wrong[:40]:
        print("  " + line)
    if args.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        header = {k: v for k, v in doc.items() if k != "cases"}
        header["about"] = (
            "systemd-analyze calendar's elapses (UTC seconds after the elapse before, the first after the base; "
            "-1: systemd gave up) per OnCalendar= expression, zone "
            "and base; regenerate with: python -m tests.realsystemd.run_calendar_cases --write"
        )
        lines = [json.dumps(c, separators=(",", ":")) for c in doc["cases"]]
        FIXTURE.write_text(json.dumps(header, indent=1)[:-2] + ',\n "cases": [\n' + ",\n".join(lines) + "\n ]\n}\n")
        print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
