"""`xdist_group` marks that hold on every pytest the suite installs.

The suite runs on several workers (`pytest -n 6 --dist loadgroup`, the README's command).
Tests that share something of the host (dpkg, Debian's cron, system users) or a costly
module fixture carry `@pytest.mark.xdist_group(NAME)`, and pytest-xdist sends each group to
one worker, where its tests run one after another. xdist passes the group to its scheduler
as a suffix of the test's id (`...::test_x@NAME`), written into a field that pytest 9.2 no
longer reads: the suffix is lost and the groups are spread over all workers, silently
(pytest-dev/pytest-xdist#1386). This hook, run after xdist's own, adds the suffix where it
is missing and does nothing where xdist managed. tests/unit/test_xdist_groups.py runs two
grouped tests on two workers and fails if they ever land on different ones.
"""

from __future__ import annotations

import pytest


def _group(item: pytest.Item) -> str | None:
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    return "_".join(sorted(names)) or None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # only an xdist worker under --dist loadgroup
        return
    for item in items:
        group = _group(item)
        if group is None or item.nodeid.endswith(f"@{group}"):
            continue
        wanted = f"{item.nodeid}@{group}"
        structured = getattr(item, "_id", None)
        if structured is not None and hasattr(type(structured), "parse"):
            item._id = type(structured).parse(wanted)  # pytest >= 9.2: the id is structured
        else:
            item._nodeid = wanted
