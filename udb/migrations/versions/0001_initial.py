"""The first schema: entries and the account registry.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "entries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("uid", sa.Integer, nullable=False, unique=True),
        sa.Column("gids", sa.JSON, nullable=False),
        sa.Column("acids", sa.JSON, nullable=False),
        sa.Column("resgrp", sa.Integer, nullable=False, index=True),
        sa.Column("shares", sa.Integer, nullable=False),
        sa.Column("shflags", sa.Integer, nullable=False),
        sa.Column("shusage", sa.Float, nullable=False),
        sa.Column("shcharge", sa.Float, nullable=False),
        sa.Column("shextime", sa.Float, nullable=False),
        sa.Column("cpuquota", sa.Float, nullable=False),
        sa.Column("cpuquotaused", sa.Float, nullable=False),
        sa.Column("nice", sa.Integer, nullable=False),
        sa.Column("passwd", sa.String(256), nullable=False),
        sa.Column("comment", sa.Text, nullable=False),
    )
    op.create_table(
        "accounts",
        sa.Column("acid", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
    )


def downgrade() -> None:
    op.drop_table("accounts")
    op.drop_table("entries")
