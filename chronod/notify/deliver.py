"""The two notification channels: a command, and a webhook (HTTP POST of JSON, urllib only).

Both raise `DeliveryError` with a one-line reason an operator can act on; the service logs
it, counts it and tries the row again later.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
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
    A root daemon runs it with exactly the job's credentials (see `_credentials`)."""
    cmd = route["command"]
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    env = command_env(payload)
    ids = _credentials(route, cmd, env)
    timeout = route.get("timeout_s", 10)
    try:
        res = subprocess.run(
            argv,
            input=(payload.get("output_tail") or "").encode(),
            env=env,
            cwd="/",
            capture_output=True,
            timeout=timeout,
            start_new_session=True,
            **ids,
        )
    except subprocess.TimeoutExpired:
        raise DeliveryError(f"notify command {_short(cmd)} did not finish within {timeout}s") from None
    except OSError as e:
        raise DeliveryError(f"notify command {_short(cmd)} could not start: {e.strerror or e}") from None
    if res.returncode != 0:
        err = res.stderr.decode(errors="replace").strip().splitlines()
        raise DeliveryError(
            f"notify command {_short(cmd)} exited {res.returncode}" + (f": {err[-1][:200]}" if err else "")
        )


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


def post_webhook(
    route: dict[str, Any], payload: dict[str, Any], *, sleep: Callable[[float], None] = time.sleep
) -> None:
    """POST the JSON body to the route's URL; up to WEBHOOK_TRIES tries with WEBHOOK_BACKOFF_S
    between them; a 2xx answer is success, anything else (after the last try) fails."""
    url, timeout = route["webhook"], route.get("timeout_s", 10)
    body = json.dumps(payload, sort_keys=True).encode()
    last = ""
    for i in range(WEBHOOK_TRIES):
        if i:
            sleep(WEBHOOK_BACKOFF_S[min(i - 1, len(WEBHOOK_BACKOFF_S) - 1)])
        req = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": f"chrono/{payload.get('chrono_version', '')}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                if 200 <= resp.status < 300:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code} {e.reason}"
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", None) or e)
    raise DeliveryError(f"webhook {_safe_url(url)} failed after {WEBHOOK_TRIES} tries: {last}")


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
