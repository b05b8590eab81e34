"""The scaling decision (`scaling_policy.py`), alone: plain values in, decisions out."""

from __future__ import annotations

from typing import Dict, FrozenSet, List

from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.scheduler.scaling_policy import (
    NEEDS_NOTHING,
    GroupLoad,
    ManagerLoad,
    ScalingPolicy,
    ScalingSettings,
    waiting_work,
)

GPU = frozenset({"gpu"})
SETTINGS = ScalingSettings(up_after_seconds=1.0, idle_seconds=5.0)


def manager(name: bytes, groups=(), caps=NEEDS_NOTHING, per_group=2, low=0, high=4) -> ManagerLoad:
    return ManagerLoad(name, caps, per_group, low, high, list(groups))


def busy(group_id: bytes, expected=2, connected=2) -> GroupLoad:
    return GroupLoad(group_id, expected, connected, None)


def idle(group_id: bytes, since: float, expected=2) -> GroupLoad:
    return GroupLoad(group_id, expected, expected, since)


def test_work_that_waits_long_enough_starts_the_groups_that_cover_it_up_to_the_maximum():
    policy = ScalingPolicy(SETTINGS)
    waiting = {NEEDS_NOTHING: 5}
    assert policy.decide([manager(b"M")], waiting, 10.0)[b"M"].desired_groups == 0  # waiting since 10.0
    assert policy.decide([manager(b"M")], waiting, 10.5)[b"M"].desired_groups == 0
    assert policy.decide([manager(b"M")], waiting, 11.0)[b"M"].desired_groups == 3  # ceil(5 / 2)
    assert policy.decide([manager(b"M")], {NEEDS_NOTHING: 100}, 11.5)[b"M"].desired_groups == 4  # its maximum


def test_a_pause_in_the_waiting_restarts_the_delay():
    policy = ScalingPolicy(SETTINGS)
    policy.decide([manager(b"M")], {NEEDS_NOTHING: 5}, 10.0)
    policy.decide([manager(b"M")], {}, 10.6)
    assert policy.decide([manager(b"M")], {NEEDS_NOTHING: 5}, 11.2)[b"M"].desired_groups == 0
    assert policy.decide([manager(b"M")], {NEEDS_NOTHING: 5}, 12.2)[b"M"].desired_groups == 3


def test_groups_starting_cover_the_work_their_workers_will_take():
    policy = ScalingPolicy(SETTINGS)
    starting = manager(b"M", [GroupLoad(b"g1", 2, 0, None), GroupLoad(b"g2", 2, 1, None)])
    policy.decide([starting], {NEEDS_NOTHING: 3}, 0.0)
    assert policy.decide([starting], {NEEDS_NOTHING: 3}, 5.0)[b"M"].desired_groups == 2  # 3 coming cover 3
    assert policy.decide([starting], {NEEDS_NOTHING: 4}, 6.0)[b"M"].desired_groups == 2  # uncovered since 6.0
    assert policy.decide([starting], {NEEDS_NOTHING: 4}, 7.0)[b"M"].desired_groups == 3


def test_the_first_manager_takes_the_work_and_the_next_one_only_what_is_left():
    policy = ScalingPolicy(SETTINGS)
    managers = [manager(b"A", high=2), manager(b"B", high=10)]
    policy.decide(managers, {NEEDS_NOTHING: 10}, 0.0)
    decisions = policy.decide(managers, {NEEDS_NOTHING: 10}, 1.0)
    assert decisions[b"A"].desired_groups == 2  # 4 tasks' worth
    assert decisions[b"B"].desired_groups == 3  # the other 6


def test_work_that_needs_a_capability_starts_only_a_manager_that_offers_it():
    policy = ScalingPolicy(SETTINGS)
    managers = [manager(b"plain"), manager(b"gpu", caps=GPU | {"linux"})]
    policy.decide(managers, {GPU: 1}, 0.0)
    decisions = policy.decide(managers, {GPU: 1}, 1.0)
    assert decisions[b"plain"].desired_groups == 0
    assert decisions[b"gpu"].desired_groups == 1


def test_groups_idle_long_enough_retire_longest_idle_first_keeping_the_minimum():
    policy = ScalingPolicy(SETTINGS)
    groups = [idle(b"g1", 3.0), idle(b"g2", 1.0), idle(b"g3", 9.0), busy(b"g4")]
    decision = policy.decide([manager(b"M", groups, low=3)], {}, 10.0)
    assert decision[b"M"].retire == [b"g2"]  # g1 too is idle 7 s, but the minimum of 3 keeps it
    assert decision[b"M"].desired_groups == 3
    decision = policy.decide([manager(b"M", groups, low=0)], {}, 10.0)
    assert decision[b"M"].retire == [b"g2", b"g1"] and decision[b"M"].desired_groups == 2  # g3: idle 1 s only


def test_the_minimum_is_started_without_work_and_nothing_retires_while_work_waits():
    policy = ScalingPolicy(SETTINGS)
    assert policy.decide([manager(b"M", low=1)], {}, 0.0)[b"M"].desired_groups == 1
    groups = [idle(b"g1", 0.0), busy(b"g2")]
    decision = policy.decide([manager(b"M", groups)], {NEEDS_NOTHING: 1}, 100.0)
    assert decision[b"M"].retire == [] and decision[b"M"].desired_groups == 2


def test_waiting_work_counts_tasks_queued_here_and_tasks_beyond_a_workers_slots():
    queued = {NEEDS_NOTHING: 3, GPU: 2}
    workers = [(frozenset({"linux"}), 5, 1), (NEEDS_NOTHING, 1, 1), (GPU, 0, 1)]
    assert waiting_work(queued, workers) == {NEEDS_NOTHING: 3, GPU: 2, frozenset({"linux"}): 4}


# ----------------------------------------------------------------------------- a property test

CLASSES = [NEEDS_NOTHING, GPU, frozenset({"gpu", "linux"})]


@st.composite
def scenarios(draw):
    managers = [
        dict(
            name=b"M%d" % index,
            caps=draw(st.sampled_from([NEEDS_NOTHING, GPU, frozenset({"gpu", "linux"})])),
            per_group=draw(st.integers(1, 4)),
            low=draw(st.integers(0, 2)),
            high=draw(st.integers(2, 6)),
        )
        for index in range(draw(st.integers(1, 3)))
    ]
    steps = draw(
        st.lists(
            st.tuples(
                st.floats(0.1, 3.0),  # time to the next decision
                st.dictionaries(st.sampled_from(CLASSES), st.integers(0, 30), max_size=3),  # waiting work
                st.integers(0, 3),  # workers that connect to starting groups meanwhile
                st.sets(st.integers(0, 5)),  # groups (by position) that turn busy
            ),
            min_size=1,
            max_size=25,
        )
    )
    return managers, steps


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_decisions_stay_within_limits_follow_the_delays_and_never_overshoot(scenario):
    """Managers that do what they are told: every decision keeps each manager between its limits, starts
    groups only for work it can take that waited the whole delay, covers no more than that work, and retires
    only groups idle for the whole idle delay, never below the minimum."""
    specs, steps = scenario
    policy = ScalingPolicy(SETTINGS)
    groups: Dict[bytes, List[list]] = {spec["name"]: [] for spec in specs}  # [id, expected, connected, idle_since]
    waited_since: Dict[bytes, float] = {}
    now = 0.0
    serial = 0
    for delay, waiting, arrivals, turn_busy in steps:
        now += delay
        for spec in specs:
            for group in groups[spec["name"]]:  # workers arrive; idle groups may turn busy
                if arrivals and group[2] < group[1]:
                    group[2] += 1
                    arrivals -= 1
                if group[2] and group[3] is None:
                    group[3] = now
            for position in turn_busy:
                if position < len(groups[spec["name"]]):
                    groups[spec["name"]][position][3] = None
        loads = [
            ManagerLoad(spec["name"], spec["caps"], spec["per_group"], spec["low"], spec["high"],
                        [GroupLoad(g[0], g[1], g[2], g[3]) for g in groups[spec["name"]]])
            for spec in specs
        ]  # fmt: skip
        decisions = policy.decide(loads, waiting, now)
        for spec, load in zip(specs, loads, strict=True):
            name, decision = spec["name"], decisions[spec["name"]]
            active = len(load.groups)
            takes: FrozenSet = frozenset(k for k, v in waiting.items() if v and k <= spec["caps"])
            servable = sum(waiting[k] for k in takes)
            if servable:
                waited_since.setdefault(name, now)
            else:
                waited_since.pop(name, None)
            after = decision.desired_groups + len(decision.retire)
            assert decision.desired_groups >= spec["low"] or decision.desired_groups >= active - len(decision.retire)
            assert after <= max(active, spec["high"], spec["low"])
            if after > max(active, spec["low"]):  # it grew for work
                assert servable and now - waited_since[name] >= SETTINGS.up_after_seconds
                coming = sum(g.workers_expected - g.workers_connected for g in load.groups)
                assert (after - active - 1) * spec["per_group"] < servable - coming
                assert decision.retire == []
            retired = {g.group_id: g for g in load.groups if g.group_id in decision.retire}
            assert len(retired) == len(decision.retire)
            idle_since = [g.idle_since for g in retired.values()]
            assert all(since is not None and now - since >= SETTINGS.idle_seconds for since in idle_since)
            assert decision.desired_groups >= min(spec["low"], active) or not decision.retire
            # the manager does as told: retired groups go, new ones start with no worker yet
            kept = [g for g in groups[name] if g[0] not in retired]
            for _ in range(decision.desired_groups - len(kept)):
                serial += 1
                kept.append([b"%s/%d" % (name, serial), spec["per_group"], 0, None])
            groups[name] = kept
