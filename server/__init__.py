"""The gRPC service, the conversion between wire messages and the model, and the command line.

Importing this package is cheap; heavy modules (grpc, solvers) are imported where used.
"""
