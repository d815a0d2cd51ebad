"""Snapshots (`snapshots`): a box's saved state (memory, processes and files, or its files only),
which new boxes boot from, with the shape and environment of the box it was taken of; and whether
a box's timeout pauses it with its memory or its files only (`sandboxes.pause_memory`).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("team_id", sa.String(36), sa.ForeignKey("teams.id"), nullable=False),
        sa.Column("name", sa.String(128)),
        sa.Column("metadata", sa.Text, nullable=False),
        sa.Column("source_sandbox_id", sa.String(36)),
        sa.Column("template_id", sa.String(36)),
        sa.Column("template", sa.String(128), nullable=False),
        sa.Column("rootfs", sa.Text),
        sa.Column("vcpu", sa.Integer, nullable=False),
        sa.Column("memory_mib", sa.Integer, nullable=False),
        sa.Column("disk_mib", sa.Integer),
        sa.Column("env_vars", sa.Text, nullable=False),
        sa.Column("network", sa.Text),
        sa.Column("secrets", sa.Text, nullable=False),
        sa.Column("memory", sa.Boolean, nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("team_id", "name", name="uq_snapshots_team_name"),
    )
    op.create_index("ix_snapshots_team_id", "snapshots", ["team_id"])
    op.create_index("ix_snapshots_template_id", "snapshots", ["template_id"])
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("pause_memory", sa.Boolean))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("pause_memory")
    op.drop_index("ix_snapshots_template_id", "snapshots")
    op.drop_index("ix_snapshots_team_id", "snapshots")
    op.drop_table("snapshots")
