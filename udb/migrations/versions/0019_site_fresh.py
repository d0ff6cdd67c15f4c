"""GLOBALUSAGE's per-cycle exchange: `site_hosts`, one row per host with what it tells
the other hosts of the site every cycle (per uid: whether it has an lnode and wants
CPU, the usage it owes, the CPU it receives and wants; fairshare.store.exchange), so each
host reads the whole site in one cheap query every cycle instead of every other host's
published table every write-back interval.

Revision ID: 0019
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "site_hosts",
        sa.Column("host", sa.String(255), primary_key=True, nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("cpus", sa.Float, nullable=False),
        sa.Column("columnar", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("site_hosts")
