"""A fleet: stateless API servers and one node runtime per host, on Ray, with PostgreSQL as the store.

- `relay`: a node's internal API (its runtime's calls, and each box's channel byte for byte).
- `nodeside`: what a node answers those calls with, over its own `hutch.node.Node`.
- `remote`: the API server's `NodeRuntime` for a fleet: placement, then the node's calls.
- `cluster`: everything that speaks to Ray (placement groups, resource requests, membership).
- `keys`: the keys every member shares (token signing, sealed secrets, the egress CA).
- `watch`: a lost node's boxes marked failed, its reservations released.
"""
