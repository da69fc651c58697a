"""The Debian package as a host gets it: `packaging/deb/build` from this checkout, `dpkg -i`,
the installed files, `lintian`, `systemd-analyze verify` of the installed unit, the installed
chronod started the way the unit starts it (NOTIFY_SOCKET, WATCHDOG_USEC) running a job from
/etc/chrono/jobs.d into /var/lib/chrono/chrono.db, then `dpkg -r` and `dpkg --purge` keeping
job files and history. Installs into this machine: root on Debian only (CI is both)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests import sdnotify

ROOT = Path(__file__).resolve().parents[2]
UNIT = Path("/lib/systemd/system/chronod.service")
REGISTRY = Path("/etc/chrono/jobs.d")
STATE = Path("/var/lib/chrono")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "installs a package: needs root"
    if not Path("/etc/debian_version").exists() or not shutil.which("dpkg-deb"):
        return "needs a Debian host with dpkg"
    if not Path("/usr/bin/python3.11").exists():
        return "the package runs on Debian 12's /usr/bin/python3.11, which is missing"
    if subprocess.run(["dpkg-query", "-W", "chrono"], capture_output=True).returncode == 0:
        return "a chrono package is installed on this host already; the test will not replace it"
    if Path("/etc/chrono").exists() or STATE.exists():
        return "/etc/chrono or /var/lib/chrono exists on this host; the test will not touch them"
    return None


# One worker runs the whole module (the package is built and installed once, per module).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.root,
    pytest.mark.xdist_group("dpkg"),
    pytest.mark.skipif(_why_not() is not None, reason=_why_not() or ""),
]


def sh(*argv: str, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise AssertionError(f"{shlex.join(argv)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res


@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    res = sh(str(ROOT / "packaging/deb/build"), str(out), timeout=900)
    built = Path(res.stdout.strip().splitlines()[-1])
    print(f"package built in {time.monotonic() - started:.1f} s: {built.name}, {built.stat().st_size} bytes")
    return built


@pytest.fixture(scope="module")
def installed(deb):
    try:
        sh("dpkg", "-i", str(deb))
        yield deb
    finally:
        subprocess.run(["dpkg", "--purge", "chrono"], capture_output=True)
        shutil.rmtree("/etc/chrono", ignore_errors=True)
        shutil.rmtree(STATE, ignore_errors=True)


def test_the_package_is_named_by_version_and_architecture(deb):
    version = sh("dpkg-deb", "-f", str(deb), "Version").stdout.strip()
    arch = sh("dpkg", "--print-architecture").stdout.strip()
    assert deb.name == f"chrono_{version}_{arch}.deb"
    assert version == __import__("chronod").__version__


@pytest.mark.skipif(shutil.which("lintian") is None, reason="lintian is not installed (.ci/run installs it)")
def test_lintian_finds_no_errors(deb):
    res = sh("lintian", "--tag-display-limit", "0", str(deb), check=False, timeout=900)
    errors = [line for line in res.stdout.splitlines() if line.startswith("E:")]
    assert not errors, res.stdout
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_commands_man_pages_registry_and_state_are_where_a_host_expects_them(installed):
    for cmd in ("/usr/bin/chronod", "/usr/bin/chronoctl"):
        assert os.access(cmd, os.X_OK), cmd
    assert sh("/usr/bin/chronod", "--version").stdout.strip().startswith("chronod ")
    assert UNIT.is_file()
    assert sorted(p.name for p in REGISTRY.iterdir()) == ["README"]
    schema = json.loads(Path("/etc/chrono/job-file.schema.json").read_text())
    assert schema == json.loads(sh("/usr/bin/chronoctl", "schema").stdout)
    assert STATE.is_dir()
    assert "CHRONO_DB" in Path("/etc/default/chrono").read_text()
    assert Path("/usr/share/bash-completion/completions/chronoctl").read_text().count("_chronoctl_completion") >= 1
    sh("/usr/bin/chronoctl", "validate", "/usr/share/doc/chrono/examples/jobs.yaml")
    for page in (["chronoctl"], ["8", "chronod"], ["5", "chrono-jobs"]):
        if shutil.which("man"):
            assert sh("man", "-w", *page).stdout.strip().startswith("/usr/share/man/"), page
    assert not list(Path("/opt/chrono/lib").rglob("site-packages/pip")), "no pip in the private environment"
    assert not Path("/usr/lib/python3/dist-packages/chronod").exists(), "nothing in the system Python"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (.ci/run installs systemd)"
)
def test_systemd_analyze_verify_accepts_the_installed_unit(installed):
    res = sh("systemd-analyze", "verify", str(UNIT), check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "chronod.service" not in res.stderr, res.stderr


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (.ci/run installs systemd)"
)
def test_the_web_console_unit_is_installed_valid_and_not_enabled(installed):
    web = UNIT.with_name("chrono-web.service")
    res = sh("systemd-analyze", "verify", str(web), check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "chrono-web.service" not in res.stderr, res.stderr
    assert not list(Path("/etc/systemd/system").rglob("chrono-web.service")), "the package must not enable it"


def unit_command() -> tuple[list[str], dict[str, str]]:
    """ExecStart and Environment= of the installed unit, as systemd would start it."""
    argv, env = None, {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    for line in UNIT.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "ExecStart":  # $VAR is split into words, an unset one is no word (systemd.service(5))
            argv = [w for w in shlex.split(value) if not w.startswith("$")]
        elif key == "Environment":
            for item in shlex.split(value):
                k, _, v = item.partition("=")
                env[k] = v
    assert argv, "the unit has an ExecStart"
    return argv, env


@pytest.fixture(scope="module")
def talk(installed, tmp_path_factory) -> sdnotify.Conversation:
    (REGISTRY / "nightly.yaml").write_text(
        "jobs:\n  - id: nightly\n    owner: ops\n    schedule: '0 4 * * *'\n    command: 'true'\n"
        "    idempotency_class: idempotent\n"
    )
    os.chmod(REGISTRY / "nightly.yaml", 0o644)
    argv, env = unit_command()
    tmp = tmp_path_factory.mktemp("unit")
    return sdnotify.converse(argv, env, tmp / "notify.sock", tmp / "chronod.log")


def test_the_installed_daemon_is_ready_after_its_first_load(talk):
    assert talk.messages[talk.ready][1].get("STATUS", "").startswith("1 jobs"), talk.messages
    assert Path("/var/lib/chrono/chrono.db").is_file()


def test_the_installed_ledger_is_readable_by_root_alone(talk):
    assert STATE.stat().st_mode & 0o777 == 0o700
    for name in ("chrono.db", "chrono.db-wal", "chrono.db-shm"):
        if (STATE / name).exists():
            assert (STATE / name).stat().st_mode & 0o777 == 0o600, name
    assert (STATE / "chrono.db.state").stat().st_mode & 0o777 == 0o700


def test_the_installed_idle_daemon_pings_the_watchdog_every_half_interval(talk):
    gaps = talk.watchdog_gaps()
    assert len(gaps) >= sdnotify.IDLE_INTERVALS * 2, gaps
    assert max(gaps) <= sdnotify.WATCHDOG_USEC / 2e6 + 0.5, gaps


def test_the_installed_daemon_brackets_a_reload_and_says_stopping(talk):
    assert talk.hup_at <= talk.reloading < talk.ready_again < talk.stopping
    assert talk.exit_status == 0, talk.log


def test_the_installed_daemon_runs_a_job_from_the_registry_into_var_lib_chrono(talk, tmp_path):
    (REGISTRY / "tick.yaml").write_text(
        "jobs:\n  - id: tick\n    owner: ops\n    schedule: '@every 1s'\n    command: 'echo tick'\n"
        "    idempotency_class: idempotent\n    catchup: none\n"
    )
    os.chmod(REGISTRY / "tick.yaml", 0o644)
    argv, env = unit_command()
    with open(tmp_path / "chronod.log", "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        end = time.monotonic() + 30
        runs: list = []
        while time.monotonic() < end and not any(r["state"] == "succeeded" for r in runs):
            time.sleep(0.5)
            res = sh("/usr/bin/chronoctl", "runs", "tick", "--json", check=False)
            runs = json.loads(res.stdout) if res.returncode == 0 else []
        assert any(r["state"] == "succeeded" for r in runs), (runs, (tmp_path / "chronod.log").read_text())
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def start_as_the_unit(log: Path) -> subprocess.Popen:
    argv, env = unit_command()
    with open(log, "ab") as f:
        return subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def test_an_upgrade_restarts_chronod_without_killing_a_running_job(talk, deb, tmp_path):
    # What an upgrade does on a host: dpkg replaces the files while chronod runs, then
    # postinst's try-restart stops the main process only (KillMode=process) and starts the new one.
    (REGISTRY / "tick.yaml").unlink(missing_ok=True)
    pidfile, release = tmp_path / "job.pid", tmp_path / "release"
    # The job runs until the test releases it (after the new chronod adopted it), however
    # long the upgrade takes: no fixed sleep to outlast.
    (REGISTRY / "slow.yaml").write_text(
        "jobs:\n  - id: slow\n    owner: ops\n    schedule: '@every 3s'\n"
        f"    command: 'echo $$ > {pidfile}; while [ ! -e {release} ]; do sleep 0.1; done; echo done'\n"
        "    idempotency_class: idempotent\n    catchup: none\n"
    )
    os.chmod(REGISTRY / "slow.yaml", 0o644)
    log = tmp_path / "chronod.log"
    proc = start_as_the_unit(log)
    second = None
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end and not pidfile.exists():
            time.sleep(0.2)
        assert pidfile.exists(), log.read_text()
        time.sleep(0.2)
        job_pid = int(pidfile.read_text())
        sh("dpkg", "-i", str(deb))  # the upgrade path: prerm upgrade, new files, postinst configure OLD
        proc.terminate()
        assert proc.wait(30) == 0, log.read_text()
        os.kill(job_pid, 0)  # the job outlived its daemon
        second = start_as_the_unit(log)
        end = time.monotonic() + 60
        while time.monotonic() < end and "event=run.adopted" not in log.read_text():
            time.sleep(0.2)
        adopted = re.search(r"event=run\.adopted job=slow run=(\w+)", log.read_text())
        assert adopted, log.read_text()
        os.kill(job_pid, 0)  # still the same job, adopted, not a new one
        release.touch()

        def adopted_run() -> dict | None:
            res = sh("/usr/bin/chronoctl", "runs", "slow", "--json", check=False)
            runs = json.loads(res.stdout) if res.returncode == 0 else []
            return next((r for r in runs if r["run_id"].startswith(adopted.group(1))), None)

        while time.monotonic() < end and (adopted_run() or {}).get("state") != "succeeded":
            time.sleep(0.5)
        assert (adopted_run() or {}).get("state") == "succeeded", (adopted_run(), log.read_text())
    finally:
        release.touch()  # no job left waiting when the test failed early
        for p in (proc, second):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(30)
        (REGISTRY / "slow.yaml").unlink(missing_ok=True)


def test_remove_keeps_job_files_and_history_and_purge_says_what_it_kept(talk):
    # talk (and the job test before) ran the installed daemon: a database exists now.
    sh("dpkg", "-r", "chrono")
    assert not Path("/usr/bin/chronod").exists() and not Path("/opt/chrono/bin").exists()
    assert (REGISTRY / "nightly.yaml").is_file()
    assert (STATE / "chrono.db").is_file()
    res = sh("dpkg", "--purge", "chrono")
    assert "kept" in res.stderr and str(REGISTRY) in res.stderr and str(STATE) in res.stderr, res.stderr
    assert (REGISTRY / "nightly.yaml").is_file() and (STATE / "chrono.db").is_file()
