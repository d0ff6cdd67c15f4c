"""The lnode store: the published lnode table with its header, and the checkpoint.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lnode_cycles",
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("delta", sa.Float, nullable=False),
        sa.Column("enforcer", sa.String(32), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("cycle", sa.Integer, nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("started", sa.Float, nullable=False),
        sa.Column("running", sa.Boolean, nullable=False),
        sa.Column("stopped", sa.Float, nullable=True),
    )
    op.create_table(
        "lnodes",
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("node", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("uid", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("parent", sa.Integer, nullable=False),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("shares", sa.Float, nullable=False),
        sa.Column("refs", sa.Integer, nullable=False),
        sa.Column("nrun", sa.Integer, nullable=False),
        sa.Column("usage", sa.Float, nullable=False),
        sa.Column("charge", sa.Float, nullable=False),
        sa.Column("cpu_seconds", sa.Float, nullable=False),
        sa.Column("rate", sa.Float, nullable=False),
        sa.Column("m_share", sa.Float, nullable=False),
        sa.Column("e_share", sa.Float, nullable=False),
        sa.Column("cpu", sa.Float, nullable=False),
        sa.Column("adj", sa.Float, nullable=False),
        sa.Column("priority", sa.Float, nullable=False),
        sa.Column("background", sa.Boolean, nullable=False),
        sa.Column("demand", sa.Boolean, nullable=False),
    )
    op.create_table(
        "lnode_checkpoints",
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("uid", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("usage", sa.Float, nullable=False),
        sa.Column("charge", sa.Float, nullable=False),
        sa.Column("cpu_seconds", sa.Float, nullable=False),
        sa.Column("time", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("lnode_checkpoints")
    op.drop_table("lnodes")
    op.drop_table("lnode_cycles")
