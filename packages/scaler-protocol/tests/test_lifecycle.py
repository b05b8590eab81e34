import enum

import pytest

from scaler.protocol.lifecycle import STORY_LENGTH, Lifecycle, Transition, TransitionError


class S(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"


class E(enum.Enum):
    START = "start"
    FINISH = "finish"
    PEER_GONE = "peer_gone"


TABLE = {
    (S.WAITING, E.START): Transition(S.RUNNING, ("send",)),
    (S.WAITING, E.PEER_GONE): Transition(S.DONE),
    (S.RUNNING, E.FINISH): Transition(S.DONE, ("reply", "forget")),
    (S.RUNNING, E.PEER_GONE): Transition(S.DONE, ("forget",)),
}


def test_step_gives_next_state_and_actions_in_order():
    life = Lifecycle("task", S, {S.DONE}, TABLE, always_possible=[E.PEER_GONE])
    assert life.step(S.WAITING, E.START, "t1") == Transition(S.RUNNING, ("send",))
    assert life.step(S.RUNNING, E.FINISH, "t1").actions == ("reply", "forget")
    assert life.get(S.DONE, E.START) is None
    assert life.events_from(S.RUNNING) == {E.FINISH, E.PEER_GONE}


def test_missing_pair_names_subject_state_event_and_history():
    life = Lifecycle("task", S, {S.DONE}, TABLE)
    with pytest.raises(TransitionError, match=r"task ab12: no transition from waiting on finish; recent events: start"):
        life.step(S.WAITING, E.FINISH, "ab12", [E.START])


def test_table_checked_when_built():
    with pytest.raises(TransitionError, match="running has no transition on peer_gone"):
        Lifecycle("task", S, {S.DONE}, {(S.WAITING, E.PEER_GONE): Transition(S.DONE)}, always_possible=[E.PEER_GONE])
    with pytest.raises(TransitionError, match="terminal state done has a transition on start"):
        Lifecycle("task", S, {S.DONE}, {**TABLE, (S.DONE, E.START): Transition(S.RUNNING)})
    with pytest.raises(TransitionError, match="elsewhere is not a state"):
        Lifecycle("task", S, {S.DONE}, {(S.WAITING, E.START): Transition("elsewhere")})


class _Subject:
    def __init__(self) -> None:
        self.state = S.WAITING
        self.story = 0


def test_advance_steps_a_subject_tells_its_story_and_carries_out_the_actions_in_order():
    life = Lifecycle("task", S, {S.DONE}, TABLE, show=bytes.hex)
    done = []
    plans = life.plans(lambda action: lambda subject, detail: done.append((action, detail)))
    subject = _Subject()
    life.advance(plans, subject, E.START, b"\xab\x12", (subject, 1))
    assert subject.state is S.RUNNING and done == [("send", 1)]
    life.advance(plans, subject, E.FINISH, b"\xab\x12", (subject, 2))
    assert subject.state is S.DONE and done == [("send", 1), ("reply", 2), ("forget", 2)]
    assert life.recent(subject.story) == [E.START, E.FINISH]
    with pytest.raises(TransitionError, match=r"task ab12: no transition from done on start; recent events: start -> "):
        life.advance(plans, subject, E.START, b"\xab\x12", (subject, 3))
    assert subject.state is S.DONE and len(done) == 3  # nothing moved, nothing carried out


def test_a_story_keeps_the_last_events_only():
    life = Lifecycle("task", S, {S.DONE}, TABLE)
    story = 0
    for _ in range(20):
        story = life.told(story, E.PEER_GONE)
    story = life.told(story, E.START)
    assert life.recent(story) == [E.PEER_GONE] * (STORY_LENGTH - 1) + [E.START]
