"""The two notification channels: a command, and a webhook (HTTP POST of JSON, http.client only).

Both raise `DeliveryError` with a one-line reason an operator can act on; the service logs
it, counts it and tries the row again later.
"""

from __future__ import annotations

import http.client
import json
import os
import selectors
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from typing import Any, Callable

WEBHOOK_TRIES = 3
WEBHOOK_BACKOFF_S = (1.0, 4.0)  # before the second and the third try
TAIL_BYTES = 4096  # of output kept in a notice


class DeliveryError(Exception):
    """A notice could not be delivered; the message says where and why."""


def command_env(payload: dict[str, Any]) -> dict[str, str]:
    """The environment of a notify command: a minimal base plus CHRONO_EVENT, CHRONO_JOB_ID,
    CHRONO_RUN_ID, CHRONO_OWNER, CHRONO_STATE (and CHRONO_NODE, CHRONO_NOTICE: the JSON body)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/", "LANG": "C.UTF-8"}
    env.update(
        {
            "CHRONO_EVENT": payload["event"],
            "CHRONO_JOB_ID": payload["job_id"],
            "CHRONO_RUN_ID": payload.get("run_id") or "",
            "CHRONO_OWNER": payload.get("owner") or "",
            "CHRONO_STATE": payload.get("state") or "",
            "CHRONO_NODE": payload.get("node") or "",
            "CHRONO_NOTICE": json.dumps(payload, sort_keys=True),
        }
    )
    return env


def run_command(route: dict[str, Any], payload: dict[str, Any]) -> None:
    """Run the route's command (a string through /bin/sh, a list exec'd) with the notice in
    its environment and the run's output tail on stdin; non-zero exit or timeout fail.
    A root daemon runs it with exactly the job's credentials (see `_credentials`).

    Bounded whatever the command does: its stdout and stderr are drained as they come,
    stdout discarded and the last COMMAND_KEEP_BYTES of stderr kept (a command printing
    gigabytes costs the daemon nothing but the reading), and at `timeout_s` its whole
    process group is killed."""
    cmd = route["command"]
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    env = command_env(payload)
    ids = _credentials(route, cmd, env)
    timeout = route.get("timeout_s", 10)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
            start_new_session=True,
            **ids,
        )
    except OSError as e:
        raise DeliveryError(f"notify command {_short(cmd)} could not start: {e.strerror or e}") from None
    with _running_lock:
        _running.add(proc.pid)
    try:
        done, err = _bounded_wait(proc, (payload.get("output_tail") or "").encode(), time.monotonic() + timeout)
    finally:
        _kill_group(proc)  # a command's leftovers (`cmd &`) never outlive its delivery
    if not done:
        raise DeliveryError(f"notify command {_short(cmd)} did not finish within {timeout}s (killed)")
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        raise DeliveryError(
            f"notify command {_short(cmd)} exited {proc.returncode}" + (f": {lines[-1][:200]}" if lines else "")
        )


COMMAND_KEEP_BYTES = 64 * 1024  # of a notify command's stderr, kept for the failure's reason
_READ_CHUNK = 64 * 1024


def _bounded_wait(proc: subprocess.Popen[bytes], stdin: bytes, deadline: float) -> tuple[bool, bytes]:
    """Feed `stdin`, drain stdout and stderr until both close and the process exits, or
    until `deadline` (monotonic). Returns (finished in time, the last COMMAND_KEEP_BYTES of
    stderr); stdout is read and discarded."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    err = bytearray()
    sel = selectors.DefaultSelector()
    try:
        for out in (proc.stdout, proc.stderr):
            os.set_blocking(out.fileno(), False)
            sel.register(out, selectors.EVENT_READ)
        if stdin:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        pending = memoryview(stdin)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False, bytes(err)
            for key, _ in sel.select(min(left, 1.0)):
                f: Any = key.fileobj
                if f is proc.stdin:
                    try:
                        pending = pending[os.write(proc.stdin.fileno(), pending[:_READ_CHUNK]) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    except BlockingIOError:
                        continue
                    if not pending:
                        sel.unregister(f)
                        proc.stdin.close()
                    continue
                try:
                    data = os.read(key.fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(f)
                    continue
                if f is proc.stderr:
                    err += data
                    if len(err) > COMMAND_KEEP_BYTES:
                        del err[: len(err) - COMMAND_KEEP_BYTES]
        # Exited, but not reaped: while the command is a zombie its pid (its group's id)
        # cannot be reused, so killing the group after it never reaches another process.
        while not _exited(proc.pid):
            if time.monotonic() >= deadline:
                return False, bytes(err)
            time.sleep(0.02)
        return True, bytes(err)
    finally:
        sel.close()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None and not f.closed:
                try:
                    f.close()
                except OSError:
                    pass


_running: set[int] = set()  # process groups of the notify commands running now
_running_lock = threading.Lock()


def _exited(pid: int) -> bool:
    """Whether the child `pid` has exited, leaving it unreaped."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's process group (its own session), then reap the command: it is
    reaped only here, so its pid, the group's id, is not yet free for another process."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
    with _running_lock:
        _running.discard(proc.pid)


def kill_running() -> int:
    """SIGKILL every notify command still running (chronod is stopping: none outlives it;
    its notice is sent again after the next start). Returns how many."""
    with _running_lock:
        groups = list(_running)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return len(groups)


def _credentials(route: dict[str, Any], cmd: Any, env: dict[str, str]) -> dict[str, Any]:
    """For a root daemon and a job with `user:`/`group:`: the job's supplementary groups,
    gid and uid (subprocess sets them in that order), resolved exactly as the runner does
    for the job itself, and the account's HOME, USER, LOGNAME and SHELL in `env`."""
    if os.geteuid() != 0 or not (route.get("user") or route.get("group")):
        return {}
    from chronod.runner.runner import resolve_identity

    creds, account, error = resolve_identity(route.get("user"), route.get("group"))
    if error:
        raise DeliveryError(f"notify command {_short(cmd)} not run: {error}")
    refused = _refusal(route.get("user"))
    if refused:  # as the job's own run: a locked or expired account runs nothing
        raise DeliveryError(f"notify command {_short(cmd)} not run: {refused}")
    if account is not None:
        env.update(
            HOME=account.pw_dir or "/",
            USER=account.pw_name,
            LOGNAME=account.pw_name,
            SHELL=account.pw_shell or "/bin/sh",
        )
    if creds is None:
        return {}
    return {"user": creds.uid, "group": creds.gid, "extra_groups": list(creds.groups)}


_SHADOW: Any = None  # chronod.daemon.accounts.ShadowAccounts, made on the first command run as a user
_SHADOW_LOCK = threading.Lock()  # the delivery threads share it


def _refusal(user: str | None) -> str | None:
    """Why the account `user` may run no command now (locked or expired, as cron's PAM
    account check says: `chronod.core.accounts.refusal`), or None."""
    global _SHADOW
    if not user:
        return None
    from datetime import datetime, timezone

    from chronod.core.accounts import refusal
    from chronod.daemon.accounts import ShadowAccounts

    with _SHADOW_LOCK:
        if _SHADOW is None:
            _SHADOW = ShadowAccounts()
        account = _SHADOW.account(user)
    return refusal(account, datetime.now(timezone.utc))


MAX_TIMEOUT_S = 300  # the largest timeout_s a route may set (chronod.core.validate)
# The longest one delivery can take, every try at its deadline: a claim on a notice
# outlives it, so that no other node sends the notice while this one still may.
LONGEST_DELIVERY_S = WEBHOOK_TRIES * MAX_TIMEOUT_S + sum(WEBHOOK_BACKOFF_S) + 30
WEBHOOK_RESPONSE_BYTES = 64 * 1024  # of a webhook's answer read (status, headers, body): the rest is not


def post_webhook(
    route: dict[str, Any], payload: dict[str, Any], *, sleep: Callable[[float], None] = time.sleep
) -> None:
    """POST the JSON body to the route's URL; up to WEBHOOK_TRIES tries with WEBHOOK_BACKOFF_S
    between them; a 2xx answer is success, anything else (after the last try) fails.

    Each try is one exchange bounded as a whole: connecting, sending and reading the answer
    share `timeout_s` (a server that answers a byte at a time cannot stretch it), and at most
    WEBHOOK_RESPONSE_BYTES of the answer are read."""
    url, timeout = route["webhook"], route.get("timeout_s", 10)
    body = json.dumps(payload, sort_keys=True).encode()
    headers = {"Content-Type": "application/json", "User-Agent": f"chrono/{payload.get('chrono_version', '')}"}
    last = ""
    for i in range(WEBHOOK_TRIES):
        if i:
            sleep(WEBHOOK_BACKOFF_S[min(i - 1, len(WEBHOOK_BACKOFF_S) - 1)])
        try:
            status, reason = _exchange(url, body, headers, float(timeout))
        except _Deadline:
            last = f"no complete answer within {timeout}s"
            continue
        except (OSError, http.client.HTTPException, ValueError) as e:
            last = str(getattr(e, "reason", None) or e) or type(e).__name__
            continue
        if 200 <= status < 300:
            return
        last = f"HTTP {status} {reason}".strip()
    raise DeliveryError(f"webhook {_safe_url(url)} failed after {WEBHOOK_TRIES} tries: {last}")


class _Deadline(Exception):
    """The exchange's deadline passed."""


def _exchange(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, str]:
    """One POST; (status, reason). A watchdog shuts the socket down at the deadline, so no
    read or write can outlast it, however the server paces its bytes."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {_safe_url(url)}")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.username is not None:
        import base64

        user = urllib.parse.unquote(parts.username)
        secret = urllib.parse.unquote(parts.password or "")
        headers = {**headers, "Authorization": "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()}
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(timeout, cut)
    watchdog.daemon = True
    started = time.monotonic()
    watchdog.start()
    try:
        conn.connect()  # bounded by `timeout` itself (the watchdog sees no socket before it)
        if expired.is_set():
            raise _Deadline()
        conn.request("POST", path, body=body, headers={**headers, "Connection": "close"})
        resp = conn.getresponse()
        resp.read(WEBHOOK_RESPONSE_BYTES)  # the answer's body matters not; a bounded part of it is read
        if expired.is_set():
            raise _Deadline()
        return resp.status, resp.reason or ""
    except (OSError, http.client.HTTPException):
        # the socket's own timeout equals the whole deadline, so it can fire a moment before
        # the watchdog does: either way the deadline has passed
        if expired.is_set() or time.monotonic() - started >= timeout:
            raise _Deadline() from None
        raise
    finally:
        watchdog.cancel()
        conn.close()


def deliver(route: dict[str, Any], payload: dict[str, Any]) -> None:
    """Send one notice through its route's channel."""
    if route.get("webhook"):
        post_webhook(route, payload)
    else:
        run_command(route, payload)


def _short(cmd: Any) -> str:
    text = cmd if isinstance(cmd, str) else " ".join(cmd)
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _safe_url(url: str) -> str:
    """The URL without credentials or query string (tokens often live there)."""
    from urllib.parse import urlsplit

    p = urlsplit(url)
    host = p.hostname or ""
    port = f":{p.port}" if p.port else ""
    return f"{p.scheme}://{host}{port}{p.path}"
