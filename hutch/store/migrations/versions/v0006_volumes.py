"""Volumes (`volumes`): named storage of a team's that outlives boxes; the mounts of a box
(`sandboxes.volumes`) and of the box a snapshot was taken of (`snapshots.volumes`).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "volumes",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("team_id", sa.String(36), sa.ForeignKey("teams.id"), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("size_mib", sa.Integer, nullable=False),
        sa.Column("metadata", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("team_id", "name", name="uq_volumes_team_name"),
    )
    op.create_index("ix_volumes_team_id", "volumes", ["team_id"])
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("volumes", sa.Text))
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(sa.Column("volumes", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("volumes")
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("volumes")
    op.drop_index("ix_volumes_team_id", "volumes")
    op.drop_table("volumes")
