"""The change serial of the constants and shradmin's schedules, bumped by every
transaction that changes them, so the daemon reads them again only when it moved.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_SERIALS = sa.table("serials", sa.column("name", sa.String), sa.column("value", sa.Integer))


def upgrade() -> None:
    # The row exists from the start, so bumping it is always an UPDATE (no insert race).
    op.bulk_insert(_SERIALS, [{"name": "consts", "value": 0}])


def downgrade() -> None:
    op.execute(_SERIALS.delete().where(_SERIALS.c.name == "consts"))
