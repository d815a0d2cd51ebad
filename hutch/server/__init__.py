"""The HTTP server: the control plane (API key, team-scoped) and the per-sandbox data plane."""
