"""Where chrono looks for its registry, database and state (docs/reference.md, Files and paths), in one place."""

from __future__ import annotations

import os
from pathlib import Path


def _is_root() -> bool:
    return os.geteuid() == 0


def _xdg(var: str, fallback: str) -> Path:
    base = os.environ.get(var)
    return Path(base) if base else Path.home() / fallback


def default_registry() -> Path:
    """`CHRONO_REGISTRY`, else /etc/chrono/jobs.d for root, else $XDG_CONFIG_HOME/chrono/jobs.d."""
    if os.environ.get("CHRONO_REGISTRY"):
        return Path(os.environ["CHRONO_REGISTRY"])
    if _is_root():
        return Path("/etc/chrono/jobs.d")
    return _xdg("XDG_CONFIG_HOME", ".config") / "chrono" / "jobs.d"


def default_db() -> str:
    """`CHRONO_DB`, else /var/lib/chrono/chrono.db for root, else $XDG_STATE_HOME/chrono/chrono.db."""
    if os.environ.get("CHRONO_DB"):
        return os.environ["CHRONO_DB"]
    if _is_root():
        return "/var/lib/chrono/chrono.db"
    return str(_xdg("XDG_STATE_HOME", ".local/state") / "chrono" / "chrono.db")


def sqlite_path(url: str) -> Path | None:
    """The file behind an SQLite URL or plain path; None for other databases."""
    if "://" not in url:
        return Path(url)
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///") :])
    return None


def default_state_dir(db_url: str) -> Path:
    """`CHRONO_STATE_DIR`, else `<db file>.state` beside an SQLite database, else the
    chrono state directory (root: /var/lib/chrono/state). Supervisors write result files here."""
    if os.environ.get("CHRONO_STATE_DIR"):
        return Path(os.environ["CHRONO_STATE_DIR"])
    path = sqlite_path(db_url)
    if path is not None:
        return path.with_name(path.name + ".state")
    if _is_root():
        return Path("/var/lib/chrono/state")
    return _xdg("XDG_STATE_HOME", ".local/state") / "chrono" / "state"


def live_output(state_dir: str | Path, run_id: str, attempt: int) -> Path:
    """The file a supervisor appends a running attempt's output to (bounded), so that
    `chronoctl logs` can show and follow it before the run ends. It lives in the state
    directory and is removed with the attempt's other state files."""
    return Path(state_dir) / f"{run_id}.{attempt}.output"


def default_node() -> str:
    """The short host name."""
    import socket

    return socket.gethostname().split(".")[0]
