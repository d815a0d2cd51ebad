"""Templates: a root filesystem built from a base and steps, which sandboxes boot from."""
