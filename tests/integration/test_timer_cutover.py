"""`chronoctl import X.timer --cutover` and `--rollback X.timer` against a real chronod and the
real `systemctl`. PID 1 is not systemd on the machines these tests run on, so systemctl works
on unit files only (`systemctl --root=DIR`, through CHRONO_SYSTEMD_ROOT): the test checks that
the timer's timers.target.wants link goes at the cutover and comes back at the rollback, and
that chronod takes the job and gives it back. Stopping and starting the timer itself
(`--now`) needs a running systemd and is not exercised here."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import Chronod, chronoctl, wait_until

pytestmark = pytest.mark.skipif(shutil.which("systemctl") is None, reason="needs systemctl (apt-get install systemd)")

TIMER = "[Unit]\nDescription=chrono cutover test\n[Timer]\nOnCalendar=hourly\nPersistent=true\n[Install]\nWantedBy=timers.target\n"
SERVICE = "[Service]\nType=oneshot\nExecStart=/bin/true\n"


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "root"
    units = root / "lib/systemd/system"
    units.mkdir(parents=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    (units / "chronocut.timer").write_text(TIMER)
    (units / "chronocut.service").write_text(SERVICE)
    subprocess.run(["systemctl", f"--root={root}", "enable", "chronocut.timer"], check=True, capture_output=True)
    registry = tmp_path / "jobs.d"
    registry.mkdir()
    db = str(tmp_path / "chrono.db")
    daemon = Chronod(registry, db, tmp_path / "chronod.log").start()
    yield {"root": root, "timer": units / "chronocut.timer", "registry": registry, "db": db}
    daemon.stop()


def _link(root: Path) -> Path:
    return root / "etc/systemd/system/timers.target.wants/chronocut.timer"


def _jobs(db: str) -> list[str]:
    res = chronoctl("list", "--json", "--registry", "/nonexistent", db=db, check=True)
    return [j["job_id"] for j in json.loads(res.stdout)["jobs"]]


def test_a_timer_cut_over_and_rolled_back_with_systemctl(site):
    root, timer, registry, db = site["root"], site["timer"], site["registry"], site["db"]
    env = {"CHRONO_SYSTEMD_ROOT": str(root)}
    assert _link(root).is_symlink()

    res = chronoctl("import", str(timer), "--cutover", "--json", "--registry", str(registry), db=db, env=env)
    assert res.returncode == 0, res.stderr + res.stdout
    doc = json.loads(res.stdout)
    assert doc["cutover"]["was_enabled"] is True and "for the next boot" in doc["cutover"]["systemctl"]
    assert not _link(root).exists()  # systemctl disabled it
    assert "chronocut" in _jobs(db)
    text = (registry / "imported-systemd-chronocut.yaml").read_text()
    assert "was enabled before the cutover" in text and "@calendar hourly" in text

    res = chronoctl("import", "--rollback", str(timer), "--json", "--registry", str(registry), db=db, env=env)
    assert res.returncode == 0, res.stderr + res.stdout
    assert _link(root).is_symlink()  # enabled again
    assert not (registry / "imported-systemd-chronocut.yaml").exists()
    wait_until(lambda: "chronocut" not in _jobs(db), what="chronod dropped the job")


def test_a_cutover_without_chronod_changes_nothing(tmp_path, site):
    root, timer = site["root"], site["timer"]
    res = chronoctl(
        "import",
        str(timer),
        "--cutover",
        "--registry",
        str(tmp_path / "other"),
        db=str(tmp_path / "none.db"),
        env={"CHRONO_SYSTEMD_ROOT": str(root)},
    )
    assert res.returncode == 3, res.stderr + res.stdout
    assert _link(root).is_symlink()
