"""Where the daemon keeps each job file's validated result between its runs: the store's
`registry_files`, under this node's name (`specfile.FileCache` decides what to reuse).

A restart of 100,000 unchanged jobs spent most of its seconds parsing and validating files
whose bytes had not changed since the last start, and hashing the specs again to compare
them with the stored definitions. The result of validating a file depends only on its
bytes, its name, the day and the validator (`specfile.file_key`); the checks that depend on
the file itself (type, mode, links, owner) are made on every read, stored result or not.

A stored result says what runs, and who may write the database is not who may change what
runs (a PostgreSQL role may pause and trigger; only the registry's owners change jobs):
each result is sealed with a key that only this node's state directory holds (`0600`,
root's on a host), and a result whose seal does not match is validated from its file again.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from chronod.store.api import Definitions

KEY_FILE = "registry-files.key"
_SEAL = hashlib.sha256().digest_size
# the row that is no file (no path is empty): the definitions this node's stored
# occurrences were last checked against (`Registry`, `chronod.daemon.registry`)
CHECKED = ""


def node_key(state_dir: Path) -> bytes:
    """This node's sealing key, made at its first start (32 random bytes, mode 0600)."""
    path = state_dir / KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) >= 32:
            return key
        os.unlink(path)  # cut short by a crash while it was written: a new key (results validate again)
        return node_key(state_dir)
    key = os.urandom(32)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
        f.flush()
        os.fsync(f.fileno())
    return key


class StoredFiles:
    """`specfile.StoredFiles` over the store, for one node, sealed with its key."""

    def __init__(self, store: Definitions, node: str, key: bytes) -> None:
        self.store, self.node, self.key = store, node, key
        self._checked: str | None = None
        self._loaded = False

    def _seal(self, name: str, file_key: str, blob: bytes) -> bytes:
        return hmac.new(self.key, b"\0".join((name.encode(), file_key.encode(), blob)), hashlib.sha256).digest()

    def load(self) -> dict[str, tuple[str, bytes]]:
        files = {}
        self._checked = None
        for name, (file_key, sealed) in self.store.registry_files(self.node).items():
            seal, blob = sealed[:_SEAL], sealed[_SEAL:]
            if hmac.compare_digest(seal, self._seal(name, file_key, blob)):
                if name == CHECKED:
                    self._checked = file_key
                else:
                    files[name] = (file_key, blob)
        self._loaded = True
        return files

    def checked(self) -> str | None:
        """The mark `set_checked` stored last (None: none, or not sealed with this node's key)."""
        if not self._loaded:
            self.load()
        return self._checked

    def set_checked(self, mark: str | None) -> None:
        """Store the mark of the definitions the stored occurrences were checked against
        (None: forget it, before definitions are stored that they were not checked against)."""
        self.store.set_registry_files(
            self.node, {CHECKED: None if mark is None else (mark, self._seal(CHECKED, mark, b""))}
        )
        self._checked, self._loaded = mark, True

    def save(self, changes: dict[str, tuple[str, bytes] | None]) -> None:
        self.store.set_registry_files(
            self.node,
            {
                name: None if got is None else (got[0], self._seal(name, got[0], got[1]) + got[1])
                for name, got in changes.items()
            },
        )
