"""Tests with no server, no root and no runsc: the flows, the store, the rules and the catalogue."""
