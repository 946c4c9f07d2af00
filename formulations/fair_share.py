"""Weighted water-filling of one divisible resource (the fair-share rule of B2 and B3).

Each claimant u has a weight w_u > 0 and a demand cap d_u >= 0. The allocation is
a_u = min(d_u, level * w_u) with the level chosen so that sum_u a_u = min(capacity, sum_u d_u):
claimants whose demand is below their weighted share get their demand, the rest split what
remains in proportion to their weights (the water-filling fixed point).
"""

from __future__ import annotations

import numpy as np

from apportion.solver.model import FloatArray


def water_fill(capacity: float, weights: FloatArray, caps: FloatArray) -> FloatArray:
    """(k,) a_u = min(caps_u, level * weights_u) with sum a = min(capacity, sum caps), exact
    (claimants sorted by caps/weights, the level found in one pass). `weights` > 0,
    `caps` >= 0, `capacity` >= 0."""
    w = np.asarray(weights, dtype=np.float64)
    d = np.asarray(caps, dtype=np.float64)
    out = np.zeros(w.size)
    if w.size == 0 or capacity <= 0:
        return out
    if d.sum() <= capacity:
        return d.copy()
    order = np.argsort(d / w, kind="stable")
    left, weight_left = float(capacity), float(w.sum())
    for pos, u in enumerate(order):
        level = left / weight_left
        if d[u] <= level * w[u]:
            out[u] = d[u]
            left -= d[u]
            weight_left -= w[u]
            continue
        rest = order[pos:]
        out[rest] = level * w[rest]
        break
    return out
