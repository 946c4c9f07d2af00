"""The Partial Allocation mechanism (B1) proven by independent routes.

* B1.1: the proportional-fair allocation equals the brute force over every assignment of
  g <= 6 devices to a <= 4 bidders or to nobody ((a + 1)^g assignments), each bidder valuing
  the set it receives by the best bundle of its table it contains.
* B1.2: every kept fraction is in (0, 1] and equals the brute-force ratio of the others'
  welfare with and without the winner [derived]; winners are never worse off than with
  nothing [derived]; on divisible shares with linear valuations c_i >= 1/e (Cole et al.'s
  claim, from the paper).
* B1.3: randomized strategy-proofness: scaling or perturbing one bidder's reported table never
  raises its true utility c_i V_i(G_i) (bundles, exact MILP) or c_i V_i(X_i) (divisible shares).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import apportion.solver.deadline as deadline_module
from apportion.formulations.partial_allocation import (
    Bids,
    _greedy_fill,
    divisible_partial_allocation,
    feasible,
    partial_allocation,
    proportional_fair,
    welfare_of,
)
from apportion.solver.backends.status import SolverStatus
from apportion.solver.deadline import Deadline
from apportion.solver.result import ModelSize
from tests.countdown import CountdownDeadline, FrozenClock

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Devices:
    """g devices, each of a type and on a node; resources = types then nodes."""

    device_type: NDArray[np.int64]
    device_node: NDArray[np.int64]
    types: int
    nodes: int

    @property
    def capacity(self) -> Array:
        cap = np.zeros(self.types + self.nodes)
        np.add.at(cap, self.device_type, 1.0)
        np.add.at(cap, self.types + self.device_node, 1.0)
        return cap


@st.composite
def auctions(draw: st.DrawFn, bidders: int = 4, devices_per_type: int = 3
             ) -> tuple[Devices, Bids]:
    types = draw(st.integers(1, 2))
    per_type = draw(st.lists(st.integers(1, devices_per_type), min_size=types, max_size=types))
    device_type: list[int] = []
    device_node: list[int] = []
    node = 0
    for j, count in enumerate(per_type):
        split = draw(st.integers(1, count))  # devices of the type over 1 or 2 nodes
        first = draw(st.integers(1, count)) if split > 1 and count > 1 else count
        for d in range(count):
            device_type.append(j)
            device_node.append(node if d < first else node + 1)
        node += 2 if first < count else 1
    devices = Devices(np.array(device_type), np.array(device_node), types, node)
    a = draw(st.integers(1, bidders))
    bidder, use, value = [], [], []
    outside = np.array(draw(st.lists(st.floats(0.2, 2.0), min_size=a, max_size=a)))
    for i in range(a):
        gang = draw(st.integers(1, 2))
        for j in range(types):
            if draw(st.booleans()) or j == 0:
                row = np.zeros(types + node)
                row[j] = gang
                bidder.append(i)
                use.append(row)
                value.append(outside[i] * draw(st.floats(0.5, 4.0)))
            on = sorted({int(k) for k in devices.device_node[devices.device_type == j]})
            if draw(st.booleans()) and gang <= np.sum(devices.device_node == on[0]):
                row = np.zeros(types + node)
                row[j] = gang
                row[types + on[0]] = gang
                bidder.append(i)
                use.append(row)
                value.append(outside[i] * draw(st.floats(0.5, 4.0)))
    bids = Bids(np.array(bidder, np.int64), np.array(use), np.array(value), outside,
                devices.capacity)
    return devices, bids


def brute_force(devices: Devices, bids: Bids, exclude: int = -1) -> float:
    """max over every assignment of devices to bidders (or nobody) of sum_i log V_i(set_i),
    V_i(set) = the best bid contained in the set, or V_i(none)."""
    a = bids.num_bidders
    g = devices.device_type.size
    t, nodes = devices.types, devices.nodes
    onehot = np.zeros((g, t + nodes))
    onehot[np.arange(g), devices.device_type] = 1.0
    onehot[np.arange(g), t + devices.device_node] = 1.0
    owners = [b for b in range(a) if b != exclude] + [-1]
    assignments = np.array(list(itertools.product(owners, repeat=g)), np.int64).reshape(-1, g)
    total = np.zeros(assignments.shape[0])
    for b in range(a):
        if b == exclude:
            continue
        counts = (assignments == b).astype(float) @ onehot
        best = np.full(assignments.shape[0], bids.outside[b])
        for k in np.flatnonzero(bids.bidder == b):
            contains = np.all(counts >= bids.use[[k]].toarray() - 1e-9, axis=1)
            best = np.where(contains, np.maximum(best, bids.value[k]), best)
        total += np.log(best)
    return float(total.max())


@given(auctions())
def test_proportional_fair_equals_the_brute_force(case: tuple[Devices, Bids]) -> None:
    devices, bids = case
    outcome = partial_allocation(bids, abs_gap=1e-9)
    pf = outcome.welfare
    assert feasible(bids, pf.choice)
    assert math.isclose(pf.objective, welfare_of(bids, pf.choice), abs_tol=1e-12)
    assert math.isclose(pf.objective, brute_force(devices, bids), abs_tol=1e-7)
    assert pf.bound >= pf.objective - 1e-9


@given(auctions(bidders=7, devices_per_type=2))
def test_the_dominance_reduction_keeps_the_optimum(case: tuple[Devices, Bids]) -> None:
    devices, bids = case
    # every winner holds >= 1 device: at most g winners
    reduced = replace(bids, max_winners=int(devices.device_type.size))
    for exclude in range(-1, bids.num_bidders):
        expected = brute_force(devices, bids, exclude)
        pf = proportional_fair(reduced, exclude=exclude, abs_gap=1e-9)
        assert feasible(bids, pf.choice)
        assert math.isclose(pf.objective, expected, abs_tol=1e-7)


@given(auctions())
def test_kept_fractions_are_the_brute_force_ratios(case: tuple[Devices, Bids]) -> None:
    devices, bids = case
    outcome = partial_allocation(bids, abs_gap=1e-9)
    pf = outcome.welfare
    assert outcome.payments_exact
    for i in range(bids.num_bidders):
        c = outcome.kept_fraction[i]
        if pf.choice[i] < 0:
            assert math.isnan(c)
            continue
        assert 0 < c <= 1
        others = welfare_of(bids, pf.choice, exclude=i)
        expected = math.exp(others - brute_force(devices, bids, exclude=i))
        assert math.isclose(c, expected, rel_tol=1e-6)
        # individual rationality [derived]: c_i V_i(G_i) >= V_i(none)
        assert c * bids.value[pf.choice[i]] >= bids.outside[i] * (1 - 1e-7)


def true_utility(truth: Bids, reported: Bids, i: int) -> float:
    """Bidder i's true value of what the mechanism gives it under `reported` bids: c_i times
    its true value of the won bundle, or its true value of nothing."""
    outcome = partial_allocation(reported, abs_gap=1e-10)
    k = outcome.welfare.choice[i]
    if k < 0:
        return float(truth.outside[i])
    return float(outcome.kept_fraction[i] * truth.value[k])


@given(auctions(), st.data())
def test_misreporting_a_bundle_table_never_pays(case: tuple[Devices, Bids],
                                                data: st.DataObject) -> None:
    _, truth = case
    i = data.draw(st.integers(0, truth.num_bidders - 1))
    honest = true_utility(truth, truth, i)
    mine = truth.bidder == i
    for _ in range(3):
        value = truth.value.copy()
        outside = truth.outside.copy()
        how = data.draw(st.sampled_from(["scale", "perturb", "outside"]))
        if how == "scale":
            value[mine] *= data.draw(st.floats(0.2, 5.0))
        elif how == "perturb":
            noise = np.array(data.draw(st.lists(st.floats(0.3, 3.0), min_size=int(mine.sum()),
                                                max_size=int(mine.sum()))))
            value[mine] *= noise
        else:
            outside[i] *= data.draw(st.floats(0.2, 5.0))
        lie = replace(truth, value=value, outside=outside)
        assert true_utility(truth, lie, i) <= honest * (1 + 1e-7)


@st.composite
def divisible_markets(draw: st.DrawFn) -> tuple[Array, Array, Array]:
    a = draw(st.integers(2, 5))
    n = draw(st.integers(1, 3))
    cells = st.one_of(st.just(0.0), st.floats(0.1, 5.0))
    value = np.array(draw(st.lists(st.lists(cells, min_size=n, max_size=n), min_size=a,
                                   max_size=a))).reshape(a, n)
    value[:, 0] = np.maximum(value[:, 0], 0.1)
    capacity = np.array(draw(st.lists(st.integers(1, 4), min_size=n, max_size=n)), float)
    return value, np.ones(a), capacity


@given(divisible_markets())
def test_divisible_kept_fractions_are_at_least_one_over_e(
    market: tuple[Array, Array, Array],
) -> None:
    value, scale, capacity = market
    outcome = divisible_partial_allocation(value, scale, capacity)
    assert outcome.payments_exact
    assert np.all(outcome.kept_fraction <= 1.0)
    assert np.all(outcome.kept_fraction >= 1 / math.e - 1e-6)


@given(divisible_markets(), st.data())
def test_misreporting_divisible_values_never_pays(market: tuple[Array, Array, Array],
                                                  data: st.DataObject) -> None:
    value, scale, capacity = market
    i = data.draw(st.integers(0, value.shape[0] - 1))

    def utility(report: Array) -> float:
        outcome = divisible_partial_allocation(report, scale, capacity)
        return float(outcome.kept_fraction[i] * value[i] @ outcome.time_share[i])

    honest = utility(value)
    lie = value.copy()
    usable = lie[i] > 0
    noise = np.array(data.draw(st.lists(st.floats(0.2, 5.0), min_size=int(usable.sum()),
                                        max_size=int(usable.sum()))))
    lie[i, usable] *= noise
    assert utility(lie) <= honest * (1 + 1e-5)


def test_a_bidder_alone_pays_nothing_and_favourites_that_fit_need_no_solve() -> None:
    bids = Bids(np.array([0, 1]), np.array([[1.0], [1.0]]), np.array([2.0, 3.0]),
                np.array([1.0, 1.0]), np.array([2.0]))
    outcome = partial_allocation(bids)
    assert outcome.welfare.solver == "closed form"
    assert np.allclose(outcome.kept_fraction, 1.0)
    # one device, two bidders: the PF winner pays what it costs the other (1 / 2.9)
    tight = replace(bids, value=np.array([3.0, 2.9]), capacity=np.array([1.0]))
    outcome = partial_allocation(tight)
    assert list(outcome.welfare.choice) == [0, -1]
    assert math.isclose(outcome.kept_fraction[0], 1.0 / 2.9, rel_tol=1e-9)
    without = proportional_fair(tight, exclude=0)
    assert list(without.choice) == [-1, 1]


@given(auctions())
def test_a_passed_deadline_gives_a_feasible_choice_without_a_program(
    case: tuple[Devices, Bids]
) -> None:
    """With the deadline already past no program is built: a feasible choice (the greedy start
    or every favourite when they fit), its bound unknown unless closed form proves it, every
    winner keeping its whole bundle, and the cut reported."""
    _, bids = case
    outcome = partial_allocation(bids, deadline=Deadline(0.0))
    pf = outcome.welfare
    assert feasible(bids, pf.choice)
    assert pf.size == ModelSize()  # nothing was handed to a solver
    if pf.solver != "closed form":
        assert pf.status is SolverStatus.TIME_LIMIT and math.isinf(pf.bound)
    assert pf.objective == welfare_of(bids, pf.choice)
    won = pf.choice >= 0
    assert np.all(outcome.kept_fraction[won] == 1.0)
    assert outcome.payments_cut is bool(won.any())
    if won.any():
        assert not outcome.payments_exact


def test_a_contested_device_past_the_deadline_goes_to_the_greedy_choice() -> None:
    bids = Bids(np.array([0, 1]), np.array([[1.0], [1.0]]), np.array([3.0, 2.9]),
                np.array([1.0, 1.0]), np.array([1.0]))
    outcome = partial_allocation(bids, deadline=Deadline(0.0))
    assert list(outcome.welfare.choice) == [0, -1]  # the larger gain fits first
    assert outcome.welfare.status is SolverStatus.TIME_LIMIT
    assert outcome.kept_fraction[0] == 1.0 and outcome.payments_cut


# --------------------------------------------------------------------------------------------
# the greedy fill (the feasible start, and the answer when no program can be run in time)


def greedy_one_by_one(bids: Bids, cols: NDArray[np.int64], gain: Array) -> NDArray[np.int64]:
    """The greedy fill's rule, one bundle at a time: in decreasing gain (ties: index), a
    bundle is taken when its bidder has none and every resource it uses has room left."""
    choice = np.full(bids.num_bidders, -1, np.int64)
    left = bids.capacity.astype(np.float64).copy()
    dense = bids.use.toarray()
    for k in sorted(cols.tolist(), key=lambda k: (-gain[k], k)):
        uses = dense[k] > 0
        if choice[bids.bidder[k]] < 0 and np.all(dense[k][uses] <= left[uses] + 1e-9):
            choice[bids.bidder[k]] = k
            left -= dense[k]
    return choice


def crowded_bids(seed: int) -> tuple[Bids, NDArray[np.int64], Array]:
    """Up to 60 bidders with 1-4 bundles each on 1-3 of a few resources (whole devices,
    capacities that run out), gains with ties, a random subset of the bundles kept."""
    rng = np.random.default_rng(seed)
    resources = int(rng.integers(1, 7))
    capacity = rng.integers(0, 21, resources).astype(np.float64)
    a = int(rng.integers(1, 61))
    bidder = np.repeat(np.arange(a), rng.integers(1, 5, a))
    use = np.zeros((bidder.size, resources))
    for k in range(bidder.size):
        on = rng.choice(resources, int(rng.integers(1, min(3, resources) + 1)), replace=False)
        use[k, on] = rng.integers(1, 5, on.size)
    value = np.exp(rng.choice([0.5, 1.0, 1.5, 2.0, 3.0], bidder.size))
    bids = Bids(bidder, use, value, np.ones(a), capacity)
    cols = np.flatnonzero(rng.random(bidder.size) < 0.8)
    return bids, cols, np.log(value)


@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 3, 7, 1024]))
def test_the_greedy_fill_takes_what_one_bundle_at_a_time_takes(seed: int, window: int) -> None:
    """The array route (steps over windows of the order, a refusal ending a step) chooses the
    same bundles as the rule applied one bundle at a time, whatever the window."""
    bids, cols, gain = crowded_bids(seed)
    choice = _greedy_fill(bids, cols, gain, window)
    assert np.array_equal(choice, greedy_one_by_one(bids, cols, gain))
    assert feasible(bids, choice)


@pytest.mark.parametrize("bidders", [3, 5])
def test_no_payment_program_is_tried_when_the_allocation_could_not_be_started(
    bidders: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the clock stopped a nanosecond before the deadline, no program can be started: the
    greedy's winners, and their payments right away, no program tried one winner after the
    other (a look at the deadline each). Two devices, one wanted by each bidder: with three
    bidders, the others' favourites fit without either winner, so each is priced in closed
    form as without a deadline; with five, neither is, and both keep their bundle whole."""
    value = np.array([4.0, 3.0, 2.5, 2.0, 1.5])[:bidders]
    bids = Bids(np.arange(bidders), np.ones((bidders, 1)), value, np.ones(bidders),
                np.array([2.0]))
    exact = partial_allocation(bids)
    monkeypatch.setattr(deadline_module, "time", FrozenClock)
    deadline = CountdownDeadline(1e-9, checks=10**9)  # never expired, 1 ns left
    outcome = partial_allocation(bids, deadline=deadline)
    assert outcome.welfare.solver == "greedy" and outcome.payment_solves == 0
    won = outcome.welfare.choice >= 0
    assert list(np.flatnonzero(won)) == [0, 1]  # the larger gains fit first
    if bidders == 3:
        assert np.allclose(outcome.kept_fraction[won], exact.kept_fraction[won], rtol=1e-12)
        assert np.all(outcome.kept_fraction[won] < 1) and not outcome.payments_cut
    else:
        assert np.all(outcome.kept_fraction[won] == 1.0) and outcome.payments_cut
    assert deadline.looks[0] <= 1 + 2 * int(bidders == 3)  # the allocation, each one priced
