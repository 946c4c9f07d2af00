"""`NodePool.take` keeps its placement rule (previous nodes, else best fit on one node, else
whole nodes in decreasing free devices) while finding nodes through its index: every sequence
of takes matches a plain scan over all nodes."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from apportion.formulations.node_pool import NodePool


def scan_take(free: dict[int, int], nodes: list[int], need: int,
              previous: tuple[int, ...], single_node: bool) -> tuple[int, ...] | None:
    """The rule by scanning every node (`free` updated in place)."""
    if previous and all(k in free for k in previous) and (
        sum(free[k] for k in previous) >= need and (not single_node or len(previous) == 1)
    ):
        order = list(previous)
    else:
        whole = [k for k in nodes if free[k] >= need]
        if whole:
            order = [min(whole, key=lambda k: (free[k], k))]
        elif single_node:
            return None
        else:
            order = sorted(nodes, key=lambda k: (-free[k], k))
    taken = []
    for k in order:
        use = min(free[k], need)
        if need and use:
            free[k] -= use
            need -= use
            taken.append(k)
    return tuple(taken)


@example([4, 4, 4], [(6, [], False, False), (2, [], False, False)])  # a node split, then refit
@given(
    st.lists(st.integers(0, 8), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(1, 20), st.lists(st.integers(0, 11), max_size=3),
                       st.booleans(), st.booleans()), max_size=25),
)
def test_takes_match_a_scan_over_every_node(
    sizes: list[int], takes: list[tuple[int, list[int], bool, bool]]
) -> None:
    nodes = [2 * k + 1 for k in range(len(sizes))]  # indices need not be 0..N-1
    pool = NodePool(nodes, sizes, sum(sizes))
    free = dict(zip(nodes, sizes, strict=True))
    left = sum(sizes)
    for need, previous_at, single_node, exactly in takes:
        previous = tuple(dict.fromkeys(nodes[p % len(nodes)] for p in previous_at))
        if exactly and previous and all(free[k] >= 1 for k in previous):
            pairs = tuple((k, 1) for k in previous)
            assert pool.take_exactly(pairs) == previous
            for k in previous:
                free[k] -= 1
            left -= len(previous)
        else:
            expected = None if need > left else scan_take(free, nodes, need, previous,
                                                          single_node)
            assert pool.take(need, previous, single_node) == expected
            left -= need if expected is not None else 0
        assert pool.free == free
        assert pool.pool == left
