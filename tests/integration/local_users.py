"""Real local accounts for the tests of what one user may do to another: made with
useradd under a name no other test uses, removed afterwards."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
from contextlib import contextmanager
from typing import Iterator

import pytest

RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"


@contextmanager
def account(name: str) -> Iterator[pwd.struct_passwd]:
    """A system account `name` (no home, no password) for the length of the block."""
    if os.geteuid() != 0:
        pytest.skip(f"NOT RUN: this test needs root (it creates the account {name})")
    subprocess.run(["userdel", name], capture_output=True, check=False)  # a leftover of a killed run
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


def as_user(name: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `argv` as the account `name` (runuser: no password, no PAM session of ours)."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/"}
    return subprocess.run([RUNUSER, "-u", name, "--", *argv], capture_output=True, text=True, timeout=timeout, env=env)


def python_as(name: str, code: str, *args: str) -> subprocess.CompletedProcess:
    """Python code run as `name` with chrono and its libraries importable. The test's own
    interpreter may live where the account cannot reach (a pyenv under /root): the
    system's interpreter of the same version is used, given this environment's packages."""
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(python, os.X_OK):
        pytest.skip(f"NOT RUN: no {python} to run chrono as {name} (the test's interpreter is private to root)")
    site = sysconfig.get_paths()["purelib"]
    prelude = f"import site, sys; site.addsitedir({site!r}); "
    return as_user(name, python, "-c", prelude + code, *args)


def chronoctl_as(name: str, *args: str) -> subprocess.CompletedProcess:
    """`chronoctl ARGS` run as the account `name`."""
    return python_as(name, "from chronoctl.main import main; sys.argv[0] = 'chronoctl'; sys.exit(main())", *args)
