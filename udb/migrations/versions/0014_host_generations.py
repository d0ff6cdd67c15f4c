"""shrdaemon's fencing token: one row per host with the generation of the daemon that
holds the host's lock (bumped each time a daemon takes it) and the serial of the last
spool file applied (fairshare.store.published).  Every write of a host's rows checks
the generation in its own transaction, so a daemon that lost its lock (a PostgreSQL
restart drops advisory locks) cannot write once another has taken it.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_generations",
        sa.Column("host", sa.String(255), primary_key=True, nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("spooled", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("host_generations")
