"""The one solver layer: HiGHS (LP, MIP), Clarabel (LP, conic) and OR-Tools CP-SAT behind one
status vocabulary (`SolverStatus`) and one result type (`SolverResult`).

Formulations build models and call these runners; they never drive a solver library
themselves. Each backend module holds its library's status table (`STATUS_MAP`) and nothing
else translates a library's status. Turning a `SolverStatus` plus a certificate into the public
`Termination` happens in `apportion.solver.certificate`.

Modules: `status` (vocabulary, result), `highs` (one-shot `solve_highs` and the warm
`HighsSession`), `clarabel` (`solve_clarabel` on cone descriptors), `ortools` (`solve_cpsat`),
`lp` (the formulations' common "maximize c@x s.t. A@x <= b, x >= 0" form on either backend).
Importing this package is cheap: the solver libraries load on first use.
"""
