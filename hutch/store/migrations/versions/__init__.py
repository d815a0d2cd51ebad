"""The store's revisions, oldest first by their down_revision (Alembic reads them from here)."""
