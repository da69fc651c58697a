"""What the notifier has read of the ended runs, so that it can tell a run it never saw from
one it already decided on without trusting the wall clock.

The notifier reads ended runs by their `updated_at` (the wall clock of the node that wrote
them) from a cursor, and each job's state keeps a seen mark (the finish time of the last
run it decided on). Both follow the wall clock. After a step back of the clock, the runs
that end next carry times before the cursor and before the marks: read by the wall clock
alone they would never be read, or be read and taken for runs already seen, and a failure
would never be told. Two things close that, both in this module:

- `floor`: the earliest wall time a run written since the last recorded round can carry
  (the clock may have stepped back in between; the monotonic clock says how far it can
  have gone). The next read starts there when that is before the cursor.
- `Reads`: the runs this process has read, by run id, for a while back. A run read now
  whose id was never read before, although every row at its time was read already, is new
  (`Reads.news`), whatever its time says: the seen mark is not asked about it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

KEEP_S = 900.0  # how far back the runs read are kept: a step back this long loses nothing
KEEP_MAX = 20_000  # ...but never more runs than this (a busy fleet keeps a shorter while)
TRIM_EVERY_S = 60.0  # forget in steps of this much, not at every round


def floor(last: tuple[datetime, float] | None, now: datetime, mono: float) -> datetime:
    """The earliest wall time a row written since `last` can carry: `last` is (wall,
    monotonic) of the last recorded read, `now`/`mono` this moment. The clock stepped
    back in between shows less than `last` plus the seconds that passed, and any time it
    showed since is at least `now` less those seconds. Without `last` (or if the monotonic
    clock is not comparable): `now`."""
    if last is None or mono < last[1]:
        return now
    return min(last[0], now - timedelta(seconds=mono - last[1]))


class Reads:
    """The ended runs read (run id -> updated_at), complete from `floor` on: every row
    whose `updated_at` is at or after it and that was committed before the last read is
    in `keys`. None before the first read."""

    def __init__(self) -> None:
        self.keys: dict[str, datetime] = {}
        self.floor: datetime | None = None

    def fresh(self, keys: Iterable[tuple[str, datetime]]) -> list[str]:
        """The run ids among `keys` not read before as they are now (new, or changed since)."""
        return [run_id for run_id, at in keys if self.keys.get(run_id) != at]

    def news(self, runs: Iterable[Any]) -> set[str]:
        """The run ids among the ended `runs` (read just now) that this process never read
        although it read every row of their time: runs that ended since, whatever their
        times say. A row of a run read before that was written again (a note added to it)
        is not new, nor is one whose finish is before `floor` (a late write to an old run)."""
        if self.floor is None:
            return set()
        lo = self.floor
        return {
            r.run_id
            for r in runs
            if r.run_id not in self.keys and (r.updated_at or lo) >= lo and (r.finished_at or r.updated_at or lo) >= lo
        }

    def remember(self, keys: Mapping[str, datetime], since: datetime, keep_from: datetime) -> None:
        """A recorded round read `keys`, every row from `since` on: keep them, and forget
        those before `keep_from` (and the oldest beyond KEEP_MAX)."""
        self.keys.update(keys)
        self.floor = since if self.floor is None else min(self.floor, since)
        if self.floor < keep_from - timedelta(seconds=TRIM_EVERY_S):
            self.keys = {run_id: at for run_id, at in self.keys.items() if at >= keep_from}
            self.floor = keep_from
        if len(self.keys) > KEEP_MAX * 3 // 2:
            kept = sorted(self.keys.items(), key=lambda kv: kv[1])[-KEEP_MAX:]
            self.keys = dict(kept)
            # rows at the first kept time may have been dropped: complete only after it
            self.floor = max(self.floor, kept[0][1] + timedelta(microseconds=1))

    def forget(self) -> None:
        """Read nothing yet (another node decides now: what it decided is not known here)."""
        self.keys, self.floor = {}, None
