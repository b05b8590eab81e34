"""How every core writes down the life of what it tracks: one table, ``(state, event) -> (next state, actions)``.

Each sans-I/O core (scheduler, worker agent, client agent, storage) keeps its lifecycles in a `Lifecycle`:
the table says, for a state and an event, the next state and the actions the core then carries out, in
order (h11's ``_state.py`` is the model). A pair missing from the table is a bug in the caller: `step`
raises `TransitionError` naming the subject and its recent events. A core never re-checks the state after
the table answered; what differs by state is a different entry of the table.

`Lifecycle.check` verifies, when the table is built, that every state named is a member of the states, that
terminal states have no way out, and that every non-terminal state has a way out for each event listed as
possible everywhere (peer gone, not found, ...), so that whatever happens every subject can still end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Generic, Hashable, Iterable, Mapping, Sequence, Tuple, TypeVar

from scaler.protocol.errors import ScalerError

State = TypeVar("State", bound=Hashable)
Event = TypeVar("Event", bound=Hashable)


class TransitionError(ScalerError):
    """An event that the subject's current state has no transition for."""


@dataclass(frozen=True, slots=True)
class Transition(Generic[State]):
    next_state: State
    actions: Tuple[Any, ...] = ()  # carried out by the core, in this order


class Lifecycle(Generic[State, Event]):
    """A table of transitions, checked when built, looked up per event."""

    __slots__ = ("name", "states", "terminal", "_table")

    def __init__(
        self,
        name: str,
        states: Iterable[State],
        terminal: Iterable[State],
        table: Mapping[Tuple[State, Event], Transition[State]],
        always_possible: Iterable[Event] = (),
    ) -> None:
        self.name = name
        self.states: FrozenSet[State] = frozenset(states)
        self.terminal: FrozenSet[State] = frozenset(terminal)
        self._table: Dict[Tuple[State, Event], Transition[State]] = dict(table)
        self.check(always_possible)

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
