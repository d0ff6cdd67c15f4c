"""shrdist's change log and shrsync's requests to the daemon.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "share_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("who", sa.String(64), nullable=False),
        sa.Column("grp", sa.String(64), nullable=False),
        sa.Column("member", sa.String(64), nullable=False),
        sa.Column("old", sa.Integer, nullable=False),
        sa.Column("new", sa.Integer, nullable=False),
    )
    op.create_table(
        "sync_requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("host", sa.String(255), nullable=False, index=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("who", sa.String(64), nullable=False),
        sa.Column("requested", sa.Float, nullable=False),
        sa.Column("done", sa.Float, nullable=True),
        sa.Column("lnodes", sa.Integer, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("sync_requests")
    op.drop_table("share_changes")
