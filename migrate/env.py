"""Alembic environment for chrono.

The store passes its own connection in `config.attributes["connection"]` (so that the
migration runs under the lock it holds); otherwise the URL comes from the
`sqlalchemy.url` option. This file never imports chronod: revisions spell their tables out.
"""

from alembic import context
from sqlalchemy import create_engine, pool

config = context.config


def _run(connection) -> None:
    # SQLite runs DDL in transactions fine when BEGIN is ours; one transaction per upgrade.
    context.configure(connection=connection, target_metadata=None, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through the store's connection, or open one from `sqlalchemy.url`."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("chrono migrations run online only: use `chronoctl db upgrade`")
run_migrations_online()
