"""The console in a real browser: Debian's chromium, headless, driven by Selenium through
chromium-driver, against a real `chronoctl web` process. One browser session for the
module: sign in, the overview, a job's heat map, a running run's output following live,
a pause through the UI (and no pause offered by a read-only console). Screenshots go to
$CHRONO_SCREENSHOTS or a temporary directory, printed at the end."""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from chronod.paths import live_output
from chronod.store.sql import SqlStore
from tests.web import ledger

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
)
TOKEN = "browser-test-token-0123456789abcdef"


def start_console(db: str, token_file: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """A real `chronoctl web` on a free loopback port; returns it and its base URL."""
    chronoctl = Path(sys.executable).with_name("chronoctl")
    proc = subprocess.Popen(
        [str(chronoctl), "web", "--listen", "127.0.0.1:0", "--token-file", str(token_file), "--db", db, *extra],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 20
    line = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.5)
        if ready:
            line = proc.stderr.readline()
            m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            if m:
                return proc, f"http://127.0.0.1:{m.group(1)}"
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"chronoctl web did not start: {line}")


@pytest.fixture(scope="module")
def shots(request) -> Path:
    d = Path(os.environ.get("CHRONO_SCREENSHOTS") or (Path(os.environ.get("TMPDIR", "/tmp")) / "chrono-web-shots"))
    d.mkdir(parents=True, exist_ok=True)
    yield d
    said = f"screenshots of the web console: {d}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # shown even when output is captured (not on an xdist worker)
        reporter.write_line(said)
    else:
        print(said, file=sys.stderr)


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    d = tmp_path_factory.mktemp("browser")
    db = str(d / "chrono.db")
    state = d / "state"
    daemon = ledger.stand_in()
    ids = ledger.build(db, datetime.now(timezone.utc).replace(microsecond=0), pid=daemon.pid, live_dir=state)
    tokens = d / "tokens"
    tokens.write_text(f"alice {TOKEN}\n")
    tokens.chmod(0o600)
    acting, url = start_console(db, tokens, "--allow-actions")
    reading, ro_url = start_console(db, tokens)
    yield {"db": db, "ids": ids, "state": state, "url": url, "ro_url": ro_url}
    for p in (acting, reading, daemon):
        p.kill()
        p.wait()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--window-size=1280,1000", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")  # chromium refuses to run as root with its sandbox
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    drv = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    drv.implicitly_wait(0)
    yield drv
    drv.quit()


def wait_for(drv, check, timeout: float = 10.0, what: str = "the page"):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    # an element read while the browser replaces the page (a form's answer) is stale, and a
    # loaded host's browser may answer a read in the middle of a navigation with an error:
    # look again, until the timeout
    wait = WebDriverWait(
        drv,
        timeout,
        poll_frequency=0.1,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException, WebDriverException),
    )
    return wait.until(lambda d: check(d), message=f"waiting for {what}")


def sign_in(drv, base: str) -> None:
    from selenium.webdriver.common.by import By

    drv.get(base + "/")
    wait_for(drv, lambda d: d.find_elements(By.ID, "token"), what="the sign-in form")
    drv.find_element(By.ID, "token").send_keys(TOKEN)
    drv.find_element(By.ID, "signin").click()
    try:  # a console's first overview reads every spec: on a loaded CI host that took over 10 s
        wait_for(drv, lambda d: "Jobs" in d.find_element(By.TAG_NAME, "h1").text, timeout=45, what="the overview")
    except Exception as e:
        h1 = [h.text for h in drv.find_elements(By.TAG_NAME, "h1")]
        raise AssertionError(
            f"not signed in at {drv.current_url} ({type(e).__name__}: {e}; h1 {h1}): {drv.page_source[-1500:]}"
        ) from None


def test_overview_heat_map_live_output_and_a_pause_through_the_ui(console, browser, shots):
    from selenium.webdriver.common.by import By

    drv, base = browser, console["url"]
    sign_in(drv, base)
    links = [a.text for a in drv.find_elements(By.CSS_SELECTOR, "a.job-link")]
    assert "billing-export" in links and "metrics.rollup" in links
    assert ledger.HOSTILE_JOB in links  # shown as text, not run
    assert drv.execute_script("return window.__xss === undefined")
    drv.save_screenshot(str(shots / "overview.png"))

    drv.find_element(By.LINK_TEXT, "billing-export").click()
    wait_for(drv, lambda d: d.find_elements(By.CSS_SELECTOR, ".heatmap a.cell"), what="the heat map")
    cells = drv.find_elements(By.CSS_SELECTOR, ".heatmap a.cell")
    assert len(cells) == 90
    assert len(drv.find_elements(By.CSS_SELECTOR, ".heatmap a.cell.l-bad")) == 6  # 5 failed nights, 1 missing
    drv.save_screenshot(str(shots / "job.png"))
    drv.find_elements(By.CSS_SELECTOR, ".heatmap a.cell.l-bad")[0].click()
    wait_for(drv, lambda d: "/day/" in d.current_url, what="the day's occurrences")
    assert "failed" in drv.page_source or "missing" in drv.page_source

    # a running run's output follows live: what the run prints after the page loaded appears
    live = Path(live_output(str(console["state"]), console["ids"]["running"], 1))
    live.parent.mkdir(parents=True, exist_ok=True)
    live.write_bytes(b"starting rollup\n")
    drv.get(f"{base}/run/{console['ids']['running']}")
    pre = lambda d: d.find_element(By.ID, "live-output").text  # noqa: E731
    wait_for(drv, lambda d: "starting rollup" in pre(d), what="the live output")
    with live.open("ab") as f:
        f.write(b"<script>window.__xss=1</script> step 2 of 3\n")
    wait_for(drv, lambda d: "step 2 of 3" in pre(d), what="output printed after the page loaded")
    assert "<script>window.__xss=1</script>" in pre(drv)
    assert drv.execute_script("return window.__xss === undefined")
    drv.save_screenshot(str(shots / "run-live.png"))

    # a pause through the UI, recorded with the signed-in name
    drv.get(f"{base}/job/billing-export")
    drv.find_element(By.ID, "reason").send_keys("INC-42 ledger migration")
    drv.find_element(By.ID, "pause").click()
    wait_for(drv, lambda d: "paused by alice" in d.find_element(By.ID, "held").text, what="the pause")
    drv.save_screenshot(str(shots / "paused.png"))
    st = SqlStore(console["db"])
    try:
        row = st.get_job("billing-export")
    finally:
        st.close()
    assert row.paused and row.paused_by == "alice" and row.paused_reason == "INC-42 ledger migration"
    drv.find_element(By.ID, "resume").click()
    wait_for(drv, lambda d: "not paused" in d.find_element(By.ID, "held").text, what="the resume")

    for page in ("missed", "backfills"):
        drv.get(f"{base}/{page}?since=7d")
        wait_for(drv, lambda d: d.find_elements(By.TAG_NAME, "h1"), what=f"the {page} page")
        drv.save_screenshot(str(shots / f"{page}.png"))
    drv.get(f"{base}/missed?since=30d")
    assert "no record" in drv.page_source  # the night the nightly job has no row for

    # the read-only console offers no action (and the session of the other one is not its)
    sign_in(drv, console["ro_url"])
    drv.get(console["ro_url"] + "/job/billing-export")
    assert not drv.find_elements(By.ID, "pause") and "read-only" in drv.page_source
