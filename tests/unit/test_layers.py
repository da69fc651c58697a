"""The architecture's import rules (docs/architecture.md), checked on the source itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IO_MODULES = {
    "os",
    "subprocess",
    "socket",
    "sqlalchemy",
    "psycopg",
    "sqlite3",
    "yaml",
    "typer",
    "rich",
    "prometheus_client",
    "urllib",
    "http",
    "selectors",
    "signal",
    "shutil",
    "tempfile",
}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules("chronod/core"), ids=lambda p: p.name)
def test_the_core_imports_only_the_core_and_no_io_library(path):
    for name in imports_of(path):
        top = name.split(".")[0]
        if name == "urllib.parse":
            continue  # parsing a URL is pure
        assert top not in IO_MODULES, f"{path.name} imports {name}"
        if top in ("chronod", "chronoctl"):
            assert name.startswith("chronod.core"), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", modules("chronoctl"), ids=lambda p: p.name)
def test_chronoctl_never_imports_the_daemon_or_the_runner(path):
    for name in imports_of(path):
        assert not name.startswith(("chronod.daemon", "chronod.runner")), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", sorted((ROOT / "migrate").rglob("*.py")), ids=lambda p: p.name)
def test_migrations_never_import_the_live_schema(path):
    assert not any(n.startswith("chronod") for n in imports_of(path)), path.name
