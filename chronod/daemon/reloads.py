"""Where a reload's heavy half runs: reading and validating the job files, storing the
definitions, compiling the changed schedules and publishing the node's spec hashes.

With 100,000 jobs that half takes seconds; on the loop's thread it would hold every
occurrence due meanwhile (an `@every 1s` job skipped a dozen). `ThreadReloads` runs it on
a thread of its own while the loop keeps firing with the definitions it has, then wakes
the loop, which swaps the result in (`Registry.finish_reload`: cheap, in proportion to
what changed). `InlineReloads` runs it on the caller's thread, for the simulation and
tests that step the loop by hand. Both hand an error of the preparation (a database
outage) back to the loop from `take`, as if it had happened there.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

from chronod.daemon import kernel

if TYPE_CHECKING:
    from chronod.daemon.registry import Prepared


class InlineReloads:
    """The preparation runs at once, on the caller's thread."""

    def __init__(self) -> None:
        self._done: tuple[Prepared | None, BaseException | None] | None = None

    @property
    def busy(self) -> bool:
        return False

    def submit(self, work: Callable[[], Prepared]) -> None:
        try:
            self._done = (work(), None)
        except Exception as e:  # handed to the loop by take(), as the threaded kind does
            self._done = (None, e)

    def take(self) -> Prepared | None:
        """The finished preparation (None: none waiting); raises what it raised."""
        done, self._done = self._done, None
        return _result(done)

    def resume(self) -> None:
        """After the loop swapped a result in (nothing to start here)."""

    def cancel(self) -> None:
        self._done = None

    def tidy(self) -> None:
        kernel.trim_heap()


class ThreadReloads:
    """The preparation runs on its own thread; `wake` tells the loop it finished. A reload
    asked for while one is running starts after the running one was swapped in (it reads
    the definitions that swap leaves), so reloads never overlap."""

    def __init__(self, wake: Callable[[], None]):
        self.wake = wake
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done: tuple[Prepared | None, BaseException | None] | None = None
        self._again: Callable[[], Prepared] | None = None

    @property
    def busy(self) -> bool:
        return self._thread is not None

    def submit(self, work: Callable[[], Prepared]) -> None:
        with self._lock:
            if self._thread is not None:
                self._again = work  # one more reload once this one is in: it sees every change
                return
            self._thread = threading.Thread(target=self._run, args=(work,), name="chronod-reload", daemon=True)
            self._thread.start()

    def _run(self, work: Callable[[], Prepared]) -> None:
        # The loop gets the interpreter lock back within the daemon's short switch interval
        # (chronod.daemon.kernel.favour_the_loop) while this thread computes.
        try:
            done: tuple[Prepared | None, BaseException | None] = (work(), None)
        except Exception as e:  # handed to the loop by take()
            done = (None, e)
        with self._lock:
            self._done = done
        self.wake()

    def take(self) -> Prepared | None:
        """The finished preparation (None: none, or still running); raises what it raised."""
        with self._lock:
            done, self._done = self._done, None
            thread = self._thread if done is not None else None
        if thread is not None:
            thread.join()
            with self._lock:
                self._thread = None
        return _result(done)

    def resume(self) -> None:
        """Start the reload asked for while the last one ran, if any."""
        with self._lock:
            again, self._again = self._again, None
        if again is not None:
            self.submit(again)

    def cancel(self) -> None:
        """Wait for a running preparation and drop it (a reload on the loop's thread follows)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            self._thread, self._done, self._again = None, None, None

    def tidy(self) -> None:
        """Keep the heap the reload left out of later collections (`kernel.keep_heap`) and
        give freed memory back to the system, off the loop's thread (it takes a while with
        a large heap)."""
        kernel.keep_heap()
        threading.Thread(target=kernel.trim_heap, name="chronod-trim", daemon=True).start()


def _result(done: tuple[Prepared | None, BaseException | None] | None) -> Prepared | None:
    if done is None:
        return None
    result, err = done
    if err is not None:
        raise err
    return result
