"""Jobs whose definition raised while the daemon computed with it, set aside so that the
other jobs keep running.

Validation and the engine share their bounds (chronod.core.bounds), so a job that passed
validation should never raise. If one does anyway (a bug, a zone database that changed
under us), the loop asks `guard` around that job's work: the exception is logged once,
counted, listed with the registry errors (so `chronoctl status` shows it), and the job is
left out until its definition changes. Database errors are not the job's fault: they pass
through to the loop, which goes offline as usual.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

from chronod.core.model import JobSpec

if TYPE_CHECKING:
    from chronod.daemon.seams import Log, Setting

T = TypeVar("T")


class Quarantine:
    """The set-aside jobs of one daemon, each with the definition that raised and why."""

    def __init__(
        self,
        log: Log,
        gauge: Setting,
        passthrough: tuple[type[BaseException], ...],
        on_change: Callable[[], None],
    ):
        self._log, self._gauge, self._passthrough, self._on_change = log, gauge, passthrough, on_change
        self._held: dict[str, tuple[JobSpec, str]] = {}  # job id -> (definition, what went wrong)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._held

    def ids(self) -> list[str]:
        """The ids of the set-aside jobs."""
        return list(self._held)

    def holds(self, spec: JobSpec) -> bool:
        """Whether this very definition of the job is set aside (a changed one is tried again)."""
        held = self._held.get(spec.id)
        return held is not None and held[0] == spec

    @contextmanager
    def guard(self, spec: JobSpec, doing: str) -> Iterator[None]:
        """Run the body; if it raises (anything but a pass-through error), set the job aside."""
        try:
            yield
        except self._passthrough:
            raise
        except Exception as exc:  # the boundary: one job's failure must not stop the others
            self.isolate(spec, doing, exc)

    def call(self, spec: JobSpec, doing: str, fn: Callable[..., T], *args: object) -> T | None:
        """`fn(*args)` under the guard (None if it raised): a plain call for the paths that
        run once per job, 100,000 times at a start-up, where the generator of `guard` cost
        as much as the work."""
        try:
            return fn(*args)
        except self._passthrough:
            raise
        except Exception as exc:  # the boundary: one job's failure must not stop the others
            self.isolate(spec, doing, exc)
            return None

    def isolate(self, spec: JobSpec, doing: str, exc: BaseException) -> None:
        if spec.id in self._held:
            return
        reason = f"{type(exc).__name__} while computing its {doing}: {exc}"
        self._held[spec.id] = (spec, reason)
        self._log(
            "job.quarantined",
            "error",
            job=spec.id,
            file=spec.source_file,
            line=spec.source_line,
            error=reason,
            hint="the other jobs keep running; fix or remove this job and reload (SIGHUP)",
        )
        self._gauge.set(len(self._held))
        self._on_change()

    def keep_only(self, specs: dict[str, JobSpec]) -> None:
        """After a reload: release jobs whose definition changed or went away."""
        for job_id, (spec, _) in list(self._held.items()):
            if specs.get(job_id) != spec:
                del self._held[job_id]
                self._log("job.released", job=job_id, why="its definition changed")
        self._gauge.set(len(self._held))

    def problems(self) -> list[dict[str, Any]]:
        """The set-aside jobs as registry errors (file, line, message)."""
        return [
            {
                "file": spec.source_file,
                "line": spec.source_line,
                "message": f"job {job_id!r} is quarantined: {reason}; "
                "the other jobs keep running; fix or remove it and reload",
            }
            for job_id, (spec, reason) in sorted(self._held.items())
        ]
