"""The published cycle's resource counts (for shrview -ds): totals since the daemon started.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lnode_cycles") as batch:
        batch.add_column(sa.Column("counts", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lnode_cycles") as batch:
        batch.drop_column("counts")
