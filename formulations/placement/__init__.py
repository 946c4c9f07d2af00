"""The placement stage (which devices): an exact MILP on the cluster's topology, the compat
placers of published schedulers as special cases, and the device-level systems built on it.

Modules: `instance` (demands on a topology), `objective` (the one cost function every placer
is judged by), `patterns` (intra-node link scores), `bounds` (the relaxation bound),
`node_milp` (the node-level MILP, D0.3), `intra_node` (exact device choice inside a node,
D0.4), `device_milp` (the device-level MILP, D0.2), `exact` (the exact placer and its
certificate), `compat` (Blox, Tiresias, HiveD, MAPA, Lucid, Sia and Gavel placers),
`demands` (grants of every plan kind as demands), `stage` (the stage `solve()` runs),
`hived` (cells, buddy allocation, safety check, binding), `cassini` (time shifts),
`tiresias` (2D-LAS / 2D-Gittins), `churn` (single-device moves as an assignment), `admission`
(Blox's admission stage).
"""
