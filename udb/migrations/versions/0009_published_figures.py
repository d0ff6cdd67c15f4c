"""The published lnode table carries the cycle's due share and near-future proportion
(fairshare.core.lnode.LnodeTable.due and .pri), so displays show the figures the cycle
computed instead of deriving them again.

Nullable: a table published by an older daemon has none (the displays then show "-").

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lnodes") as batch:
        batch.add_column(sa.Column("due", sa.Float, nullable=True))
        batch.add_column(sa.Column("pri", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lnodes") as batch:
        batch.drop_column("pri")
        batch.drop_column("due")
