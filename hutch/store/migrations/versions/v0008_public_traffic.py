"""Whether a box's ports answer at their E2B host names without its traffic token
(`sandboxes.public_traffic`, E2B's network.allowPublicTraffic), and whether traffic wakes it when
paused (`sandboxes.auto_resume`, E2B's lifecycle.autoResume).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("public_traffic", sa.Boolean))
        batch.add_column(sa.Column("auto_resume", sa.Boolean))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("auto_resume")
        batch.drop_column("public_traffic")
