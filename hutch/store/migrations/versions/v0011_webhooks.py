"""Webhooks (`webhooks`): a team's endpoints, delivered its events past a cursor under a lease; and
each delivery's attempts (`webhook_deliveries`).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

LOG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("team_id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("types", sa.Text, nullable=False),
        sa.Column("sealed", sa.LargeBinary, nullable=False),
        sa.Column("flavor", sa.String(8), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("disabled_reason", sa.Text),
        sa.Column("cursor", LOG_ID, nullable=False),
        sa.Column("lease_owner", sa.String(64)),
        sa.Column("lease_until", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_webhooks_team", "webhooks", ["team_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", LOG_ID, primary_key=True, autoincrement=True),
        sa.Column("webhook_id", sa.String(36), nullable=False),
        sa.Column("event_id", LOG_ID, nullable=False),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("status", sa.Integer),
        sa.Column("error", sa.String(500)),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("duration_ms", sa.Integer, nullable=False),
    )
    op.create_index("ix_webhook_deliveries_webhook", "webhook_deliveries", ["webhook_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_webhook", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_webhooks_team", table_name="webhooks")
    op.drop_table("webhooks")
