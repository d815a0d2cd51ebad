"""E2B's `secure` of a box (`sandboxes.secure`): false, its code interpreter's port answers at its
E2B host name without a token when its ports are public (e2b 1.x's boxes, whose interpreter client
sends none).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("secure", sa.Boolean))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("secure")
