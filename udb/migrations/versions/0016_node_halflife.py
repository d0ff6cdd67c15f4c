"""Each entry may carry its own usage half-life (`halflife`, seconds; 0 = inherit): a
resource group's applies to its whole subtree, down to a group below that sets its own,
and the global half-life (shradmin -K) is the default (seed 004, section 2.2.2.4;
Kay and Lauder's differential decay rates).

Revision ID: 0016
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.add_column(sa.Column("halflife", sa.Float, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("halflife")
