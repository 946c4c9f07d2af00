"""The request deadline: arithmetic on the monotonic clock, no sleeping on wall time."""

from __future__ import annotations

import math
import time

import pytest

from apportion.solver.deadline import MIN_SOLVER_LIMIT_S, Deadline, DeadlineExpiredError


def test_no_deadline_is_unbounded() -> None:
    unbounded = (Deadline.never(), Deadline.after(0), Deadline.after(-1), Deadline.after(math.nan))
    for deadline in unbounded:
        assert not deadline.bounded
        assert deadline.remaining() == math.inf
        assert not deadline.expired()
        assert deadline.solver_limit_s() == 0.0
        assert deadline.child(0.5) == deadline
        deadline.check()


def test_remaining_counts_down_from_creation() -> None:
    deadline = Deadline.after(100.0)
    assert deadline.bounded
    assert 99.0 < deadline.remaining() <= 100.0
    assert 99.0 < deadline.solver_limit_s() <= 100.0


def test_past_deadline_is_expired_and_solvers_still_get_a_floor() -> None:
    deadline = Deadline(time.monotonic() - 1.0)
    assert deadline.expired()
    assert deadline.remaining() == 0.0
    assert deadline.solver_limit_s() == MIN_SOLVER_LIMIT_S
    with pytest.raises(DeadlineExpiredError):
        deadline.check()


def test_child_takes_a_fraction_of_what_is_left() -> None:
    parent = Deadline.after(100.0)
    child = parent.child(0.25)
    assert child.at <= parent.at
    assert 24.0 < child.remaining() <= 25.0
    assert parent.child(1.0).at <= parent.at
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError):
            parent.child(bad)


def test_earliest_and_within() -> None:
    soon, late = Deadline.after(10.0), Deadline.after(1000.0)
    assert soon.earliest(late) == soon
    assert late.earliest(soon) == soon
    assert late.within(10.0).remaining() <= 10.0
    assert soon.within(0) == soon
    assert Deadline.never().within(5.0).bounded


def test_a_deadline_travels_between_processes_as_a_number() -> None:
    # time.monotonic() is one clock for the whole machine: rebuilding from `at` keeps the instant
    deadline = Deadline.after(50.0)
    assert Deadline(deadline.at) == deadline


def test_leaving_holds_back_time_for_later_stages_but_at_most_a_share() -> None:
    assert Deadline.never().leaving(5.0) == Deadline.never()
    deadline = Deadline.after(100.0)
    assert deadline.at - deadline.leaving(10.0).at == pytest.approx(10.0)
    # asking for more than the share holds back only the share of what is left
    held = deadline.at - deadline.leaving(90.0, max_share=0.5).at
    assert 49.0 < held <= 50.0
    assert deadline.leaving(-1.0) == deadline
    past = Deadline(time.monotonic() - 1.0)
    assert past.leaving(10.0) == past
