"""How every core writes down the life of what it tracks: one table, ``(state, event) -> (next state, actions)``.

Each sans-I/O core (scheduler, worker agent, client agent, storage) keeps its lifecycles in a `Lifecycle`:
the table says, for a state and an event, the next state and the actions the core then carries out, in
order (h11's ``_state.py`` is the model). A pair missing from the table is a bug in the caller: `step`
raises `TransitionError` naming the subject and its recent events. A core never re-checks the state after
the table answered; what differs by state is a different entry of the table.

One way to step, for every core: `Lifecycle.plans` compiles the table for a core once, each action replaced by
what carries it out (a callable), and `Lifecycle.advance` steps a subject (anything with ``state`` and
``story`` attributes) on an event: the next state, the event told in its story, the actions carried out in
order with the arguments the core gives. The story is the subject's last events, a few bits each in one
integer (no list per subject; `STORY_LENGTH` of them), which the error of a missing transition names (`refuse`);
`Lifecycle.move` is the same step without carrying out the actions, for a core that does something between.

`Lifecycle.check` verifies, when the table is built, that every state named is a member of the states, that
terminal states have no way out, and that every non-terminal state has a way out for each event listed as
possible everywhere (peer gone, not found, ...), so that whatever happens every subject can still end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    FrozenSet,
    Generic,
    Hashable,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    NoReturn,
    Sequence,
    Tuple,
    TypeVar,
)

from scaler.protocol.errors import ScalerError

State = TypeVar("State", bound=Hashable)
Event = TypeVar("Event", bound=Hashable)


class TransitionError(ScalerError):
    """An event that the subject's current state has no transition for."""


@dataclass(frozen=True, slots=True)
class Transition(Generic[State]):
    next_state: State
    actions: Tuple[Any, ...] = ()  # carried out by the core, in this order


STORY_LENGTH = 8  # the events a subject's story keeps


class Plan(NamedTuple):
    """A transition compiled for a core (`Lifecycle.plans`)."""

    next_state: Any
    code: int  # the event's code in a story
    actions: Tuple[Callable[..., Any], ...]  # what carries out each action, in order


Plans = Dict[Tuple[Any, Any], Plan]


class Lifecycle(Generic[State, Event]):
    """A table of transitions, checked when built, looked up per event."""

    __slots__ = ("name", "states", "terminal", "show", "_table", "_events", "_codes", "_bits", "_story_mask")

    def __init__(
        self,
        name: str,
        states: Iterable[State],
        terminal: Iterable[State],
        table: Mapping[Tuple[State, Event], Transition[State]],
        always_possible: Iterable[Event] = (),
        show: Callable[[Any], str] = str,
    ) -> None:
        self.name = name
        self.show = show  # how the error of a missing transition names a subject (`advance`'s ``subject_id``)
        self.states: FrozenSet[State] = frozenset(states)
        self.terminal: FrozenSet[State] = frozenset(terminal)
        self._table: Dict[Tuple[State, Event], Transition[State]] = dict(table)
        self.check(always_possible)
        events: List[Event] = []
        for _, event in self._table:
            if event not in events:
                events.append(event)
        self._events = events
        self._codes = {event: code for code, event in enumerate(events, start=1)}
        self._bits = len(events).bit_length()
        self._story_mask = (1 << (self._bits * STORY_LENGTH)) - 1

    # ----------------------------------------------------------------- one step, for every core

    def plans(self, carry_out: Callable[[Any], Callable[..., Any]]) -> Plans:
        """The table for a core: each action as ``carry_out(action)`` (looked up once, here), each event's code."""
        return {
            key: Plan(transition.next_state, self._codes[key[1]], tuple(carry_out(a) for a in transition.actions))
            for key, transition in self._table.items()
        }

    def advance(self, plans: Plans, subject: Any, event: Event, subject_id: Any, arguments: Tuple[Any, ...]) -> Plan:
        """Step ``subject`` on ``event`` (as `move` does) and carry out the plan's actions, each given ``arguments``."""
        plan = plans.get((subject.state, event))  # (`move`, written out: this is every core's hot path)
        if plan is None:
            self.refuse(subject.state, event, subject_id, subject.story)
        subject.state = plan.next_state
        subject.story = ((subject.story << self._bits) | plan.code) & self._story_mask
        for action in plan.actions:
            action(*arguments)
        return plan

    def move(self, plans: Plans, subject: Any, event: Event, subject_id: Any) -> Plan:
        """Step ``subject`` on ``event``: its next state, the event told in its story; the plan, whose actions
        the caller carries out. A missing pair raises `TransitionError` naming the subject (``show(subject_id)``)
        and its story."""
        plan = plans.get((subject.state, event))
        if plan is None:
            self.refuse(subject.state, event, subject_id, subject.story)
        subject.state = plan.next_state
        subject.story = ((subject.story << self._bits) | plan.code) & self._story_mask
        return plan

    def refuse(self, state: State, event: Event, subject_id: Any, story: int) -> NoReturn:
        """Raise the `TransitionError` of ``event`` in ``state``, naming the subject and its recent events."""
        subject = self.show(subject_id)
        self.step(state, event, subject, self.recent(story))  # raises, for a pair missing from the table
        raise TransitionError(f"{self.name} {subject}: {_name(state)} on {_name(event)} is missing from the plans")

    def told(self, story: int, event: Event) -> int:
        """``story`` with ``event`` told last."""
        return ((story << self._bits) | self._codes[event]) & self._story_mask

    def recent(self, story: int) -> List[Event]:
        """The events of a story, oldest first."""
        events: List[Event] = []
        low = (1 << self._bits) - 1
        while story:
            events.append(self._events[(story & low) - 1])
            story >>= self._bits
        return events[::-1]

    # ----------------------------------------------------------------- the table

    def step(self, state: State, event: Event, subject: str, history: Sequence[Event] = ()) -> Transition[State]:
        """The transition for ``event`` in ``state``; `TransitionError` naming ``subject`` if there is none."""
        transition = self._table.get((state, event))
        if transition is None:
            raise TransitionError(
                f"{self.name} {subject}: no transition from {_name(state)} on {_name(event)}; "
                f"recent events: {' -> '.join(_name(e) for e in history) or '(none)'}"
            )
        return transition

    def get(self, state: State, event: Event) -> Any:
        """The transition, or None: for callers that treat a missing pair as 'ignore this event'."""
        return self._table.get((state, event))

    def events_from(self, state: State) -> FrozenSet[Event]:
        return frozenset(event for (source, event) in self._table if source == state)

    @property
    def table(self) -> Mapping[Tuple[State, Event], Transition[State]]:
        return self._table

    def check(self, always_possible: Iterable[Event] = ()) -> None:
        problems = []
        for (state, event), transition in self._table.items():
            for named in (state, transition.next_state):
                if named not in self.states:
                    problems.append(f"{_name(named)} is not a state")
            if state in self.terminal:
                problems.append(f"terminal state {_name(state)} has a transition on {_name(event)}")
        for state in self.states - self.terminal:
            for event in always_possible:
                if (state, event) not in self._table:
                    problems.append(f"{_name(state)} has no transition on {_name(event)}")
        if problems:
            raise TransitionError(f"{self.name} lifecycle table: " + "; ".join(sorted(set(problems))))


def _name(value: Any) -> str:
    return str(getattr(value, "value", value))
