"""Typed policy parameters (mirrors of the proto parameter messages, without protobuf)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Canonicalization(StrEnum):
    NONE = "none"
    SUM = "sum"


@dataclass(frozen=True)
class NoParameters:
    """For policies that take no parameters."""


@dataclass(frozen=True)
class MaxMinFairnessParameters:
    """Max-min fairness (formulations.md A2.1)."""

    heterogeneity_agnostic: bool = False
    """Treat every usable throughput as 1 (Gavel's `max_min_fairness`)."""
    canonicalize: Canonicalization = Canonicalization.NONE
    """Which optimal allocation to return (A2.1 numerical notes)."""


@dataclass(frozen=True)
class AlloxParameters:
    """AlloX min-cost matching (formulations.md A3)."""

    alpha: float = 1.0
    """Fairness knob in (0, 1]: match only the ceil(alpha * |pending|) longest-waiting servable
    pending jobs (at least as many as devices free now); 1 = pure total-JCT optimization."""
