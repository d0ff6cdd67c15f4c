"""The change serial of the entries, bumped by every transaction that changes them.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    serials = op.create_table(
        "serials",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("value", sa.Integer, nullable=False),
    )
    # The row exists from the start, so bumping it is always an UPDATE (no insert race).
    op.bulk_insert(serials, [{"name": "entries", "value": 0}])


def downgrade() -> None:
    op.drop_table("serials")
