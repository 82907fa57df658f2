"""The replay kernel (``costs.replay``) on hand-built task nets: exact times, FIFO order
on a link, anchors, release times, a cycle that never runs, the deadline."""
from __future__ import annotations

import math

import pytest

from distplan.core.errors import TimeUp
from distplan.costs.replay import CLOCK_EVERY, TaskNet

BW = 1e9      # bytes/s, both links
LAT = 1e-6    # s per link


def net() -> TaskNet:
    """Two devices, two links (link 0 then link 1 make a route)."""
    return TaskNet(2, [BW, BW], [LAT, LAT])


def test_a_tensor_between_two_tasks_is_stored_and_forwarded():
    tn = net()
    a = tn.task(0, 1.0)
    x = tn.transfer((0, 1), 1e9, after=[a])
    b = tn.task(1, 2.0, after=[x])
    done, ran = tn.run()
    hop0 = 1.0 + 1e9 / BW + LAT
    arrived = hop0 + 1e9 / BW + LAT
    assert done == [1.0, arrived, arrived + 2.0]
    assert ran == [True, True, True]
    assert len(tn) == 3 and b == 2


def test_a_link_serves_in_order_of_arrival_ties_in_order_of_release():
    tn = net()
    first = tn.transfer((0,), 1e9)
    second = tn.transfer((0,), 5e8)
    late = tn.transfer((0,), 1e9, release_s=0.1)   # arrives while the first is served: waits for both
    done, _ = tn.run()
    assert done[first] == 1.0 + LAT
    assert done[second] == 1.0 + 0.5 + LAT
    assert done[late] == 1.5 + 1.0 + LAT


def test_a_device_runs_its_tasks_in_the_order_added():
    tn = net()
    x = tn.transfer((0,), 1e9)          # delivered at 1 + LAT
    waits = tn.task(1, 1.0, after=[x])
    free = tn.task(1, 1.0)              # added after: runs after, though it waits for nothing
    done, _ = tn.run()
    assert done[waits] == 1.0 + LAT + 1.0
    assert done[free] == done[waits] + 1.0


def test_an_anchor_is_delivered_when_released():
    tn = net()
    a = tn.transfer((), 0.0, release_s=0.5)
    x = tn.transfer((1,), 1e9, after=[a])
    done, _ = tn.run()
    assert done[a] == 0.5
    assert done[x] == 0.5 + 1.0 + LAT


def test_items_in_a_cycle_never_run():
    tn = net()
    t = tn.task(0, 1.0)
    x = tn.transfer((0,), 1e9, after=[t])
    tn.wait(t, x)                       # the task waits for its own tensor
    done, ran = tn.run()
    assert ran == [False, False] and done == [0.0, 0.0]


def test_the_deadline_stops_a_long_replay():
    tn = net()
    for _ in range(CLOCK_EVERY + 10):
        tn.transfer((0,), 1.0)
    with pytest.raises(TimeUp):
        tn.run(deadline_s=0.0)
    done, _ = tn.run(deadline_s=math.inf)
    assert done[-1] == pytest.approx((CLOCK_EVERY + 10) / BW + LAT, rel=1e-12)
