"""The simulated world's wall clock at a monotonic time (`World.wall_at`) adds up the clock
steps made after it; the checks ask millions of times over a day, so the sums are kept
between steps. The answer is the one the sum over the steps gives, to the last bit."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from chronod.core.clock import FakeClock
from chronod.sim.world import World


def _summed(w: World, mono: float, after_step: bool) -> datetime:
    later = sum(s for m, s in w.steps if m > mono or (m == mono and not after_step))
    return w.clock.now() - timedelta(seconds=w.mono() - mono + later)


def test_wall_at_is_the_sum_over_the_steps_after_it() -> None:
    rng = random.Random(4)
    w = World(FakeClock(datetime(2026, 3, 1, tzinfo=UTC)), rng)
    asked = 0
    for _ in range(300):
        op = rng.random()
        if op < 0.3:
            w.advance_to(w.mono() + rng.choice([0.0, 0.001, 0.1, 7.3, 3600.0]))
        elif op < 0.45:
            w.step_wall(rng.choice([-3600.0, -0.7, 0.1, 1.0 / 3, 59.9, 7200.0]))
        else:
            times = [m for m, _ in w.steps] + [rng.uniform(900.0, w.mono() + 100.0)]
            mono = rng.choice(times)
            for after_step in (True, False):
                assert w.wall_at(mono, after_step) == _summed(w, mono, after_step), (mono, after_step)
                asked += 1
    assert len(w.steps) > 20 and asked > 200


class _Walked(list[tuple[float, float]]):
    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        _Walked.walks += 1
        return super().__iter__()


def test_the_steps_are_not_walked_again_until_one_more_is_made() -> None:
    w = World(FakeClock(datetime(2026, 3, 1, tzinfo=UTC)), random.Random(1))
    w.steps = _Walked()
    for k in range(50):
        w.advance_to(w.mono() + 10)
        w.step_wall(-1.5 if k % 2 else 2.25)
    first = w.wall_at(1200.0)
    _Walked.walks = 0
    assert all(w.wall_at(1200.0) == first for _ in range(100))
    assert _Walked.walks == 0
