"""The grid policy model (seed 001, Elmroth and Gardfjall): each entry's usage scope and
whether fair share applies inside its subtree.

- `scope` ('' inherit, 'local', 'global'): the usage an entry divides its share by among
  its children and everything below: this site's ('local'), or every site's of the grid
  ('global', the paper's usage source that points at grid-wide usage data).  Inherited
  down the tree; the root's is global under GLOBALUSAGE, else local.
- `pooled` (0 or 1): its members are not ranked against each other; they take the
  entry's standing (the paper's local resource projects, Slurm's FairShare=parent).

Revision ID: 0017_grid_policy
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.add_column(sa.Column("scope", sa.String(8), nullable=False, server_default=""))
        batch.add_column(sa.Column("pooled", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("pooled")
        batch.drop_column("scope")
