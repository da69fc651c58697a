"""Prometheus metrics of one chronod, on their own registry, and the address they are served on."""

from __future__ import annotations


class AddressError(ValueError):
    """A metrics address that is malformed or cannot be listened on: a configuration error."""


def parse_addr(addr: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` or `[V6]:PORT` -> (host, port); AddressError says what is wrong."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise AddressError(
            f"--metrics-addr {addr!r}: expected HOST:PORT or :PORT with a port from 0 to 65535 (e.g. 127.0.0.1:9464)"
        )
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)


HEALTHZ_MAX_AGE_S = 90.0  # the loop wakes at least every 60 s (the lease renewal); more is a stall


class Metrics:
    """Every metric chronod exports; `serve()` starts the HTTP endpoint."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        r = self.registry = CollectorRegistry()
        self.fire_lag = Histogram(
            "chrono_fire_lag_seconds",
            "Process start minus fire time",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        # The `job` label is bounded by the registry: one series per job and terminal state
        # (at most jobs x 10), the same bound as chrono_last_success_timestamp_seconds.
        self.runs = Counter(
            "chrono_runs_total",
            "Occurrences that reached a terminal state, by job and state",
            ["job", "state"],
            registry=r,
        )
        self.running = Gauge("chrono_running_runs", "Runs in progress on this node", registry=r)
        self.jobs = Gauge("chrono_jobs", "Jobs this node carries", registry=r)
        self.without_next = Gauge(
            "chrono_definitions_without_next_timer",
            "Enabled jobs found without a stored next occurrence at the last reconcile",
            registry=r,
        )
        self.repairs = Counter(
            "chrono_reconciler_repairs_total", "Next occurrences re-created by the reconciler", registry=r
        )
        self.last_success = Gauge(
            "chrono_last_success_timestamp_seconds", "Last successful run per job", ["job"], registry=r
        )
        self.registry_errors = Gauge("chrono_registry_errors", "Registry files with errors", registry=r)
        self.db_restored = Counter(
            "chrono_db_restored_total",
            "SQLite database files found unlinked, replaced or truncated under the "
            "daemon, by what happened (unlinked and replaced are restored; truncated, failed are not)",
            ["what"],
            registry=r,
        )
        self.quarantined = Gauge(
            "chrono_jobs_quarantined",
            "Jobs set aside because computing with their definition raised",
            registry=r,
        )
        self.stale = Counter(
            "chrono_dispatch_rejected_stale_token_total",
            "Writes rejected because the fencing token was stale",
            registry=r,
        )
        self.lease_token = Gauge("chrono_lease_token", "Current fencing token of this node", registry=r)
        self.rescued = Counter(
            "chrono_rescued_total",
            "Occurrences of jobs another node owns, still unclaimed after their fire time and taken by this node",
            registry=r,
        )
        self.takeovers = Counter(
            "chrono_takeovers_total",
            "Runs of expired nodes taken over, by outcome (redispatched, lost)",
            ["outcome"],
            registry=r,
        )
        self.store_up = Gauge("chrono_store_up", "1 while the database answers, 0 during an outage", registry=r)
        self.store_up.set(1)
        # chronod.notify: the dead man's switch and the notices it and the history raise.
        self.job_silent = Gauge(
            "chrono_job_silent", "1 while a job has had no success for max_silence_s", ["job"], registry=r
        )
        self.notices = Counter(
            "chrono_notifications_total", "Notices recorded for delivery, by event", ["event"], registry=r
        )
        self.notify_failures = Counter(
            "chrono_notify_failures_total",
            "Notice deliveries that failed (each is retried later)",
            ["channel"],
            registry=r,
        )
        # chronod.daemon.pruner: retention, and the size it keeps the database at.
        self.pruned = Counter("chrono_pruned_runs_total", "Runs deleted past their job's history_days", registry=r)
        self.database_bytes = Gauge(
            "chrono_database_bytes", "Size of the database, measured each pruning round", registry=r
        )
        self.stored_runs = Gauge(
            "chrono_stored_runs", "Runs in the database by state, measured each pruning round", ["state"], registry=r
        )

        self.beat_at: float | None = None  # monotonic time of the loop's last turn

    def beat(self) -> None:
        """The loop took a turn: `/healthz` answers from the time of the last one."""
        import time

        self.beat_at = time.monotonic()

    def healthy(self, max_age_s: float = HEALTHZ_MAX_AGE_S) -> bool:
        """True while the loop took a turn in the last `max_age_s` seconds."""
        import time

        return self.beat_at is not None and time.monotonic() - self.beat_at <= max_age_s

    def serve(self, addr: str) -> None:
        """Listen on HOST:PORT in a thread: `/metrics` (Prometheus text) and `/healthz`
        (200 while the loop turns, 503 when it has stalled); every other path is 404.
        AddressError when it cannot listen."""
        host, port = parse_addr(addr)
        try:
            _start_server(self, host, port)
        except OSError as e:
            reason = e.strerror or str(e)
            raise AddressError(
                f"--metrics-addr {addr}: cannot listen there ({reason}): choose a free port on an address of this host"
            ) from None


def _start_server(metrics: Metrics, host: str, port: int) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                ok = metrics.healthy()
                self._send(200 if ok else 503, b"ok\n" if ok else b"the loop has stalled\n", "text/plain")
            else:
                self._send(404, b"not found: chronod serves /metrics and /healthz\n", "text/plain")

        def _send(self, code: int, body: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
