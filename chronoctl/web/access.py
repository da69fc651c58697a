"""Who may look at the console and who may act through it.

Three ways in, chosen when `chronoctl web` starts:

- nothing configured: loopback only (the listen address must be 127.0.0.1, ::1 or
  localhost), every page read-only, and a request whose Host header is not a loopback
  name is refused (a web page elsewhere cannot reach the console by DNS rebinding); the
  ledger is private, so only connections of the user the console runs as (and root's)
  are answered: loopback is open to every local user (`peer_uid`);
- `--token-file FILE`: each line `NAME TOKEN` (or a bare `TOKEN`, named `token`); a
  request carries `Authorization: Bearer TOKEN`, or a browser signs in once on /login
  and keeps a signed session cookie; the name is who pauses, resumes and triggers;
- `--trusted-proxy ADDR --user-header NAME`: a reverse proxy at one of the given addresses
  authenticates the user and passes the name in that header; the header is believed
  only from those addresses. A loopback address is every local user's, so a proxy there
  is believed only on connections of the accounts `--proxy-user` names (its user).

Actions need `--allow-actions` and an authenticated name: a console nobody signed in to
never changes anything.
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

from chronoctl.errors import UsageError


class _Headers(Protocol):
    def get(self, key: str) -> str | None: ...


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
TOKEN_MIN = 16  # characters: shorter tokens can be guessed over the network


@dataclass(frozen=True)
class Access:
    """How requests are authenticated (nothing: loopback, read-only)."""

    tokens: tuple[tuple[str, str], ...] = ()  # (name, token)
    proxies: frozenset[str] = field(default_factory=frozenset)
    user_header: str | None = None
    # without sign-in, the local users whose connections are answered (None: any; a
    # console made by `chronoctl web` has its own user and root)
    local_users: frozenset[int] | None = None
    # the accounts a proxy on a loopback address runs as: only their connections are it
    proxy_uids: frozenset[int] = field(default_factory=frozenset)

    def local_user_allowed(self, environ: Mapping[str, Any]) -> bool:
        """Whether a request without sign-in comes from a socket of one of `local_users`."""
        if self.local_users is None:
            return True
        uid = peer_uid(environ.get("REMOTE_ADDR"), environ.get("REMOTE_PORT"))
        return uid is not None and uid in self.local_users

    @property
    def configured(self) -> bool:
        return bool(self.tokens) or (bool(self.proxies) and self.user_header is not None)

    def name_for_token(self, given: str) -> str | None:
        """The name of the token `given`, compared in constant time; None when none matches."""
        found = None
        for name, token in self.tokens:
            if hmac.compare_digest(token.encode(), given.encode()):
                found = name
        return found

    def proxy_user(self, remote_addr: str | None, headers: _Headers, remote_port: Any = None) -> str | None:
        """The user name a trusted proxy passed, None when the request did not come from one
        (from a loopback address: from a socket of one of `proxy_uids`)."""
        if not self.user_header or remote_addr is None or _normal(remote_addr) not in self.proxies:
            return None
        if is_loopback(remote_addr) and peer_uid(remote_addr, remote_port) not in self.proxy_uids:
            return None  # another local user, who reaches loopback as the proxy does
        value = headers.get(self.user_header)
        value = (value or "").strip()
        return value if value and value.isprintable() and len(value) <= 128 else None


def _proxy_uids(proxies: list[str], names: list[str]) -> frozenset[int]:
    """The uids of `--proxy-user`; required when a trusted proxy has a loopback address."""
    import pwd

    uids = set()
    for name in names:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            raise UsageError(f"--proxy-user {name!r}: no such user", "name the account the proxy runs as") from None
    if not uids and any(is_loopback(p) for p in proxies):
        raise UsageError(
            "--trusted-proxy on a loopback address would believe every local user: anyone on this host "
            "can connect from there and send the user header",
            "add --proxy-user with the account the proxy runs as (e.g. --proxy-user www-data)",
        )
    return frozenset(uids)


def peer_uid(addr: Any, port: Any) -> int | None:
    """The user owning the local socket at `addr`:`port` (the client end of a loopback
    connection), from the kernel's socket tables (/proc/net/tcp, tcp6); None when it is
    not found (not Linux, not a local connection)."""
    try:
        ip, number = ipaddress.ip_address(str(addr).strip("[]")), int(port)
    except (TypeError, ValueError):
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    # the tables write each 32-bit word of the address in the host's byte order
    raw = ip.packed
    words = [raw[i : i + 4] for i in range(0, len(raw), 4)]
    wanted = "".join(f"{struct.unpack('=I', w)[0]:08X}" for w in words) + f":{number:04X}"
    mapped = "0000000000000000FFFF0000" + wanted if ip.version == 4 else None  # a v4 peer of a v6 socket
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 7 and fields[1].upper() in (wanted, mapped):
                        return int(fields[7])
        except (OSError, ValueError):
            continue
    return None


def _normal(addr: str) -> str:
    try:
        return str(ipaddress.ip_address(addr.strip("[]")))
    except ValueError:
        return addr


def read_tokens(path: Path) -> tuple[tuple[str, str], ...]:
    """The tokens of a token file; UsageError (file, line, what to do) when it is unsafe or wrong."""
    try:
        st = os.stat(path)
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"--token-file {path}: {exc.strerror or exc}", "give a file with one `NAME TOKEN` a line"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--token-file {path} is not a regular file")
    if st.st_mode & 0o077:
        raise UsageError(
            f"--token-file {path} is readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o})",
            f"chmod 600 {path}",
        )
    tokens: list[tuple[str, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) > 2:
            raise UsageError(f"{path}:{n}: a line is `NAME TOKEN` or `TOKEN`, not {len(words)} words")
        name, token = (words[0], words[1]) if len(words) == 2 else ("token", words[0])
        if len(token) < TOKEN_MIN:
            raise UsageError(
                f"{path}:{n}: the token of {name!r} is {len(token)} characters; at least {TOKEN_MIN} are needed",
                "make one with: openssl rand -hex 24",
            )
        tokens.append((name, token))
    if not tokens:
        raise UsageError(f"--token-file {path} holds no token", "add a line `NAME TOKEN` (openssl rand -hex 24)")
    return tuple(tokens)


def is_loopback(host: str) -> bool:
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `PORT` (on 127.0.0.1)."""
    text = text.strip()
    if text.isdigit():
        host, port_text = "127.0.0.1", text
    elif text.startswith("["):
        host, _, port_text = text[1:].partition("]:")
    else:
        host, _, port_text = text.rpartition(":")
    if not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--listen {text!r} is not HOST:PORT", "e.g. --listen 127.0.0.1:8470")
    return host, int(port_text)


def check_listen(host: str, access: Access) -> None:
    """Refuse a non-loopback address without an authentication method."""
    if is_loopback(host) or access.configured:
        return
    raise UsageError(
        f"--listen {host}: the console would be open to the network without authentication",
        "add --token-file FILE, or --trusted-proxy ADDR --user-header NAME behind a reverse proxy "
        "that authenticates; or listen on 127.0.0.1",
    )


def make_access(
    token_file: Path | None, proxies: list[str], user_header: str | None, proxy_users: list[str] | None = None
) -> Access:
    if bool(proxies) != bool(user_header):
        raise UsageError(
            "--trusted-proxy and --user-header go together",
            "e.g. --trusted-proxy 127.0.0.1 --user-header X-Forwarded-User",
        )
    for p in proxies:
        try:
            ipaddress.ip_address(p.strip("[]"))
        except ValueError:
            raise UsageError(
                f"--trusted-proxy {p!r} is not an IP address", "give the proxy's address, e.g. 10.0.0.5"
            ) from None
    access = Access(
        tokens=read_tokens(token_file) if token_file is not None else (),
        proxies=frozenset(_normal(p) for p in proxies),
        user_header=user_header,
        proxy_uids=_proxy_uids(proxies, proxy_users or []),
    )
    if access.configured:
        return access
    return dataclasses.replace(access, local_users=frozenset({os.geteuid(), 0}))
