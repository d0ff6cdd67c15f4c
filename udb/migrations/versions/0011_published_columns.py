"""The published lnode table also in columns (lnode_cycles.columnar, udb.columnar), so
a display reads one value instead of a row per lnode.

Tables published before it get their columns from their rows here, so displays show
them as before until the daemon publishes again.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

from udb.columnar import encode, row_columns

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lnode_cycles") as batch:
        batch.add_column(sa.Column("columnar", sa.LargeBinary, nullable=True))
    conn = op.get_bind()
    lnodes = sa.table("lnodes", *(sa.column(c) for c in _lnode_columns(conn)))
    cycles = sa.table("lnode_cycles", sa.column("host"), sa.column("columnar"))
    for (host,) in conn.execute(sa.select(cycles.c.host)).all():
        rows = conn.execute(
            sa.select(lnodes).where(lnodes.c.host == host).order_by(lnodes.c.node)
        ).all()
        blob = encode(row_columns(rows, [c for c in lnodes.c.keys() if c != "host"]))
        conn.execute(sa.update(cycles).where(cycles.c.host == host).values(columnar=blob))


def _lnode_columns(conn) -> list[str]:
    return [c["name"] for c in sa.inspect(conn).get_columns("lnodes")]


def downgrade() -> None:
    with op.batch_alter_table("lnode_cycles") as batch:
        batch.drop_column("columnar")
