"""The leases role of the SQL store: nodes, their leases and fencing tokens (see
`chronod.store.sqldb` for the fencing predicate every fenced write uses)."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from chronod.fsutil import same_process
from chronod.store import schema as s
from chronod.store.api import Node, NodeConflict
from chronod.store.nodeinfo import NodeInfos
from chronod.store.sqldb import SqlPart, lease_held


class LeasesSql(SqlPart):
    """`chronod.store.api.Leases` over SQL."""

    _infos: NodeInfos  # each node's info decoded once per text (chronod.store.nodeinfo)

    def acquire_node(
        self, name: str, *, pid: int, hostname: str, boot_id: str, ttl_s: float, pid_start: int | None = None
    ) -> int:
        with self._tx() as c:
            self._refuse_live_holders(c, name, pid=pid, hostname=hostname, boot_id=boot_id)
            token = self._next_token(c)
            now = self._ts()
            values = dict(
                token=token,
                pid=pid,
                pid_start=pid_start,
                hostname=hostname,
                boot_id=boot_id,
                started_at=now,
                heartbeat_at=now,
                lease_expires_at=self._now_plus(ttl_s),
                stopped_at=None,
            )
            stmt = self._insert(s.nodes).values(name=name, info_json="{}", **values)
            c.execute(stmt.on_conflict_do_update(index_elements=["name"], set_=values))
            return token

    def _refuse_live_holders(self, c: Connection, name: str, *, pid: int, hostname: str, boot_id: str) -> None:
        """NodeConflict when a live lease belongs to another process that may still be running.

        SQLite: any other live node. PostgreSQL: another process under the same node name
        (different names are a fleet). A holder on this host is dead when its boot id
        differs or its process is gone (`fsutil.same_process`: pid and start time, a zombie is
        dead); a holder on another host is trusted until its lease ends.
        """
        n = s.nodes.c
        q = sa.select(s.nodes).where(*lease_held(self._now_sql()))
        if self.dialect == "postgresql":
            q = q.where(n.name == name)
        for row in c.execute(q).mappings():
            if row["hostname"] == hostname and row["pid"] == pid and row["name"] == name:
                continue
            if row["hostname"] == hostname and (
                row["boot_id"] != boot_id or not same_process(row["pid"], row["pid_start"])
            ):
                continue
            raise NodeConflict(self._conflict_message(row))

    def _conflict_message(self, row: sa.RowMapping) -> str:
        since = row["started_at"].isoformat()
        if self.dialect == "sqlite":
            return (
                f"another chronod (pid {row['pid']}, node {row['name']}) is using this database since "
                f"{since} (host {row['hostname']}); SQLite supports one node: stop it, or use PostgreSQL "
                f"for a fleet"
            )
        return (
            f"another chronod (pid {row['pid']} on host {row['hostname']}) holds node name {row['name']!r} "
            f"since {since}, lease until {row['lease_expires_at'].isoformat()}: stop it, or give this "
            f"one another --node name"
        )

    def _next_token(self, c: Connection) -> int:
        if self.dialect == "postgresql":
            return int(c.execute(sa.select(s.fencing_token_seq.next_value())).scalar_one())
        t = s.fencing_token
        stmt = self._insert(t).values(id=1, value=1)
        stmt = stmt.on_conflict_do_update(index_elements=["id"], set_={"value": t.c.value + 1})
        return int(c.execute(stmt.returning(t.c.value)).scalar_one())

    def renew_lease(self, name: str, token: int, ttl_s: float) -> bool:
        n = s.nodes.c
        with self._tx() as c:
            res = c.execute(
                s.nodes.update()
                .where(n.name == name, n.token == token, *lease_held(self._now_sql()))
                .values(heartbeat_at=self._ts(), lease_expires_at=self._now_plus(ttl_s))
            )
            return res.rowcount == 1

    def release_node(self, name: str, token: int) -> None:
        n = s.nodes.c
        with self._tx() as c:
            now = self._ts()
            c.execute(
                s.nodes.update().where(n.name == name, n.token == token).values(stopped_at=now, lease_expires_at=now)
            )

    def set_node_info(self, name: str, token: int, info: dict[str, Any] | str) -> None:
        n = s.nodes.c
        with self._tx() as c:
            c.execute(
                s.nodes.update()
                .where(n.name == name, n.token == token)
                .values(info_json=info if isinstance(info, str) else json.dumps(info, sort_keys=True, default=str))
            )

    def nodes(self) -> list[Node]:
        with self._tx(write=False) as c:
            rows = c.execute(sa.select(s.nodes).order_by(s.nodes.c.heartbeat_at.desc())).mappings().all()
        return [self._node(r) for r in rows]

    def live_nodes(self) -> list[tuple[str, int]]:
        n = s.nodes.c
        with self._tx(write=False) as c:
            return [
                tuple(r)
                for r in c.execute(sa.select(n.name, n.token).where(*lease_held(self._now_sql())).order_by(n.name))
            ]

    def expired_nodes(self) -> list[Node]:
        n = s.nodes.c
        with self._tx(write=False) as c:
            rows = (
                c.execute(
                    sa.select(s.nodes)
                    .where(n.lease_expires_at <= self._now_sql(), n.stopped_at.is_(None))
                    .order_by(n.name)
                )
                .mappings()
                .all()
            )
        return [self._node(r) for r in rows]

    def _node(self, row: sa.RowMapping) -> Node:
        d = dict(row)
        d["info"] = self._infos.decode(d["name"], d.pop("info_json"))
        return Node(**d)
