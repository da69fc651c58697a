"""What systemd hears from a chronod: a datagram socket the test owns, as NOTIFY_SOCKET, with
every message and the monotonic time it arrived. Shared by the checkout's and the installed
package's tests, which drive the same conversation: start, idle, SIGHUP, SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

WATCHDOG_USEC = 2_000_000  # 2 s: chronod must ping at least every 1 s
IDLE_INTERVALS = 3


class NotifySocket:
    """Binds `path`; a thread records (monotonic time, fields) for each datagram."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, dict[str, str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            fields = dict(line.partition("=")[::2] for line in data.decode().splitlines() if "=" in line)
            self.messages.append((time.monotonic(), fields))

    def wait_for(self, key: str, after: int = 0, timeout: float = 30) -> int:
        """The index of the first message from `after` on that carries `key`=1."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for i, (_, f) in enumerate(self.messages[after:], start=after):
                if f.get(key) == "1":
                    return i
            time.sleep(0.02)
        raise AssertionError(f"no {key}=1 within {timeout}s; heard {[f for _, f in self.messages]}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@dataclass
class Conversation:
    """Everything one chronod said over its life: start, idle, SIGHUP, SIGTERM."""

    messages: list[tuple[float, dict[str, str]]] = field(default_factory=list)
    ready: int = -1
    idle_from: float = 0.0
    idle_to: float = 0.0
    hup_at: int = 0
    reloading: int = -1
    ready_again: int = -1
    stopping: int = -1
    exit_status: int | None = None
    log: str = ""

    def watchdog_gaps(self) -> list[float]:
        """Seconds between READY=1 and the first WATCHDOG=1, and between each WATCHDOG=1 after,
        up to the end of the idle period (the last gap runs to that end)."""
        times = [self.idle_from] + [
            t for t, f in self.messages if f.get("WATCHDOG") == "1" and self.idle_from <= t <= self.idle_to
        ]
        return [b - a for a, b in zip(times, times[1:] + [self.idle_to])]


def converse(argv: list[str], env: dict[str, str], sock_path: Path, log_path: Path) -> Conversation:
    """Start chronod, wait for READY=1, leave it idle for IDLE_INTERVALS watchdog intervals,
    SIGHUP it, then SIGTERM it; what it said and how it ended."""
    listener = NotifySocket(sock_path)
    env = {**env, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    env.pop("WATCHDOG_PID", None)
    c = Conversation()
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(
            argv, env=env, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    try:
        c.ready = listener.wait_for("READY")
        c.idle_from = listener.messages[c.ready][0]
        time.sleep(IDLE_INTERVALS * WATCHDOG_USEC / 1e6)
        c.idle_to = time.monotonic()
        c.hup_at = len(listener.messages)
        proc.send_signal(signal.SIGHUP)
        c.reloading = listener.wait_for("RELOADING", after=c.hup_at, timeout=15)
        c.ready_again = listener.wait_for("READY", after=c.reloading, timeout=15)
        stop_from = len(listener.messages)
        proc.send_signal(signal.SIGTERM)
        c.exit_status = proc.wait(30)
        c.stopping = listener.wait_for("STOPPING", after=stop_from, timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        listener.close()
        c.messages = list(listener.messages)
        c.log = log_path.read_text(errors="replace")
    return c
