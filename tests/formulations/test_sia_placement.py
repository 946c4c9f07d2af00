"""Sia's placement (`sia_configs.place`, best-fit decreasing, A5.6) against the rule written
plainly: every job in (most GPUs, most nodes, keeping its configuration, index) order; a
multi-node configuration takes the whole free nodes of its per-node size, its previous nodes
first, then by index; a single-node one the node with (not previous, fewest free GPUs,
index) smallest among those that hold it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.formulations.sia_configs import (
    Configuration,
    NodeLayout,
    PlacementResult,
    configuration_set,
    place,
)


def reference(layout: NodeLayout, configs: tuple[Configuration, ...], choice: list[int],
              previous: tuple[tuple[int, ...], ...], keep: list[bool]) -> PlacementResult:
    free = layout.node_devices.astype(np.int64).copy()
    size = layout.node_devices
    result: list[tuple[tuple[int, int], ...]] = [()] * len(choice)
    failed: list[int] = []
    order = sorted((i for i in range(len(choice)) if choice[i] >= 0),
                   key=lambda i: (-configs[choice[i]].devices, -configs[choice[i]].nodes,
                                  not keep[i], i))
    for i in order:
        conf = configs[choice[i]]
        of_type = np.flatnonzero(layout.node_type == conf.type_index)
        prev = [v for v in previous[i] if v in of_type.tolist()] if keep[i] else []
        if conf.nodes > 1:
            per = conf.devices // conf.nodes
            whole = of_type[(free[of_type] == size[of_type]) & (size[of_type] == per)]
            whole = whole[np.argsort(~np.isin(whole, prev), kind="stable")]
            if whole.size < conf.nodes:
                failed.append(i)
                continue
            free[whole[: conf.nodes]] = 0
            result[i] = tuple((int(v), per) for v in whole[: conf.nodes])
        else:
            fits = of_type[free[of_type] >= conf.devices]
            if not fits.size:
                failed.append(i)
                continue
            best = int(fits[np.lexsort((fits, free[fits], ~np.isin(fits, prev)))[0]])
            free[best] -= conf.devices
            result[i] = ((best, conf.devices),)
    return PlacementResult(tuple(result), tuple(failed))


@st.composite
def cases(draw: st.DrawFn) -> tuple[NodeLayout, tuple[Configuration, ...], list[int],
                                    tuple[tuple[int, ...], ...], list[int]]:
    types = draw(st.integers(1, 3))
    node_type = draw(st.lists(st.integers(0, types - 1), min_size=1, max_size=12))
    devices = [draw(st.sampled_from([1, 2, 4, 8, 8, 8])) for _ in node_type]
    if draw(st.booleans()):  # equal nodes: multi-node shapes on most of them
        devices = [4] * len(node_type)
    layout = NodeLayout(np.array(node_type, np.int64), np.array(devices, np.int64),
                        tuple(f"n{v}" for v in range(len(node_type))))
    configs = configuration_set(layout, types, 16)
    m = draw(st.integers(0, 25))
    choice = [draw(st.integers(-1, len(configs) - 1)) for _ in range(m)]
    previous = []
    for c in choice:  # mostly nodes of the chosen type, sometimes any
        same = [v for v, t in enumerate(node_type) if c >= 0 and t == configs[c].type_index]
        pool = same if same and draw(st.integers(0, 3)) else list(range(len(node_type)))
        previous.append(tuple(draw(st.lists(st.sampled_from(pool), max_size=3))))
    current = [c if draw(st.integers(0, 3)) else -1 for c in choice]
    return layout, configs, choice, tuple(previous), current


@settings(max_examples=200)
@given(cases())
def test_placement_follows_the_rule(case: tuple[NodeLayout, tuple[Configuration, ...],
                                                list[int], tuple[tuple[int, ...], ...],
                                                list[int]]) -> None:
    layout, configs, choice, previous, current = case
    got = place(layout, configs, np.array(choice, np.int64), previous,
                np.array(current, np.int64))
    keep = [c >= 0 and c == k and len(p) > 0 for c, k, p in zip(choice, current, previous,
                                                              strict=True)]
    want = reference(layout, configs, choice, previous, keep)
    if want.failed and any(keep):
        want = reference(layout, configs, choice, previous, [False] * len(choice))
        assert got.fell_back
    assert (got.nodes, got.failed) == (want.nodes, want.failed)
