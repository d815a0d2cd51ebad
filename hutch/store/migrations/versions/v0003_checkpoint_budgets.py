"""Checkpoint budgets: a sandbox's checkpoint size (`sandboxes.checkpoint_bytes`), which the team's
and the node's budgets of paused boxes sum, and when a budget first refused its automatic pause
(`sandboxes.pause_refused_at`). A box paused before this revision has no size recorded: the next
single-host start measures it (the reconcile, hutch.services.recovery).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("checkpoint_bytes", sa.BigInteger))
        batch.add_column(sa.Column("pause_refused_at", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("pause_refused_at")
        batch.drop_column("checkpoint_bytes")
