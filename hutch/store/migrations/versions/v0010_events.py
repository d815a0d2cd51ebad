"""The events log (`events`): every change of a box's, a snapshot's or a template build's state,
read by cursor.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

LOG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", LOG_ID, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("team_id", sa.String(36), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("sandbox_id", sa.String(36)),
        sa.Column("data", sa.Text, nullable=False),
        sqlite_autoincrement=True,  # an id is never given twice, even once retention emptied the table
    )
    op.create_index("ix_events_team", "events", ["team_id", "id"])
    op.create_index("ix_events_sandbox", "events", ["sandbox_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_events_sandbox", table_name="events")
    op.drop_index("ix_events_team", table_name="events")
    op.drop_table("events")
