"""One module per policy family. Each turns a validated `Problem` into an optimization model,
solves it and returns a `Plan` with its certificate. Pure functions: no I/O, no gRPC."""
