"""Builds in a fleet: the node that claimed a build (`template_builds.node`), and the root it builds
on (`template_builds.parent_rootfs`), which the shared roots' collector keeps while it runs.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("template_builds") as batch:
        batch.add_column(sa.Column("node", sa.String(64)))
        batch.add_column(sa.Column("parent_rootfs", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("template_builds") as batch:
        batch.drop_column("parent_rootfs")
        batch.drop_column("node")
