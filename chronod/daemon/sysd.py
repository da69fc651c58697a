"""systemd's notify protocol (READY, RELOADING, STATUS, WATCHDOG, STOPPING) without libsystemd."""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    """Sends sd_notify datagrams when NOTIFY_SOCKET is set; does nothing otherwise."""

    def __init__(self, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        self._addr = env.get("NOTIFY_SOCKET") or None
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        ours = pid is None or pid == str(os.getpid())
        # systemd wants a ping within every WATCHDOG_USEC; pinging every third of it keeps
        # each gap under half of it even when a wake-up comes late on a loaded host
        self.watchdog_interval_s = int(usec) / 3e6 if usec and usec.isdigit() and ours else None

    def send(self, *fields: str) -> None:
        """Send `KEY=value` lines; errors are ignored (systemd may be restarting)."""
        if not self._addr:
            return
        addr = self._addr
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.sendto("\n".join(fields).encode(), addr)
        except OSError:
            pass

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def reloading(self) -> None:
        """A reload starts; `ready()` ends it. MONOTONIC_USEC lets systemd match it to its request."""
        self.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def stopping(self) -> None:
        self.send("STOPPING=1")
