"""The store on PostgreSQL: a server of the session's own (tests/postgres.py), a fresh database for each test."""
