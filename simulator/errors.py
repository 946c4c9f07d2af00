"""The simulator's input error: what a user gave cannot be simulated (the message names the
file, line and field when there is one). The command line turns it into exit code 2."""

from __future__ import annotations


class SimulationInputError(ValueError):
    """A trace, cluster, throughput source or option the simulator cannot use."""


class SimulationError(RuntimeError):
    """The simulation broke one of its own invariants (a policy's round exceeded the cluster,
    ran a job that had not arrived, ...) or did not finish within its round limit."""
