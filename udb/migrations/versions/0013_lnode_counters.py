"""The lnode cgroups' CPU counters a daemon's last write-back or checkpoint covered
(`lnode_counters`: per host and lnode cgroup name, the counter in CPU s, the machine's
boot time and the epoch second written), so that a daemon killed and restarted charges
what its lnodes used meanwhile from the counters (fairshare.daemon.writeback).

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lnode_counters",
        sa.Column("host", sa.String(255), primary_key=True, nullable=False),
        sa.Column("name", sa.String(255), primary_key=True, nullable=False),
        sa.Column("cpu", sa.Float, nullable=False),
        sa.Column("boot", sa.Float, nullable=False),
        sa.Column("time", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("lnode_counters")
