"""Secrets: values kept encrypted at rest, and the catalog of providers' auth schemes."""
