"""A node's published `info` (`Node.info`), decoded once per text.

Every node of a fleet reads every node's info at each version check (every ten seconds,
chronod.daemon.fleetview), and the info holds the spec hash of each job the node carries:
with 1,000 jobs on 8 nodes, decoding the same JSON again at each read was most of a
check. The stores keep the last text read of each node with its decoded value and decode
again only a text that changed (a node's reload); a text unchanged is recognised by
comparing it, much cheaper than decoding it.

The value handed out is a new top-level dict each time; what it holds inside (the spec
hashes) is shared between reads of one text, so it is read-only: changing it raises
TypeError, and no reader can change what the store, or another reader, sees.
"""

from __future__ import annotations

import json
import threading
from typing import Any, NoReturn


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError("a node's published info is read-only: copy it to change it")


class ReadOnlyDict(dict[str, Any]):
    """A dict of a node's info that refuses changes (equal to, and encoded as, a dict)."""

    __slots__ = ()
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return json.loads(json.dumps(self))  # type: ignore[no-any-return]


class ReadOnlyList(list[Any]):
    """A list of a node's info that refuses changes (equal to, and encoded as, a list)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return json.loads(json.dumps(self))  # type: ignore[no-any-return]


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return ReadOnlyDict({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return ReadOnlyList(_frozen(v) for v in value)
    return value


class NodeInfos:
    """The last info text read of each node and its decoded value (safe between threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, tuple[str, dict[str, Any]]] = {}

    def decode(self, name: str, text: str | None) -> dict[str, Any]:
        """`json.loads(text or "{}")` for node `name`: its inner values shared with the
        last read of the same text, the top level a dict of its own."""
        text = text or "{}"
        with self._lock:
            last = self._last.get(name)
        if last is None or last[0] != text:
            decoded = json.loads(text)
            if not isinstance(decoded, dict):
                return decoded  # type: ignore[no-any-return]
            last = (text, {k: _frozen(v) for k, v in decoded.items()})
            with self._lock:
                self._last[name] = last
        return dict(last[1])
