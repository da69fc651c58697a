"""`chronoctl import`, black-box: the installed binary on fixture crontabs and on this host's
real Debian cron files. Every run is checked for a traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

BIN_DIR = Path(sys.executable).parent
CHRONOCTL = shutil.which("chronoctl", path=str(BIN_DIR)) or shutil.which("chronoctl")
FIXTURES = Path(__file__).parent.parent / "fixtures" / "crontabs"

pytestmark = pytest.mark.skipif(CHRONOCTL is None, reason="chronoctl is not installed (pip install -e .)")


def chronoctl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONO_")}
    proc = subprocess.run([CHRONOCTL, *args], input=stdin, capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def import_json(*args: str, stdin: str | None = None) -> tuple[int, dict]:
    proc = chronoctl("import", *args, "--json", stdin=stdin)
    return proc.returncode, json.loads(proc.stdout)


def validate_registry(directory: Path) -> None:
    specfile = pytest.importorskip("chronod.specfile")
    result = specfile.load_registry(directory, now=datetime.now(timezone.utc), secure=False)
    errors = [p for p in result.problems if p.severity == "error"]
    assert errors == [] and result.jobs


@pytest.fixture(scope="session")
def host_cron_files(tmp_path_factory) -> Path:
    """A copy of this host's /etc/crontab and /etc/cron.d, as cron's packages installed them."""
    root = tmp_path_factory.mktemp("host") / "etc"
    (root / "cron.d").mkdir(parents=True)
    if Path("/etc/crontab").is_file():
        shutil.copy("/etc/crontab", root / "crontab")
    if Path("/etc/cron.d").is_dir():
        for f in Path("/etc/cron.d").iterdir():
            if f.is_file():
                shutil.copy(f, root / "cron.d" / f.name)
    for f in (FIXTURES / "debian").iterdir():  # the packaged files copied into the repository
        if f.name not in ("README", "crontab") and not (root / "cron.d" / f.name).exists():
            shutil.copy(f, root / "cron.d" / f.name)
    return root


def test_a_file_with_errors_exits_1_and_lists_jobs_errors_and_disabled_lines():
    code, doc = import_json(str(FIXTURES / "kitchen-sink"), "--format", "system", "--dry-run")
    assert code == 1
    assert len(doc["jobs"]) == 14
    assert [(e["line"], e["file"].endswith("kitchen-sink")) for e in doc["errors"]] == [
        (25, True),
        (26, True),
        (27, True),
        (28, True),
        (31, True),
    ]
    assert [d["line"] for d in doc["disabled"]] == [15, 16]
    mail = next(j for j in doc["jobs"] if j["id"] == "root-mail")
    assert mail["stdin"] == "Hello,\ntoday is fine.\nBye % done\n"
    assert mail["source"]["line"] == 14 and mail["timezone"] and mail["user"] == "root"
    assert doc["differences"] == [] and doc["summary"]["dry_run"] is True


def test_import_writes_one_valid_registry_file_per_source_and_reimport_is_identical(tmp_path):
    registry = tmp_path / "jobs.d"
    code = chronoctl("import", str(FIXTURES / "backup"), "--format", "system", "--registry", str(registry)).returncode
    assert code == 0
    written = registry / "imported-crontabs-backup.yaml"
    first = written.read_bytes()
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert b"# source: " in first
    assert (
        chronoctl("import", str(FIXTURES / "backup"), "--format", "system", "--registry", str(registry)).returncode == 0
    )
    assert written.read_bytes() == first
    assert sorted(p.name for p in registry.iterdir()) == ["imported-crontabs-backup.yaml"]
    validate_registry(registry)


def test_an_import_under_a_loose_umask_still_writes_a_registry_the_daemon_trusts(tmp_path):
    registry = tmp_path / "jobs.d"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONO_")}
    proc = subprocess.run(
        [CHRONOCTL, "import", str(FIXTURES / "backup"), "--format", "system", "--registry", str(registry)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=lambda: os.umask(0),
    )
    assert proc.returncode == 0, proc.stderr
    written = registry / "imported-crontabs-backup.yaml"
    assert (stat.S_IMODE(registry.stat().st_mode), stat.S_IMODE(written.stat().st_mode)) == (0o755, 0o644)
    if os.geteuid() == 0:
        assert (written.stat().st_uid, written.stat().st_gid) == (0, 0)
    specfile = pytest.importorskip("chronod.specfile")
    result = specfile.load_registry(registry, now=datetime.now(timezone.utc), secure=True)
    assert [p.format() for p in result.problems] == [] and result.jobs


def test_dry_run_writes_nothing(tmp_path):
    chronoctl("import", str(FIXTURES / "php"), "--format", "system", "--dry-run", "--registry", str(tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_a_user_crontab_on_standard_input_needs_no_user_field():
    code, doc = import_json(
        "-", "--user", "alice", "--owner", "team-a", "--dry-run", stdin=(FIXTURES / "user-alice").read_text()
    )
    assert code == 0
    assert [j["id"] for j in doc["jobs"]] == ["alice-check-mail", "alice-weekly", "alice-cleanup", "alice-cleanup-2"]
    assert {j["owner"] for j in doc["jobs"]} == {"team-a"} and {j["user"] for j in doc["jobs"]} == {"alice"}


def test_adopt_defaults_leaves_chrono_defaults_in_place():
    code, doc = import_json(str(FIXTURES / "crlf"), "--format", "system", "--dry-run", "--adopt-defaults")
    assert code == 0
    assert all("overlap" not in j and "tolerance_s" not in j for j in doc["jobs"])


def test_a_missing_file_is_a_usage_error_with_a_clear_message():
    proc = chronoctl("import", "/no/such/crontab")
    assert proc.returncode == 2
    assert "no such file" in proc.stderr


def test_a_directory_imports_only_the_files_cron_reads(tmp_path):
    crond = tmp_path / "cron.d"
    crond.mkdir()
    shutil.copy(FIXTURES / "php", crond / "php")
    shutil.copy(FIXTURES / "php", crond / "php.dpkg-old")
    shutil.copy(FIXTURES / "php", crond / "php~")
    shutil.copy(FIXTURES / "php", crond / ".hidden")
    code, doc = import_json(str(crond), "--dry-run")
    assert code == 0
    assert {j["source"]["file"] for j in doc["jobs"]} == {str(crond / "php")}
    assert [j["id"] for j in doc["jobs"]] == ["root-sessionclean", "www-data-php-cron", "www-data-php-wp-cron"]


def test_the_hosts_real_cron_files_import_cleanly_and_match_cron(host_cron_files, tmp_path):
    registry = tmp_path / "jobs.d"
    code, doc = import_json(str(host_cron_files / "cron.d"), "--registry", str(registry))
    assert code == 0, doc["errors"]
    assert doc["jobs"] and doc["differences"] == []
    if (host_cron_files / "crontab").exists():
        code, doc = import_json(str(host_cron_files / "crontab"), "--format", "system", "--registry", str(registry))
        assert code == 0 and doc["differences"] == []
        assert "root-run-parts-cron-daily" in [j["id"] for j in doc["jobs"]]
    validate_registry(registry)


def test_human_output_has_the_summary_line():
    proc = chronoctl("import", str(FIXTURES / "dst"), "--format", "system", "--dry-run")
    assert proc.returncode == 1
    assert re.search(
        r"5 imported, 0 commented out \(not imported\), 1 errors, \d+ not fired as cron fires them", proc.stdout
    )  # CRON_TZ vs the host's zone
    assert "Risky: fixed-time jobs on DST days" in proc.stdout


BUG_REPORT_FILE = (
    "GREETING='  hello world  '\nDQ=\"  two  \"\nUNQ=abc   \nNOTE=daily run # not a comment\n"
    '* * * * * root echo "[$GREETING][$DQ][$UNQ][$NOTE]" >> /tmp/out\n'
)


def test_environment_lines_import_with_the_values_debian_cron_gives_and_the_check_says_so(tmp_path):
    # Debian's cron daemon ran this file's job with [  hello world][  two][abc][daily run # not a comment]
    registry = tmp_path / "jobs.d"
    registry.mkdir()
    code, doc = import_json("-", "--format", "system", "--registry", str(registry), stdin=BUG_REPORT_FILE)
    assert code == 0, doc["errors"]
    job = doc["jobs"][0]
    assert {k: job["env"][k] for k in ("GREETING", "DQ", "UNQ", "NOTE")} == {
        "GREETING": "  hello world",
        "DQ": "  two",
        "UNQ": "abc",
        "NOTE": "daily run # not a comment",
    }
    assert job["env"]["SHELL"] == "/bin/sh" and job["env"]["PATH"] == "/usr/bin:/bin"
    given = job["equivalence"]
    assert [given[p]["same"] for p in ("environment", "stdin", "command")] == [True, True, True], given
    assert "USER=root" in given["chrono_adds"] and doc["summary"]["not_as_cron_gives"] == 0
    validate_registry(registry)


def test_what_chrono_cannot_carry_is_named_per_job_in_text_and_json():
    text = "A-B=x\nCHRONO_RUN_ID=mine\n0 1 * * * root true\n"
    code, doc = import_json("-", "--format", "system", "--dry-run", stdin=text)
    env = doc["jobs"][0]["equivalence"]["environment"]
    assert env["same"] is False and len(env["why"]) == 2 and "'A-B' is not a name" in env["why"][0]
    assert "CHRONO_*" in env["why"][1] and doc["summary"]["not_as_cron_gives"] == 1
    proc = chronoctl("import", "-", "--format", "system", "--dry-run", stdin=text)
    assert "ENV/STDIN/COMMAND" in proc.stdout and "NO: env differ" in proc.stdout
    assert "Not what cron gives the job:" in proc.stdout and "'A-B' is not a name chrono's env takes" in proc.stdout


def test_a_dry_run_writes_nothing_says_so_and_fails_when_a_job_would_fire_differently(tmp_path):
    same = tmp_path / "same"
    same.write_text("0 5 * * * root /bin/true\n")
    other = tmp_path / "other"
    other.write_text("CRON_TZ=Pacific/Kiritimati\n0 5 * * * root /bin/true\n")  # +14: never the host's zone
    for crontab, code in ((same, 0), (other, 1)):
        proc = chronoctl(
            "import", str(crontab), "--format", "system", "--dry-run", "--json", "--registry", str(tmp_path / "r")
        )
        assert proc.returncode == code, proc.stderr
        summary = json.loads(proc.stdout)["summary"]
        assert summary["written"] == [] and summary["would_write"]
        assert bool(summary["fire_differently"]) == bool(code)
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="NOT RUN: needs root to give the crontab to another user")
@pytest.mark.parametrize(
    "where, given",
    [("mycron", []), ("mycron", ["--format", "user"]), ("crons/backup", ["DIR"]), ("cron.d/backup", [])],
)
def test_a_crontab_another_user_owns_is_theirs_whatever_its_lines_name(tmp_path, where, given):
    """`* * * * * root cmd` in a file nobody owns is nobody's `root cmd`, never root's `cmd`:
    alone, in a directory imported whole, or in a directory named cron.d."""
    import pwd

    crontab = tmp_path / where
    crontab.parent.mkdir(exist_ok=True)
    crontab.write_text("*/5 * * * * root /usr/bin/id > /tmp/who\n")
    os.chown(crontab, pwd.getpwnam("nobody").pw_uid, -1)
    path = str(crontab.parent) if given == ["DIR"] else str(crontab)
    code, out = import_json(path, "--dry-run", *[g for g in given if g != "DIR"])
    assert [(j["user"], j["command"]) for j in out["jobs"]] == [("nobody", "root /usr/bin/id > /tmp/who")], out


@pytest.mark.parametrize("source_mode, written_mode", [(0o600, 0o600), (0o644, 0o644)])
def test_a_private_crontab_is_imported_into_a_private_file(tmp_path, source_mode, written_mode):
    """A user's spool crontab is 0600 and its env lines often hold secrets: the registry
    file made from it is readable by root alone, as its source was."""
    crontab = tmp_path / "crontabs" / "nobody"
    crontab.parent.mkdir()
    crontab.write_text('API_TOKEN=s3cret\n*/5 * * * * /usr/bin/backup --token "$API_TOKEN"\n')
    os.chmod(crontab, source_mode)
    reg = tmp_path / "jobs.d"
    proc = chronoctl("import", str(crontab), "--registry", str(reg))
    assert proc.returncode == 0, proc.stderr
    (written,) = reg.iterdir()
    assert "s3cret" in written.read_text()
    assert stat.S_IMODE(written.stat().st_mode) == written_mode


@pytest.mark.parametrize("env_mode, written_mode", [(0o600, 0o600), (0o644, 0o644)])
def test_a_timer_whose_environment_file_is_private_is_imported_into_a_private_file(tmp_path, env_mode, written_mode):
    """EnvironmentFile= values become the job's env: a 0600 file's secrets stay root's."""
    env = tmp_path / "secret.env"
    env.write_text("TOKEN=envfile-s3cret\n")
    os.chmod(env, env_mode)
    (tmp_path / "rtx.timer").write_text("[Timer]\nOnCalendar=daily\n[Install]\nWantedBy=timers.target\n")
    (tmp_path / "rtx.service").write_text(f"[Service]\nType=oneshot\nEnvironmentFile={env}\nExecStart=/usr/bin/true\n")
    reg = tmp_path / "jobs.d"
    proc = chronoctl("import", str(tmp_path / "rtx.timer"), "--registry", str(reg))
    assert proc.returncode == 0, proc.stderr
    (written,) = reg.iterdir()
    assert "envfile-s3cret" in written.read_text()
    assert stat.S_IMODE(written.stat().st_mode) == written_mode
