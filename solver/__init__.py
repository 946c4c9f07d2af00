"""The typed problem model, validation errors, policy registry and the solve entry point.

Nothing here does I/O or imports gRPC/protobuf; `apportion.server.convert` builds these objects
from the wire messages, and `apportion.solver.solve.solve` is the single entry point used by the
command line and the server.
"""
