"""The migrations build exactly the schema the ORM declares, on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool

from gpuaas.store.db import alembic_config, current_revision, normalise_url, upgrade
from gpuaas.store.tables import Base


def test_upgrade_matches_the_models_and_downgrade_removes_everything(db_url: str) -> None:
    upgrade(db_url)
    upgrade(db_url)  # a second upgrade is a no-op
    assert current_revision(db_url) == "0009_metering"
    engine = create_engine(normalise_url(db_url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
            assert diff == []
            tables = set(inspect(connection).get_table_names())
        assert set(Base.metadata.tables) <= tables
        config = alembic_config(db_url)
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "base")
        with engine.connect() as connection:
            left = set(inspect(connection).get_table_names()) & set(Base.metadata.tables)
        assert left == set()
    finally:
        engine.dispose()


def test_postgres_urls_use_psycopg_3() -> None:
    assert normalise_url("postgresql://u@h:5/db").startswith("postgresql+psycopg://")
    assert normalise_url("postgres://u@h:5/db").startswith("postgresql+psycopg://")
