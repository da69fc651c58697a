"""`chronoctl import --cutover` and `--rollback` against a real chronod, and once against
Debian's real cron daemon: across the switch, a minutely job runs every minute exactly once.

The switch waits for second 5-45 of a minute, so each cutover or rollback here can take
up to twenty seconds: every test that switches is marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import Chronod, chronoctl, wait_until

CRONTAB = (
    "SHELL=/bin/sh\n"
    'MAILTO=""\n'
    "# the witness: which daemon ran which minute\n"
    '* * * * * root W=${{CHRONO_RUN_ID:+chrono}}; echo "$(date -u +\\%Y-\\%m-\\%dT\\%H:\\%M) ${{W:-cron}}" >> {witness}\n'
    "#0 5 * * * root /usr/bin/old-report\n"
    "17 3 * * * root /usr/local/bin/nightly --all\r\n"
    "@reboot root /usr/local/bin/warm-cache\n"  # without it Debian's cron would ignore the whole file
)


def _import(*args: str, registry: Path, db: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return chronoctl("import", *args, "--registry", str(registry), "--db", db, timeout=timeout)


@pytest.fixture
def site(tmp_path):
    """A registry, a database, a crontab and a running chronod on them."""
    registry = tmp_path / "jobs.d"
    registry.mkdir(mode=0o755)
    db = str(tmp_path / "chrono.db")
    crontab = tmp_path / "crontab"
    crontab.write_bytes(CRONTAB.format(witness=tmp_path / "witness").encode())
    os.chmod(crontab, 0o640)
    if os.geteuid() == 0:
        os.chown(crontab, 65534, 65534)  # a spool file belongs to its user: the rewrite must keep that
    daemon = Chronod(registry, db, tmp_path / "chronod.log").start()
    yield {"registry": registry, "db": db, "crontab": crontab, "daemon": daemon, "tmp": tmp_path}
    daemon.stop()


def _registered(db: str) -> dict:
    res = chronoctl("list", "--json", "--registry", "/nonexistent", db=db, check=True)
    return {j["job_id"]: j for j in json.loads(res.stdout)["jobs"]}


@pytest.mark.slow
def test_cutover_registers_then_comments_out_and_a_rollback_restores_byte_for_byte(site):
    crontab, registry, db = site["crontab"], site["registry"], site["db"]
    original = crontab.read_bytes()
    before = os.stat(crontab)
    owned = (before.st_mode, before.st_uid, before.st_gid)

    res = _import(str(crontab), "--format", "system", "--cutover", "--json", registry=registry, db=db)
    assert res.returncode == 0, res.stderr + res.stdout
    doc = json.loads(res.stdout)
    switch = doc["cutover"]["switch"]
    assert co_second(switch) >= 5 and co_second(switch) < 55, switch
    ids = sorted(j["id"] for j in doc["jobs"])
    assert len(ids) == 3

    text = crontab.read_bytes().decode()
    for job in doc["jobs"]:
        assert f"# chrono: migrated to {job['id']}\n" in text or f"# chrono: migrated to {job['id']}\r\n" in text
    assert "\n#* * * * * root W=" in text and "\n#17 3 * * * root /usr/local/bin/nightly --all\r\n" in text
    assert text.endswith("\n#@reboot root /usr/local/bin/warm-cache\n")
    assert "#0 5 * * * root /usr/bin/old-report\n" in text  # a disabled line stays as it was
    assert Path(str(crontab) + ".chrono-backup").read_bytes() == original
    assert _owned(crontab) == owned

    files = list(registry.glob("imported-*.yaml"))
    assert len(files) == 1
    assert sorted(_registered(db)) == ids
    minutely = next(j["id"] for j in doc["jobs"] if j["schedule"] == "* * * * *")
    first = datetime.fromisoformat(switch["chrono_first"][minutely])
    assert first == datetime.fromisoformat(switch["minute"]) + timedelta(minutes=1)

    again = _import(str(crontab), "--format", "system", "--cutover", registry=registry, db=db)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "already migrated" in again.stdout
    assert crontab.read_bytes().decode() == text

    back = _import("--rollback", str(crontab), registry=registry, db=db)
    assert back.returncode == 0, back.stderr + back.stdout
    assert crontab.read_bytes() == original
    assert _owned(crontab) == owned
    assert not Path(str(crontab) + ".chrono-backup").exists()
    assert not list(registry.glob("imported-*.yaml"))
    assert _registered(db) == {}

    twice = _import("--rollback", str(crontab), registry=registry, db=db)
    assert twice.returncode == 0, twice.stderr + twice.stdout
    assert "nothing to roll back" in twice.stdout
    assert crontab.read_bytes() == original


def _owned(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_mode, st.st_uid, st.st_gid


def co_second(switch: dict) -> float:
    return switch["second_of_minute"]


def _cutover_without_a_daemon(tmp_path, text: str):
    """A cutover of `text` with no chronod and no database: (result, crontab, registry)."""
    registry = tmp_path / "jobs.d"
    crontab = tmp_path / "crontab"
    crontab.write_text(text)
    res = _import(str(crontab), "--format", "system", "--cutover", registry=registry, db=str(tmp_path / "none.db"))
    return res, crontab, registry


def test_cutover_without_a_database_refuses_and_changes_nothing(tmp_path):
    res, crontab, registry = _cutover_without_a_daemon(tmp_path, "* * * * * root /usr/bin/true\n")
    assert res.returncode == 3, res.stderr + res.stdout
    assert "cron must not stop before chronod runs" in res.stderr
    assert crontab.read_text() == "* * * * * root /usr/bin/true\n"
    assert not Path(str(crontab) + ".chrono-backup").exists()
    assert not registry.exists() or not list(registry.iterdir())


def test_cutover_with_chronod_stopped_refuses_and_changes_nothing(tmp_path):
    registry = tmp_path / "jobs.d"
    registry.mkdir(mode=0o755)
    db = str(tmp_path / "chrono.db")
    Chronod(registry, db, tmp_path / "chronod.log").start().stop()
    crontab = tmp_path / "crontab"
    crontab.write_text("* * * * * root /usr/bin/true\n")
    res = _import(str(crontab), "--format", "system", "--cutover", registry=registry, db=db)
    assert res.returncode == 3, res.stderr + res.stdout
    assert "no chronod is running" in res.stderr
    assert crontab.read_text() == "* * * * * root /usr/bin/true\n"
    assert not Path(str(crontab) + ".chrono-backup").exists()
    assert list(registry.iterdir()) == []


def test_rollback_without_a_daemon_restores_at_once_and_removes_the_imported_file(tmp_path):
    from chronoctl import cutover as co

    registry = tmp_path / "jobs.d"
    registry.mkdir()
    crontab = tmp_path / "crontab"
    original = b"MAILTO=ops\n*/5 * * * * root /usr/bin/true\n"
    co.backup_path(crontab).write_bytes(original)
    crontab.write_bytes(co.comment_out(original, {2: "root-true"}))
    imported = registry / "imported-tmp-crontab.yaml"
    imported.write_text(co.registry_header(str(crontab)) + "\njobs:\n  - id: root-true\n")
    other = registry / "billing.yaml"
    other.write_text("jobs: []\n")
    res = _import("--rollback", str(crontab), registry=registry, db=str(tmp_path / "none.db"))
    assert res.returncode == 0, res.stderr + res.stdout
    assert crontab.read_bytes() == original
    assert sorted(p.name for p in registry.iterdir()) == ["billing.yaml"]
    assert not co.backup_path(crontab).exists()
    assert "no chronod is running" in res.stdout


def test_cutover_of_a_file_cron_ignores_refuses_and_changes_nothing(tmp_path):
    # Debian's cron ignores a file with a line it refuses: there is no running line to hand over
    res, crontab, registry = _cutover_without_a_daemon(
        tmp_path, "* * * * * root /usr/bin/true\n60 * * * * root /usr/bin/false\n"
    )
    assert res.returncode == 1, res.stderr + res.stdout
    assert "because of line 2" in res.stderr and "nothing to hand over" in res.stderr
    assert crontab.read_text() == "* * * * * root /usr/bin/true\n60 * * * * root /usr/bin/false\n"
    assert not Path(str(crontab) + ".chrono-backup").exists() and not registry.exists()


def test_cutover_refuses_standard_input_and_adopted_defaults(tmp_path):
    res = _import("-", "--cutover", registry=tmp_path, db=str(tmp_path / "x.db"))
    assert res.returncode == 2 and "standard input" in res.stderr
    crontab = tmp_path / "crontab"
    crontab.write_text("* * * * * root /usr/bin/true\n")
    res = _import(str(crontab), "--cutover", "--adopt-defaults", registry=tmp_path, db=str(tmp_path / "x.db"))
    assert res.returncode == 2 and "--adopt-defaults" in res.stderr


# --- the real thing: Debian's cron ----------------------------------------------------------------


def _cron_pids() -> list[int]:
    """Cron daemons that read this /etc/cron.d: one in another mount namespace (a real-cron
    test elsewhere) sees other files and does not count."""
    ours = os.readlink("/proc/self/ns/mnt")
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == "cron" and os.readlink(d / "ns" / "mnt") == ours:
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


@pytest.fixture
def running_cron(debian_cron):
    """A cron daemon for the test: the one already running, else `cron -f` stopped at the end.
    One run of the test at a time on a host (a lock file): two would share /etc/cron.d."""
    import fcntl

    lock = open(Path("/run/lock" if os.path.isdir("/run/lock") else "/tmp") / "chrono-cutover-cron-test.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        pytest.skip("SKIPPED THE REAL-CRON CUTOVER TEST: another run of it holds the lock on this host")
    try:
        yield from _cron_for_test(debian_cron)
    finally:
        lock.close()


def _cron_for_test(debian_cron):
    if _cron_pids():
        yield None
        return
    proc = subprocess.Popen(
        [debian_cron, "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    time.sleep(1)
    if proc.poll() is not None:
        pytest.skip(f"SKIPPED THE REAL-CRON CUTOVER TEST: `{debian_cron} -f` exited {proc.returncode} at once")
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _witness(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split()) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.xdist_group("cron")  # the tests that run Debian's cron take turns
def test_a_minutely_job_runs_every_minute_exactly_once_across_a_cutover_and_a_rollback_with_debian_cron(
    running_cron, tmp_path
):
    if os.geteuid() != 0:
        pytest.skip("SKIPPED THE REAL-CRON CUTOVER TEST: /etc/cron.d needs root")
    registry = tmp_path / "jobs.d"
    registry.mkdir(mode=0o755)
    db = str(tmp_path / "chrono.db")
    witness = tmp_path / "witness"
    crontab = Path("/etc/cron.d") / f"chronocutover{uuid.uuid4().hex[:8]}"
    backup = Path(str(crontab) + ".chrono-backup")
    daemon = Chronod(registry, db, tmp_path / "chronod.log").start()

    def runs(who: str) -> int:
        crons.update(_cron_pids())
        return sum(1 for _, w in _witness(witness) if w == who)

    crons: set[int] = set(_cron_pids())

    try:
        tmp = crontab.with_name("." + crontab.name + ".tmp")
        tmp.write_text(
            "SHELL=/bin/sh\n"
            f'* * * * * root W=${{CHRONO_RUN_ID:+chrono}}; echo "$(date -u +\\%Y-\\%m-\\%dT\\%H:\\%M) ${{W:-cron}}" >> {witness}\n'
        )
        os.chmod(tmp, 0o644)
        os.replace(tmp, crontab)
        wait_until(lambda: runs("cron") >= 1, timeout=150, interval=0.5, what="cron to run the job")

        res = _import(str(crontab), "--cutover", "--json", registry=registry, db=db)
        assert res.returncode == 0, res.stderr + res.stdout
        cut = json.loads(res.stdout)["cutover"]["switch"]
        cut_minute = datetime.fromisoformat(cut["minute"])
        wait_until(lambda: runs("chrono") >= 1, timeout=90, interval=0.5, what="chronod to run the job")

        res = _import("--rollback", str(crontab), "--json", registry=registry, db=db)
        assert res.returncode == 0, res.stderr + res.stdout
        back = json.loads(res.stdout)["switch"]
        back_minute = datetime.fromisoformat(back["minute"])
        assert not backup.exists()
        after = f"{back_minute + timedelta(minutes=1):%Y-%m-%dT%H:%M}"
        wait_until(
            lambda: runs("cron") and any(m == after for m, _ in _witness(witness)),
            timeout=150,
            interval=0.5,
            what="cron to run the job in the first minute after the rollback",
        )
        time.sleep(3)  # a late duplicate from chronod would land by now
        seen = _witness(witness)
        crons.update(_cron_pids())
        dups = {m: [w for mm, w in seen if mm == m] for m, _ in seen}
        dups = {m: ws for m, ws in dups.items() if len(ws) > 1}
        if len(crons) > 1 and dups and all(set(ws) == {"cron"} for ws in dups.values()):
            pytest.skip(
                f"SKIPPED THE REAL-CRON CUTOVER TEST: {len(crons)} cron daemons ran during it "
                f"(pids {sorted(crons)}), each running every line of /etc/cron.d; stop the others. "
                f"witness: {seen}"
            )
        print(
            f"\ncutover at second {cut['second_of_minute']} of {cut_minute:%H:%M} (confirmed in {cut['confirm_s']} s), "
            f"rollback at second {back['second_of_minute']} of {back_minute:%H:%M}; witness: {seen}"
        )
        minutes = [datetime.strptime(m, "%Y-%m-%dT%H:%M").replace(tzinfo=timezone.utc) for m, _ in seen]
        first, last = minutes[0], minutes[-1]
        expected = [first + timedelta(minutes=i) for i in range(int((last - first).total_seconds() // 60) + 1)]
        assert minutes == expected, f"every minute exactly once, in order: {seen}"
        for at, (_, who) in zip(minutes, seen):
            owner = "chrono" if cut_minute < at <= back_minute else "cron"
            assert who == owner, f"{at:%H:%M} ran under {who}, expected {owner}: {seen}"
        assert cut_minute in minutes and back_minute in minutes
    finally:
        daemon.stop()
        crontab.unlink(missing_ok=True)
        backup.unlink(missing_ok=True)
