"""Headers the egress proxy sets for a box (`sandboxes.header_rules`, E2B's network rules, a
secret's value in them), and a secret's metadata (`secrets.metadata`, E2B's secrets have it).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("header_rules", sa.Text))
    with op.batch_alter_table("secrets") as batch:
        batch.add_column(sa.Column("metadata", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("secrets") as batch:
        batch.drop_column("metadata")
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("header_rules")
