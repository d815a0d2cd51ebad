"""The domain services: what creating, running, pausing, snapshotting and deleting boxes,
templates, volumes, secrets, events and webhooks does to the store and the node, and the models
they take and return. HTTP, E2B's facade, the console and the fleet are fronts or wiring around
these; nothing here imports them (tests/unit/test_imports.py holds the rule)."""
