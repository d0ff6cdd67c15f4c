"""A site (many hosts, one UDB): each published cycle header says how many CPUs its host
has and how much CPU its lnodes received (fairshare.core.site); each published lnode says how
much of its usage is already stored in the UDB (the rest is still owed by its host).

No new index: the write-back's locked SELECT and UPDATE go by entries.uid (unique), a
publish deletes by the lnodes' primary key (host, node), the checkpoint by (host, uid);
the site queries (GLOBALUSAGE's refresh, shrview --site) aggregate every live host's
rows, a sequential scan whatever the indexes (an index on lnodes.uid was measured,
unused by the plan, and left out: every publish would have to maintain it).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lnode_cycles") as batch:
        batch.add_column(sa.Column("cpus", sa.Float, nullable=True))
        batch.add_column(sa.Column("delivered", sa.Float, nullable=True))
    with op.batch_alter_table("lnodes") as batch:
        batch.add_column(sa.Column("stored", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lnodes") as batch:
        batch.drop_column("stored")
    with op.batch_alter_table("lnode_cycles") as batch:
        batch.drop_column("delivered")
        batch.drop_column("cpus")
