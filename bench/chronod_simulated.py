"""chronod with launches simulated: the real daemon, whose runs start no process.

Every attempt "runs" for `CHRONO_BENCH_RUN_S` seconds (0.1 by default) and exits 0; the
claim, the attempt row, the process ids, the ending and the notifier are the daemon's own
(`chronod.sim.launches`). `bench_fleet.py --launches simulated` starts its nodes with this
program to measure what the database and the nodes can coordinate, without the cost of
forking the jobs. It takes chronod's options. It is not installed with chrono: a daemon
that recorded runs that never ran as succeeded must not be one option away in production.

    .venv/bin/python bench/chronod_simulated.py --db URL --registry DIR --node n0 --state-dir DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from chronod.daemon.main import main
from chronod.sim.launches import SimulatedLaunches

if __name__ == "__main__":
    run_s = float(os.environ.get("CHRONO_BENCH_RUN_S", "0.1"))
    sys.exit(main(sys.argv[1:], make_runner=lambda state_dir: SimulatedLaunches(Path(state_dir), run_s)))
