"""`chronoctl report --format html`: one self-contained printable file, and (with Debian's
chromium and poppler-utils) its PDF, printed by headless chromium, has readable pages."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chronoctl.main import build_app
from tests.web import ledger

pytestmark = pytest.mark.xdist_group("web-report")  # one report for the module, made once
NOW = datetime.now(timezone.utc).replace(microsecond=0)
FROM = (NOW.date() - timedelta(days=ledger.QUARTER - 1)).isoformat()
TO = NOW.date().isoformat()


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str]:
    d = tmp_path_factory.mktemp("report")
    daemon = ledger.stand_in()
    try:
        ledger.build(str(d / "chrono.db"), NOW, pid=daemon.pid)
    finally:
        daemon.kill()
        daemon.wait()
    r = CliRunner().invoke(
        build_app("report"),
        ["report", "--tag", "audit", "--from", FROM, "--to", TO, "--format", "html", "--db", str(d / "chrono.db")],
    )
    assert r.exit_code == 0, r.output
    out = d / "report.html"
    out.write_text(r.output, encoding="utf-8")
    return out, r.output


def failed_nights() -> list[str]:
    return [(NOW.date() - timedelta(days=i)).isoformat() for i in range(ledger.QUARTER) if ledger.failed_night(i)]


def test_the_html_report_is_one_self_contained_file_with_a_header_and_a_page_per_job(report):
    _, html = report
    assert "chrono audit report" in html
    assert f"{FROM} 00:00 UTC to" in html and "chrono.db" in html and "generated" in html
    assert not re.search(r"<(script|link|img|iframe)\b", html, re.I)  # nothing to fetch, nothing to run
    assert "http://" not in html and "https://" not in html and "url(" not in html
    assert "page-break-before: always" in html
    assert html.count('<section class="job">') == 2


def test_the_html_report_lists_every_failed_night_with_its_reason_and_the_missing_one(report):
    _, html = report
    for night in failed_nights():
        assert f"{night} 02:00 UTC</td><td>failed" in html
    missing = (NOW.date() - timedelta(days=ledger.MISSING_NIGHT)).isoformat()
    assert f"{missing} 02:00 UTC</td><td>missing" in html and "MISSING: no record at all" in html
    assert "exit code 3" in html


def test_hostile_text_in_the_html_report_is_text(report):
    _, html = report
    assert "<script>" not in html and "<b>" not in html and "<i>" not in html and "\x1b" not in html
    assert "&lt;script&gt;" in html


def _pgm_is_blank(path: Path) -> bool:
    """A page image (binary PGM from `pdftoppm -gray`) with no dark pixel at all."""
    data = path.read_bytes()
    parts = data.split(maxsplit=4)  # P5, width, height, maxval, pixels
    pixels = parts[4]
    return min(pixels) > 200


@pytest.mark.skipif(
    not (shutil.which("chromium") and shutil.which("pdftoppm") and shutil.which("pdftotext")),
    reason="needs Debian's chromium and poppler-utils (apt-get install chromium poppler-utils)",
)
def test_the_report_printed_to_pdf_by_headless_chromium_has_readable_pages_with_every_failed_night(report, tmp_path):
    html_file, _ = report
    pdf = tmp_path / "report.pdf"
    home = tmp_path / "home"
    home.mkdir()
    cmd = ["chromium", "--headless", "--disable-gpu", "--no-pdf-header-footer", f"--print-to-pdf={pdf}"]
    if os.geteuid() == 0:
        cmd.append("--no-sandbox")  # chromium refuses to run as root with its sandbox
    subprocess.run(
        [*cmd, html_file.as_uri()], check=True, timeout=120, capture_output=True, env={**os.environ, "HOME": str(home)}
    )
    assert pdf.stat().st_size > 10_000
    subprocess.run(["pdftoppm", "-gray", "-r", "40", str(pdf), str(tmp_path / "page")], check=True, timeout=60)
    pages = sorted(tmp_path.glob("page-*.pgm"))
    assert len(pages) >= 2, "a page per job at least"
    assert not [p.name for p in pages if _pgm_is_blank(p)]
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], check=True, capture_output=True, text=True).stdout
    assert "chrono audit report" in text and ledger.NIGHTLY in text
    for night in failed_nights():
        assert night in text, f"the failed night {night} is not in the PDF"
    first = subprocess.run(["pdftotext", "-l", "1", str(pdf), "-"], check=True, capture_output=True, text=True).stdout
    assert ledger.NIGHTLY in first and "evil." not in first  # the second job starts on a page of its own
