"""The published lnode table carries what each lnode received against its fair target
(fairshare.core.delivery): `want` (CPUs it would use unconstrained), `target` (the
hierarchical max-min allocation for those wants), `got` and `got_minute` (the fraction
of the machine it received over the last cycle and about the last minute) and `flat`
(the share a flat enforcer weighs it by).

Nullable: a table published by an older daemon has none (the displays then show "-").

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

COLUMNS = ("want", "target", "got", "got_minute", "flat")


def upgrade() -> None:
    with op.batch_alter_table("lnodes") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lnodes") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
