"""Run the environment-line cases with Debian's real cron daemon and record what each job saw.

    sudo .venv/bin/python -m tests.realcron.run_env_cases            # print a summary
    sudo .venv/bin/python -m tests.realcron.run_env_cases --write    # regenerate the fixture

Needs root, `unshare` and Debian's `cron` (apt-get install cron). The daemon runs in a
private mount namespace: `/etc/cron.d`, the spool and `/run` are fresh tmpfs mounts and
`/etc/crontab` an empty file, so the host's crontabs are neither read nor touched, and
everything vanishes when cron exits. Each case is one `/etc/cron.d` file (a line cron
refuses voids its file only) whose first line is a job that records the environment
before any setting (it tells "cron ignored the file" from "the job could not start"),
then the case's lines, with each `@JOB` a job that records the environment cron gave it:
`cat /proc/$$/environ`, the shell's environment exactly as cron passed it, NUL-separated.
One more file, `chronoenv-all`, holds every case the importer reads as accepted, one
after the other, with one job at the end; root's spool crontab holds the same lines in
the user format. Two more files show which zone cron schedules in below `CRON_TZ=` and
`TZ=`. `/etc/environment` and `/etc/default/locale` are replaced by small files of our
own, so what PAM adds is known. The daemon runs until the jobs of the next minute have
written (about one minute); the fixture stores each job's environment and working
directory, or null when it did not run.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.realcron.env_cases import JOB, Case, generate

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cron_env" / "cases.json"
ALL = "all"
USER_ALL = "user-all"  # the same lines in root's spool crontab, which has no user field


# bound over /etc/environment and /etc/default/locale in the namespace: what cron's PAM session adds
PAM_ENVIRONMENT = (
    '# comment\nCHRONOENV_PAM=from-etc-environment\nCHRONOENV_PAMQ="quoted value"\n'
    "export CHRONOENV_PAMX=exported\nPATH=/pam/bin:/usr/bin:/bin\nLOGNAME=pam\nHOME=/pam\n"
)
PAM_LOCALE = "LANG=C.UTF-8\n"


def job_line(out: Path, name: str, user: str | None = "root") -> str:
    """A job recording its working directory and environment; `user` None for a user crontab."""
    who = f" {user}" if user else ""
    return f"* * * * *{who} /bin/readlink /proc/$$/cwd > {out}/{name}.cwd; /bin/cat /proc/$$/environ > {out}/{name}"


ZONE_SETTINGS = ("CRON_TZ", "TZ")
PROBE_ZONE = "Asia/Tokyo"  # no DST; its hour is never the host's when the host is within 8 h of UTC


def zone_probe(setting: str, at: datetime, out: Path) -> str:
    """A file whose two jobs are due at `at`: one in the host's time, one in PROBE_ZONE's,
    below `setting=PROBE_ZONE`. Which one runs tells the zone cron schedules the lines in."""
    from zoneinfo import ZoneInfo

    there = at.astimezone(ZoneInfo(PROBE_ZONE))
    return (
        f"{setting}={PROBE_ZONE}\n"
        f"{at.minute} {at.hour} * * * root : > {out}/zone-{setting}.host\n"
        f"{there.minute} {there.hour} * * * root : > {out}/zone-{setting}.setting\n"
    )


def case_file(case: Case, out: Path, user: str | None = "root") -> str:
    """The cron.d text of one case (with `user` None, the spool text): a sentinel job, then
    the lines with each @JOB a job."""
    lines = [job_line(out, f"{case.id}.top", user)]
    k = 0
    for line in case.lines:
        if line == JOB:
            lines.append(job_line(out, f"{case.id}.{k}", user))
            k += 1
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def all_lines(cases: list[Case]) -> list[str]:
    """Every case the importer reads as accepted, in order, then one job (the fixture keeps these lines)."""
    from chronoctl.crontab import parse_crontab

    lines: list[str] = []
    for case in cases:
        body = [ln for ln in case.lines if ln != JOB]
        if (
            body
            and parse_crontab("\n".join(body + ["* * * * * root true"]) + "\n", "f", "system").ignored_by_cron is None
        ):
            lines += body
    return lines + [JOB]


def cron_binary() -> str | None:
    return shutil.which("cron") or ("/usr/sbin/cron" if os.path.exists("/usr/sbin/cron") else None)


def cron_version() -> str:
    res = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "cron"], capture_output=True, text=True, check=False)
    return res.stdout.strip() or "unknown"


def _read_job(path: Path) -> dict | None:
    """What one job recorded: its environment (in cron's order) and its working directory."""
    if not path.exists():
        return None
    env: dict[str, str] = {}
    for item in path.read_bytes().split(b"\0"):
        if item:
            name, _, value = item.decode("utf-8", errors="backslashreplace").partition("=")
            env[name] = value
    cwd = path.with_name(path.name + ".cwd")
    return {"env": env, "cwd": cwd.read_text().strip() if cwd.exists() else None}


def _wait_for_the_minute(proc: subprocess.Popen, work: Path, files: int, at: datetime, log=print) -> None:
    """Let cron run the jobs of the minute `at` (they write within a few seconds), then stop it."""
    try:
        boundary = at.timestamp()
        log(
            f"cron {cron_version()} started with {files} files; "
            f"jobs run at {datetime.fromtimestamp(boundary, UTC):%H:%M:%S} UTC"
        )
        while time.time() < boundary + 25:
            if proc.poll() is not None:
                raise RuntimeError(f"cron exited with {proc.returncode}: {(work / 'cron.log').read_text()}")
            time.sleep(1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run_live(cases: list[Case], work: Path, with_all: bool = True) -> dict:
    """Write the files, run cron for one minute boundary, return {case id: {...}} and the timings."""
    cron = cron_binary()
    if cron is None:
        raise RuntimeError("Debian's cron is not installed: apt-get install cron")
    for target in ("/etc/environment", "/etc/default/locale", "/etc/crontab"):
        if not os.path.exists(target):
            raise RuntimeError(f"{target} does not exist: the run binds its own file over it (touch {target})")
    second = datetime.now().second
    # cron must have read the files before the minute it runs them: half a minute of room
    # for writing them and starting cron on a loaded host
    if second >= 30:
        time.sleep(61 - second)
    stage, out = work / "cron.d", work / "out"
    stage.mkdir()
    out.mkdir()
    at = datetime.now().astimezone().replace(second=0, microsecond=0) + timedelta(minutes=1)
    for name in ZONE_SETTINGS:
        (stage / f"chronoenv-zone-{name.lower()}").write_text(zone_probe(name, at, out))
    names = []
    for case in cases:
        (stage / f"chronoenv-{case.id}").write_bytes(case_file(case, out).encode())
        names.append(case.id)
    combined = all_lines(cases) if with_all else None
    spool = work / "spool"
    spool.mkdir()
    if combined is not None:
        (stage / f"chronoenv-{ALL}").write_bytes(case_file(Case(ALL, "", tuple(combined)), out).encode())
        (spool / "root").write_bytes(case_file(Case(USER_ALL, "", tuple(combined)), out, None).encode())
    for f in stage.iterdir():
        os.chmod(f, 0o644)
    empty = work / "empty-crontab"
    empty.write_text("")
    (work / "environment").write_text(PAM_ENVIRONMENT)
    (work / "locale").write_text(PAM_LOCALE)
    script = (
        "set -e; "
        "mount -t tmpfs -o mode=0755 chronoenv /etc/cron.d; "
        f"cp {stage}/* /etc/cron.d/; chmod 0644 /etc/cron.d/*; "
        f"mount --bind {empty} /etc/crontab; "
        f"mount --bind {work}/environment /etc/environment; "
        f"mount --bind {work}/locale /etc/default/locale; "
        "mount -t tmpfs -o mode=1730 chronoenv /var/spool/cron/crontabs; "
        f"if [ -e {spool}/root ]; then cp {spool}/root /var/spool/cron/crontabs/root; "
        "chmod 0600 /var/spool/cron/crontabs/root; fi; "
        "mount -t tmpfs -o mode=0755 chronoenv /run; "
        f"exec {cron} -f"
    )
    started = time.monotonic()
    with open(work / "cron.log", "w") as logf:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            start_new_session=True,
        )
        _wait_for_the_minute(proc, work, len(names) + (combined is not None), at)
    elapsed = time.monotonic() - started
    results = {}
    extra = (
        [
            Case(ALL, "every accepted case in one file", tuple(combined)),
            Case(USER_ALL, "the same lines as root's user crontab (the spool)", tuple(combined)),
        ]
        if combined
        else []
    )
    for case in list(cases) + extra:
        count = sum(1 for ln in case.lines if ln == JOB)
        results[case.id] = {
            "id": case.id,
            "what": case.what,
            "lines": list(case.lines),
            "file_read": (out / f"{case.id}.top").exists(),
            "jobs": [_read_job(out / f"{case.id}.{k}") for k in range(count)],
        }
    zones = {name: sorted(p.name.split(".")[-1] for p in out.glob(f"zone-{name}.*")) for name in ZONE_SETTINGS}
    return {"cron": cron_version(), "seconds": round(elapsed, 1), "results": results, "zones": zones}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write the fixture ({FIXTURE})")
    parser.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (files, outputs)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: a private mount namespace and /etc/cron.d", file=sys.stderr)
        return 2
    cases = [c for c in generate() if not args.only or c.id in args.only]
    work = Path(tempfile.mkdtemp(prefix="chrono-cronenv-"))
    try:
        run = run_live(cases, work, with_all=not args.only)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    results = run["results"]
    read = sum(1 for r in results.values() if r["file_read"])
    print(f"{len(results)} files, {read} read by cron, {len(results) - read} ignored; {run['seconds']} s")
    if args.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "about": "What Debian's cron daemon gave jobs below environment lines; "
            "regenerate with: python -m tests.realcron.run_env_cases --write (root)",
            "cron": run["cron"],
            "pam_environment": PAM_ENVIRONMENT,
            "pam_locale": PAM_LOCALE,
            "user": "root",
            "home": "/root",
            "generated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%MZ"),
            "seconds": run["seconds"],
            "cases": list(results.values()),
            "zones": {"probe_zone": PROBE_ZONE, "ran": run["zones"]},
        }
        FIXTURE.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
