"""The simulator: replay a workload on a cluster through any registered policy, round by round.

`workload` builds the jobs (from a trace, per-epoch profiles or a generator), `engine` runs the
loop, `drivers` turn each plan kind into rounds, `plans` is the one reader of a policy's answer,
`problems` and `wire` build the snapshot the policy sees (as a model, or as the wire request for
`apportion serve`), `metrics`, `tables`, `plots`, `report` and `output` report the results, and
`sweep` runs grids of simulations in parallel processes or on Ray. `cli` is `apportion simulate`.
"""
