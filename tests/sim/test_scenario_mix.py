"""The simulation's job mix: at most SECONDS_JOBS jobs with a schedule in seconds (every
other draw as before), and the old mix, 5 % of jobs, when asked for."""

from __future__ import annotations

import random
from pathlib import Path

from chronod.sim.fleet import fleet_jobs
from chronod.sim.scenario import SECONDS_JOBS, Registry, in_seconds


def _schedules(tmp: Path, cap: int | None) -> list[str]:
    reg = Registry(tmp, random.Random(3), dst=True)
    reg.seconds_jobs = cap
    reg.build(500)
    for _ in range(100):  # operator edits add and change jobs too
        reg.edit()
    return [p.doc["schedule"] for p in reg.plans().values()]


def test_at_most_seconds_jobs_schedules_in_seconds_and_the_rest_drawn_as_before(tmp_path: Path) -> None:
    capped = _schedules(tmp_path / "capped", SECONDS_JOBS)
    drawn = _schedules(tmp_path / "drawn", None)
    assert sum(map(in_seconds, capped)) <= SECONDS_JOBS
    assert sum(map(in_seconds, drawn)) > SECONDS_JOBS  # the old mix: about 5 % of 500
    assert len(capped) == len(drawn)
    # only schedules in seconds beyond the cap changed, to every five minutes
    changed = [(a, b) for a, b in zip(capped, drawn) if a != b]
    assert changed and all(a == "*/5 * * * *" and in_seconds(b) for a, b in changed)


def test_a_fleets_mix_is_capped_the_same_way() -> None:
    capped = [p.doc for p in fleet_jobs(300, random.Random(5))]
    drawn = [p.doc for p in fleet_jobs(300, random.Random(5), None)]
    assert sum(in_seconds(d["schedule"]) for d in capped) == SECONDS_JOBS
    assert sum(in_seconds(d["schedule"]) for d in drawn) > 2 * SECONDS_JOBS  # 15 % of 300
    for a, b in zip(capped, drawn):
        assert a == b or (a == {**b, "schedule": "*/5 * * * *"} and in_seconds(b["schedule"]))
