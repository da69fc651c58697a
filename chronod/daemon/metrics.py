"""Prometheus metrics of one chronod, on their own registry, and the address they are served on."""

from __future__ import annotations


class AddressError(ValueError):
    """A metrics address that is malformed or cannot be listened on: a configuration error."""


def parse_addr(addr: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` or `[V6]:PORT` -> (host, port); AddressError says what is wrong."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise AddressError(
            f"--metrics-addr {addr!r}: expected HOST:PORT or :PORT with a port from 0 to 65535 "
            f"(e.g. 127.0.0.1:9464)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)


class Metrics:
    """Every metric chronod exports; `serve()` starts the HTTP endpoint."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        r = self.registry = CollectorRegistry()
        self.fire_lag = Histogram(
            "chrono_fire_lag_seconds", "Process start minus fire time", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.runs = Counter("chrono_runs_total", "Occurrences that reached a terminal state", ["state"], registry=r)
        self.running = Gauge("chrono_running_runs", "Runs in progress on this node", registry=r)
        self.jobs = Gauge("chrono_jobs", "Jobs this node carries", registry=r)
        self.without_next = Gauge(
            "chrono_definitions_without_next_timer",
            "Enabled jobs found without a stored next occurrence at the last reconcile", registry=r,
        )
        self.repairs = Counter("chrono_reconciler_repairs_total", "Next occurrences re-created by the reconciler", registry=r)
        self.last_success = Gauge("chrono_last_success_timestamp_seconds", "Last successful run per job", ["job"], registry=r)
        self.registry_errors = Gauge("chrono_registry_errors", "Registry files with errors", registry=r)
        self.db_restored = Counter(
            "chrono_db_restored_total", "SQLite database files found unlinked, replaced or truncated under the "
            "daemon, by what happened (unlinked and replaced are restored; truncated, failed are not)",
            ["what"], registry=r,
        )
        self.quarantined = Gauge(
            "chrono_jobs_quarantined", "Jobs set aside because computing with their definition raised", registry=r,
        )
        self.stale = Counter(
            "dispatch_rejected_stale_token_total", "Writes rejected because the fencing token was stale", registry=r,
        )
        self.lease_token = Gauge("chrono_lease_token", "Current fencing token of this node", registry=r)
        self.rescued = Counter(
            "chrono_rescued_total", "Occurrences of jobs another node owns, still unclaimed after their fire time "
            "and taken by this node", registry=r,
        )
        self.takeovers = Counter(
            "chrono_takeovers_total", "Runs of expired nodes taken over, by outcome (redispatched, lost)",
            ["outcome"], registry=r,
        )
        self.store_up = Gauge("chrono_store_up", "1 while the database answers, 0 during an outage", registry=r)
        self.store_up.set(1)
        # chronod.notify: the dead man's switch and the notices it and the history raise.
        self.job_silent = Gauge("chrono_job_silent", "1 while a job has had no success for max_silence_s", ["job"], registry=r)
        self.notices = Counter("chrono_notifications_total", "Notices recorded for delivery, by event", ["event"], registry=r)
        self.notify_failures = Counter(
            "chrono_notify_failures_total", "Notice deliveries that failed (each is retried later)", ["channel"], registry=r,
        )
        # chronod.daemon.pruner: retention, and the size it keeps the database at.
        self.pruned = Counter("chrono_pruned_runs_total", "Runs deleted past their job's history_days", registry=r)
        self.database_bytes = Gauge("chrono_database_bytes", "Size of the database, measured each pruning round", registry=r)
        self.stored_runs = Gauge("chrono_stored_runs", "Runs in the database by state, measured each pruning round",
                                 ["state"], registry=r)

    def serve(self, addr: str) -> None:
        """Listen on HOST:PORT (a thread of prometheus_client); AddressError when it cannot."""
        from prometheus_client import start_http_server

        host, port = parse_addr(addr)
        try:
            start_http_server(port, addr=host, registry=self.registry)
        except OSError as e:
            reason = e.strerror or str(e)
            raise AddressError(f"--metrics-addr {addr}: cannot listen there ({reason}): choose a free "
                               f"port on an address of this host") from None
