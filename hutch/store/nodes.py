"""The store's fleet: its nodes, what failing a node does to the boxes on it, and the keys every fleet process shares."""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa

from hutch.store.database import Database, conflict_insert
from hutch.store.events import record
from hutch.store.records import NodeRecord, NodeState, SandboxStatus
from hutch.store.schema import fleet_keys, nodes, sandboxes

# a sandbox whose box is on its node: a paused one's is not (its checkpoint is in the fleet's shared
# directory, and it resumes wherever there is room), nor a resuming one's (it is being restored from
# that checkpoint, on whatever node Ray chose; a restore that fails puts it back to paused)
ON_ITS_NODE = (SandboxStatus.ACTIVE, SandboxStatus.PAUSING)


class NodeQueries(Database):
    def upsert_node(self, rec: NodeRecord) -> None:
        """Insert a node, or replace what is known of it (it started again, or it is seen)."""
        row = vars(rec)
        with self._tx() as c:
            q = conflict_insert(c, nodes).values(**row)
            c.execute(q.on_conflict_do_update(index_elements=[nodes.c.id],
                                              set_={k: v for k, v in row.items() if k != "id"}))

    def get_node(self, node_id: str) -> NodeRecord | None:
        with self._tx() as c:
            row = c.execute(sa.select(nodes).where(nodes.c.id == node_id)).first()
        return NodeRecord(**row._mapping) if row else None

    def list_nodes(self, state: str | None = None) -> list[NodeRecord]:
        """By name; only those in `state` if given."""
        q = sa.select(nodes)
        if state is not None:
            q = q.where(nodes.c.state == state)
        with self._tx() as c:
            recs = [NodeRecord(**r._mapping) for r in c.execute(q)]
        return sorted(recs, key=lambda n: n.id)  # here, not in SQL: a database's collation may order names otherwise

    def mark_node_down(self, node_id: str) -> bool:
        """Mark a node down. True only for the one caller that changed it (a conditional UPDATE):
        of several processes that see it die, that one goes on to fail its boxes."""
        with self._tx() as c:
            q = nodes.update().where(nodes.c.id == node_id, nodes.c.state != NodeState.DOWN)
            return bool(c.execute(q.values(state=NodeState.DOWN)).rowcount)

    def fail_boxes_of(self, node: str, reason: str) -> list[str]:
        """Every sandbox whose box is on `node` (active, pausing, resuming) becomes failed, with
        `reason` as its failure, in one UPDATE, each with its event (`sandbox.failed`, the node
        named); returns their ids. A paused one stays paused; a box that moved to another node,
        or ended, meanwhile is not touched."""
        s = sandboxes.c
        q = (sandboxes.update().where(s.node == node, s.status.in_(ON_ITS_NODE))
             .values(status=SandboxStatus.FAILED, failure=reason, pause_at=None, updated_at=time.time())
             .returning(s.id, s.team_id))
        with self._tx() as c:
            failed = sorted((str(row.id), str(row.team_id)) for row in c.execute(q))
            for sandbox_id, team_id in failed:
                record(c, team_id, "sandbox.failed", sandbox_id, reason=reason, node=node)
        return [sandbox_id for sandbox_id, _ in failed]

    def key(self, name: str, make: Callable[[], bytes]) -> bytes:
        """The fleet's key of that name: the stored one, or else `make()`'s, stored. Processes
        asking at once all get the same bytes: each inserts giving way to a key already there,
        then reads back the one that stayed."""
        q = sa.select(fleet_keys.c.value).where(fleet_keys.c.name == name)
        with self._tx() as c:
            found = c.execute(q).scalar()
        if found is not None:
            return bytes(found)
        value = make()
        with self._tx() as c:
            c.execute(conflict_insert(c, fleet_keys).values(name=name, value=value)
                      .on_conflict_do_nothing(index_elements=[fleet_keys.c.name]))
            return bytes(c.execute(q).scalar_one())
