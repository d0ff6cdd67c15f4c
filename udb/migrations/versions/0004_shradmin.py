"""shradmin's change history and time-of-day schedules.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "const_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("who", sa.String(64), nullable=False),
        sa.Column("schedule", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("old", sa.JSON, nullable=True),
        sa.Column("new", sa.JSON, nullable=True),
    )
    op.create_table(
        "schedules",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("days", sa.JSON, nullable=False),
        sa.Column("hours", sa.JSON, nullable=False),
        sa.Column("settings", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("schedules")
    op.drop_table("const_changes")
