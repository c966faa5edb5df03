"""Persistence: SQLAlchemy tables, the database handle, and Alembic migrations."""
