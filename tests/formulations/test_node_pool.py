"""NodePool places gangs by its rule (previous nodes, else best fit on one node, else whole
nodes largest first), checked against a scan of every node written from that rule."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from apportion.formulations.node_pool import NodePool


class ScanPool:
    """The placement rule by scanning every node at every take."""

    def __init__(self, nodes: list[int], free: list[int], total: int) -> None:
        self.nodes = nodes
        self.free = dict(zip(nodes, free, strict=True))
        self.pool = total

    def take(self, need: int, previous: tuple[int, ...], single_node: bool
             ) -> tuple[int, ...] | None:
        if need > self.pool:
            return None
        if previous and all(k in self.free for k in previous) and (
            sum(self.free[k] for k in previous) >= need
            and (not single_node or len(previous) == 1)
        ):
            order = list(previous)
        else:
            whole = [k for k in self.nodes if self.free[k] >= need]
            if whole:
                order = [min(whole, key=lambda k: (self.free[k], k))]
            elif single_node:
                return None
            else:
                order = sorted(self.nodes, key=lambda k: (-self.free[k], k))
        taken = []
        left = need
        for k in order:
            use = min(self.free[k], left)
            if left and use:
                self.free[k] -= use
                left -= use
                taken.append(k)
        self.pool -= need
        return tuple(taken)


@st.composite
def pools_and_gangs(draw: st.DrawFn) -> tuple[list[int], list[int], list[tuple[int, tuple[
        int, ...], bool]]]:
    nodes = sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=12)))
    free = draw(st.lists(st.integers(0, 8), min_size=len(nodes), max_size=len(nodes)))
    gangs = draw(st.lists(st.tuples(
        st.integers(1, 20),
        st.lists(st.integers(0, 41), max_size=3, unique=True).map(tuple),
        st.booleans(),
    ), max_size=30))
    return nodes, free, gangs


@given(pools_and_gangs())
def test_take_follows_the_rule_of_a_scan(case: tuple[list[int], list[int], list[tuple[
        int, tuple[int, ...], bool]]]) -> None:
    nodes, free, gangs = case
    pool = NodePool(nodes, free, sum(free))
    scan = ScanPool(nodes, free, sum(free))
    copy = pool.copy()
    for need, previous, single in gangs:
        assert pool.take(need, previous, single_node=single) == scan.take(need, previous, single)
        assert pool.free == scan.free and pool.pool == scan.pool
    assert copy.free == dict(zip(nodes, free, strict=True))  # a copy is not shared
    for need, previous, single in gangs:  # the copy still places from the start
        copy.take(need, previous, single_node=single)
    assert copy.free == pool.free


def test_take_exactly_keeps_the_best_fit_current() -> None:
    pool = NodePool([0, 1, 2], [8, 8, 8], 24)
    assert pool.take_exactly(((1, 5),)) == (1,)
    assert pool.take(3) == (1,)  # node 1 has 3 left: the fewest that hold 3
    assert pool.take(6) == (0,)
    assert pool.take(10) == (2, 0)  # whole nodes, largest first: 8 on node 2, 2 on node 0
    assert pool.free == {0: 0, 1: 0, 2: 0} and pool.pool == 0


# the themis auction's check of the same rule, with previous nodes, single-node gangs and
# exact takes interleaved

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
