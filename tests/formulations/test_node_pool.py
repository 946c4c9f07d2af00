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


@st.composite
def gang_sequences(draw: st.DrawFn) -> tuple[list[int], int, list[int], list[tuple[int, ...]]]:
    """Nodes, a pool total (at most their free devices), and gangs in runs of one size (as
    the auction places them: largest first), some with previous nodes."""
    sizes = draw(st.lists(st.integers(0, 8), min_size=1, max_size=draw(st.sampled_from(
        [12, 100]))))  # many nodes: a short run moves few of them in the index
    total = draw(st.integers(0, sum(sizes))) if draw(st.booleans()) else sum(sizes)
    needs = draw(st.lists(st.sampled_from([1, 2, 2, 4, 8, 12]), max_size=40))
    if draw(st.booleans()):
        needs.sort(reverse=True)
    previous = [tuple(dict.fromkeys(2 * (p % len(sizes)) + 1 for p in draw(
        st.lists(st.integers(0, 99), max_size=2)))) if draw(st.integers(0, 4)) == 0 else ()
        for _ in needs]
    return sizes, total, needs, previous


@example(([8, 8, 3], 13, [2] * 8, [()] * 8), [])  # the pool runs out before the nodes
@example(([8] * 40, 320, [2], [()]), [2, 6])  # a node moved in a long index is found again
@given(gang_sequences(), st.lists(st.integers(1, 9), max_size=4))
def test_take_many_places_as_take_one_at_a_time(
    case: tuple[list[int], int, list[int], list[tuple[int, ...]]], after: list[int]
) -> None:
    """A run of one size without previous nodes is placed in one walk of the index: the same
    nodes as the scan's gang by gang, the same free devices and pool after, and later takes
    still find their best fit."""
    sizes, total, needs, previous = case
    nodes = [2 * k + 1 for k in range(len(sizes))]
    pool = NodePool(nodes, sizes, total)
    free = dict(zip(nodes, sizes, strict=True))
    left = total
    expected: list[tuple[int, ...] | None] = []
    for need, before in zip(needs, previous, strict=True):
        taken = None if need > left else scan_take(free, nodes, need, before, False)
        left -= need if taken is not None else 0
        expected.append(taken)
    assert pool.take_many(needs, previous) == expected
    assert pool.free == free and pool.pool == left
    for need in after:
        taken = None if need > left else scan_take(free, nodes, need, (), False)
        left -= need if taken is not None else 0
        assert pool.take(need) == taken
    assert pool.free == free
