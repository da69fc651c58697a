"""Where the daemon keeps each job file's validated result between its runs: the store's
`registry_files`, under this node's name (`specfile.FileCache` decides what to reuse).

A restart of 100,000 unchanged jobs spent most of its seconds parsing and validating files
whose bytes had not changed since the last start, and hashing the specs again to compare
them with the stored definitions. The result of validating a file depends only on its
bytes, its name, the day and the validator (`specfile.file_key`); the checks that depend on
the file itself (type, mode, links, owner) are made on every read, stored result or not.
"""

from __future__ import annotations

from chronod.store.api import Definitions


class StoredFiles:
    """`specfile.StoredFiles` over the store, for one node."""

    def __init__(self, store: Definitions, node: str) -> None:
        self.store, self.node = store, node

    def load(self) -> dict[str, tuple[str, bytes]]:
        return self.store.registry_files(self.node)

    def save(self, changes: dict[str, tuple[str, bytes] | None]) -> None:
        self.store.set_registry_files(self.node, changes)
