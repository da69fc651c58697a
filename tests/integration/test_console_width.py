"""Every command of chronoctl(1) on a terminal of 80 columns, on a populated database of
the examples' jobs: no line is wider than the terminal. JSON is for programs and is not
judged here.

The commands run in-process on a stream that says it is a terminal, 80 columns by
COLUMNS, as chronoctl's rendering asks both; two of them (a table and wrapped text) also
run in a real terminal (a pty made by `script`), which proves that on a real terminal the
width is found without COLUMNS, by the same code."""

from __future__ import annotations

import contextlib
import io
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from chronoctl import main as cli
from chronod.core.occurrence import run_id
from chronod.specfile import load_registry
from chronod.store.api import Run, open_store
from tests.integration.test_console_terminal import ANSI, in_terminal

pytestmark = pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) from util-linux")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("width")
    db = str(tmp / "chrono.db")
    now = datetime.now(timezone.utc)
    store = open_store(db)
    store.upgrade()
    loaded = load_registry([EXAMPLES], now=now - timedelta(days=2), secure=False)
    store.sync_jobs("vm", loaded.jobs.values())
    runs = []
    for i in range(1, 40):
        at = (now - timedelta(hours=i)).replace(minute=0, second=0, microsecond=0)
        state = ("succeeded", "failed", "skipped_overlap", "timed_out")[i % 4]
        r = Run(
            run_id("cache.refresh", at), "cache.refresh", "cache.refresh", at, at, state=state, attempts=1, node="vm"
        )
        if state != "skipped_overlap":
            r.started_at, r.finished_at = at, at + timedelta(seconds=40)
            r.exit_code = 0 if state == "succeeded" else 3
            r.output_tail = "a line of output that is quite long but not longer than a terminal\n"
            r.error = None if state == "succeeded" else f"exit code 3 after the {i}th try of a long explanation"
        runs.append(r)
    store.insert_runs(runs)
    store.set_group_pause("tag", "privacy", "INC-3141: the purge waits for the legal hold to be lifted", by="alice")
    store.close()
    return {"db": db, "runs": runs, "now": now}


def commands(demo) -> list[tuple[str, ...]]:
    reg = ("--registry", str(EXAMPLES))
    failed = next(r for r in demo["runs"] if r.state == "failed")
    return [
        ("list", *reg),
        ("status",),
        ("status", "cache.refresh"),
        ("status", "gdpr.purge-expired"),
        ("runs", "cache.refresh"),
        ("logs", failed.run_id[:8]),
        ("did-it-run", "cache.refresh"),
        ("did-it-run", "cache.refresh", "--at", failed.scheduled_at.isoformat()),
        ("did-it-run", "cache.refresh", "--since", "1d"),
        ("did-it-run", "gdpr.purge-expired"),
        ("missed", "--since", "2d"),
        ("missed", "--since", "2d", "--each"),
        ("report", "cache.refresh", "--from", (demo["now"] - timedelta(days=1)).date().isoformat(), "--to", "today"),
        ("show", "billing.nightly-export", *reg),
        ("explain", "billing.nightly-export", *reg),
        ("explain", "--cron", "*/15 9-17 * * mon-fri", "--tz", "America/New_York"),
        ("next", "billing.nightly-export", *reg),
        ("next", *reg),
        ("forecast", *reg),
        ("validate", str(EXAMPLES)),
        ("db", "check"),
        ("--help",),
        ("status", "--help"),
        ("missed", "--help"),
    ]


class Terminal(io.StringIO):
    """What chronoctl writes to, as a terminal: it asks `isatty()` and the encoding."""

    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """Run chronoctl in-process as on an 80-column terminal in New York; (code, text)."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TZ", "America/New_York")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    time.tzset()

    def run(*args: str, db: str) -> tuple[int, str]:
        monkeypatch.setenv("CHRONO_DB", db)
        out = Terminal()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = cli.main(list(args))
        return code, ANSI.sub("", out.getvalue())

    yield run
    monkeypatch.undo()
    time.tzset()


REAL = {"list", "explain"}  # run in a real terminal as well: a table and wrapped text


def test_no_command_prints_a_line_wider_than_an_80_column_terminal(demo, terminal):
    shown = [(args, *terminal(*args, db=demo["db"])) for args in commands(demo)]
    shown += [(args, *in_terminal(*args, db=demo["db"])) for args in commands(demo) if args[0] in REAL][:2]
    assert len(shown) == len(commands(demo)) + 2
    wide = {}
    for args, code, text in shown:
        assert "Traceback" not in text and code != 70, (args, text)
        over = [line for line in text.splitlines() if len(line) > 80]
        if over:
            wide[" ".join(args[:2])] = max(over, key=len)
    assert not wide, "lines wider than 80 columns:\n" + "\n".join(f"{k}: {len(v)}: {v}" for k, v in wide.items())
    out = {" ".join(args[:2]): " ".join(text.split()) for args, _, text in shown}
    # at 80 columns list keeps NEXT and OWNER, what an on-call engineer reads first
    for args, _, text in shown:
        if args[0] == "list":
            head = next(line for line in text.splitlines() if line.startswith("ID "))
            assert "NEXT" in head and "OWNER" in head, text
    # a pause of a tag shows in list, next to the job's next fire, with who and why
    assert "gdpr.purge-expired: paused until resumed (tag privacy, by alice: INC-3141" in out["list --registry"]
    # missed: one row per job with its count, designed skips apart; --each: one per occurrence
    grouped = next(" ".join(t.split()) for (a, _, t) in shown if a[0] == "missed" and "--each" not in a)
    each = next(t for (a, _, t) in shown if "--each" in a)
    assert "skipped by design" in grouped and grouped.count("cache.refresh") == 3, grouped  # missed, skips, silent
    assert each.count("skipped_overlap") >= 9


def test_an_import_dry_run_keeps_its_verdicts_on_an_80_column_terminal(tmp_path, terminal, demo, monkeypatch):
    """What the dry run is for (SAME AS CRON, ENV/STDIN/COMMAND) stays whole at 80 columns:
    it was squeezed to `S` and `y`/`n`, or left out, while the zone and the source stayed;
    now those give way first."""
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    (cron_d / "app").write_text(
        "@reboot root /usr/local/bin/warm-cache --all\n"
        "*/15 9-17 * * mon-fri root /usr/local/bin/poll-queue >/dev/null 2>&1\n"
        "30 2 * * * www-data /usr/bin/php /var/www/cron.php\n"
    )
    monkeypatch.chdir(tmp_path)  # paths short enough for a line: a path is never broken
    code, text = terminal("import", "cron.d", "--dry-run", "--registry", "reg", db=demo["db"])
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("ID "))
    assert "SAME AS CRON" in head and "ENV/STDIN/COMMAND" in head, text
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "n/a (@reboot)" in text and sum(" yes " in line for line in lines) == 2, text


def test_missed_json_tells_skips_by_design_from_the_rest(demo, monkeypatch):
    """The text lists skips of a job's own policy apart; --json counted them in `count` with
    nothing to tell them by. Each entry now says `by_design`, and `by_design_count` counts them."""
    import json

    from tests.inprocess import chronoctl

    out = chronoctl("missed", "--since", "2d", "--json", env={"CHRONO_DB": demo["db"]})
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    entries = [m for o in data["owners"] for m in o["missed"]]
    designed = [m for m in entries if m["by_design"]]
    assert data["count"] == len(entries) and data["by_design_count"] == len(designed) >= 9
    assert {m["state"] for m in designed} == {"skipped_overlap"}
    assert {m["state"] for m in entries if not m["by_design"]} >= {"failed", "timed_out"}


def test_a_timer_import_keeps_every_word_whole_on_an_80_column_terminal(tmp_path, terminal, demo, monkeypatch):
    """A timer of three OnCalendar= lines: its calendar wraps between its expressions, and
    the verdict headers stay whole (they were split as SAM/E/AS/SYS/TEM/D and ENV/ST/DIN/CO)."""
    (tmp_path / "odd.timer").write_text(
        "[Timer]\nOnCalendar=Mon..Fri *-*-* 09:30:00\nOnCalendar=Sat,Sun 12:00\nOnCalendar=*-*-01 03:00\n"
    )
    (tmp_path / "odd.service").write_text("[Service]\nExecStart=/bin/echo odd\n")
    monkeypatch.chdir(tmp_path)
    code, text = terminal("import", "odd.timer", "--dry-run", "--registry", "reg", db=demo["db"])
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("ID "))
    assert "SAME AS SYSTEMD" in head and "ENV/STDIN/COMMAND" in head, text
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "@calendar Mon..Fri" in text and "Sat,Sun 12:00;" in text
