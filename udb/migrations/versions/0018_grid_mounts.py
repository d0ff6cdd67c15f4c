"""A grid (seed 001): policy subtrees mounted from a VO's UDB (`entries.mount`, the
`grid_mounts` table, udb.mounts) and usage records exchanged between sites
(`grid_peers`, `grid_usage`, `grid_remote`, fairshare.store.grid), each record keyed by
(site, serial) so that it is applied once.

Revision ID: 0018
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_SERIALS = sa.table("serials", sa.column("name", sa.String), sa.column("value", sa.Integer))


def _text(name: str, length: int, **kw) -> sa.Column:
    return sa.Column(name, sa.String(length), nullable=kw.pop("nullable", False), **kw)


def _float(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.Float, nullable=nullable)


def upgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.add_column(sa.Column("mount", sa.Integer, nullable=False, server_default="0"))
    op.create_table(
        "grid_mounts",
        sa.Column("entry", sa.Integer, primary_key=True, autoincrement=False),
        _text("source", 1024),
        _text("policy", 64),
        _float("fetched", True),
        sa.Column("serial", sa.BigInteger, nullable=False, server_default="0"),
        _float("tried", True),
        sa.Column("error", sa.Text, nullable=True),
    )
    op.create_table(
        "grid_peers",
        _text("site", 64, primary_key=True),
        _text("source", 1024, nullable=True),
        sa.Column("applied", sa.BigInteger, nullable=False, server_default="0"),
        _float("pulled", True),
        _float("tried", True),
        sa.Column("error", sa.Text, nullable=True),
    )
    keys = (_text("site", 64, primary_key=True),)
    op.create_table(
        "grid_usage",
        *keys,
        sa.Column("serial", sa.BigInteger, primary_key=True, autoincrement=False),
        _text("policy", 64, primary_key=True),
        _text("node", 64, primary_key=True),
        *(_float(c) for c in ("usage", "time", "charge", "cpu_seconds")),
    )
    op.create_table(
        "grid_remote",
        _text("site", 64, primary_key=True),
        _text("policy", 64, primary_key=True),
        _text("node", 64, primary_key=True),
        *(_float(c) for c in ("usage", "time", "charge", "cpu_seconds")),
        sa.Column("serial", sa.BigInteger, nullable=False, server_default="0"),
    )
    # The row exists from the start, so taking a serial is always an UPDATE (no insert
    # race), and its row lock orders the records' commits (fairshare.store.grid).
    op.bulk_insert(_SERIALS, [{"name": "grid_usage", "value": 0}])


def downgrade() -> None:
    op.execute(_SERIALS.delete().where(_SERIALS.c.name == "grid_usage"))
    for name in ("grid_remote", "grid_usage", "grid_peers", "grid_mounts"):
        op.drop_table(name)
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("mount")
