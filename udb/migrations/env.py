"""Alembic environment: the engine comes from udb.session, never from a config file."""

from alembic import context

from udb import tables

engine = context.config.attributes["engine"]

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=tables.metadata,
        render_as_batch=True,  # SQLite can only alter tables by copying them
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
