"""GLOBALUSAGE's per-cycle exchange: `site_hosts`, one row per host with what it adds to
the site's sums (its lnodes' unwritten usage, CPU rate, wants, demand), and `site_sums`,
their sum per uid, kept in the same transactions (fairshare.store.exchange), so each host
reads the whole site in one cheap query every cycle instead of every other host's
published table every write-back interval.

Revision ID: 0019
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0016"
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
    op.create_table(
        "site_sums",
        sa.Column("uid", sa.BigInteger, primary_key=True, nullable=False, autoincrement=False),
        sa.Column("contributors", sa.Integer, nullable=False, server_default="0"),
        sa.Column("hosts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("demand", sa.Integer, nullable=False, server_default="0"),
        sa.Column("owed", sa.Float, nullable=False, server_default="0"),
        sa.Column("rate", sa.Float, nullable=False, server_default="0"),
        sa.Column("want", sa.Float, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("site_sums")
    op.drop_table("site_hosts")
