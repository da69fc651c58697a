"""An installed chrono (wheel or `pip install .`) carries its migrations: `migrate/` at the top
of the repository is built into the chronod package as `chronod/_migrate`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chronod.store import schema

pytestmark = pytest.mark.xdist_group("packaging")  # one worker: the package tree is built once per module

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("chronod", "chronoctl", "migrate", "setup.py", "pyproject.toml", "README.md")


def migration_files(root: Path) -> set[str]:
    """Every file of an alembic environment, relative to it, bytecode left out."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The package tree exactly as setuptools lays it into a wheel (build_py, from a copy of the sources)."""
    src, lib = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("lib")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    res = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return lib


def test_a_built_chrono_carries_every_migration_inside_the_chronod_package(built):
    assert migration_files(built / "chronod" / "_migrate") == migration_files(ROOT / "migrate")


def test_a_built_chrono_ships_no_top_level_migrate_package(built):
    assert sorted(p.name for p in built.iterdir()) == ["chronoctl", "chronod"]


def test_an_installed_chrono_upgrades_a_database_from_its_own_copy_of_the_migrations(built, tmp_path):
    # Run from elsewhere with only the built tree on the path: no checkout `migrate/` to fall back on.
    script = (
        "import sys; from chronod.store.sql import SqlStore, migrations_dir; print(migrations_dir()); "
        "s = SqlStore(sys.argv[1]); s.upgrade(); print(s.schema_revision()); s.close()"
    )
    env = {**os.environ, "PYTHONPATH": str(built)}
    res = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "chrono.db")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    where, revision = res.stdout.split()
    assert Path(where) == built / "chronod" / "_migrate"
    assert revision == schema.HEAD_REVISION


def test_a_built_chrono_carries_the_web_consoles_templates_and_assets(built):
    """The console works offline from an installed package: every template, the stylesheet
    and the script ship inside chronoctl.web (package_data), nothing is fetched."""
    for folder in ("templates", "static"):
        shipped = sorted(p.name for p in (built / "chronoctl" / "web" / folder).iterdir())
        assert shipped == sorted(p.name for p in (ROOT / "chronoctl" / "web" / folder).iterdir()), folder
