"""Clients inside a processor (a `TaskContext` installed) share one connection per scope: made without an address
or unpickled there, each Client is a view on the connection of the scope of the task it is made in, which proves
that task to the scheduler; its disconnect and clear concern that Client alone."""

from __future__ import annotations

import pickle
import threading
from typing import Iterator, Optional, Tuple

import pytest
from client_fakes import FakeScheduler, wait_until

from scaler import Client
from scaler.protocol import delegation
from scaler.protocol.messages import DisconnectRequest, Hello, TaskBatch, TaskCancel
from scaler.protocol.task_context import TaskContext, set_task_context


def double(value: int) -> int:
    return 2 * value


KEY = delegation.new_key()


class RunningTask:
    """Stands in for the processor's ``running_task``: the task whose code runs now."""

    def __init__(self) -> None:
        self.now: Optional[Tuple[bytes, bytes]] = None

    def __call__(self) -> Optional[Tuple[bytes, bytes]]:
        return self.now


@pytest.fixture
def running() -> RunningTask:
    return RunningTask()


@pytest.fixture
def context(scheduler: FakeScheduler, running: RunningTask) -> Iterator[TaskContext]:
    installed = TaskContext(scheduler.address, lambda done, timeout, notify: None, running, KEY)
    set_task_context(installed)
    try:
        yield installed
    finally:
        set_task_context(None)
        for connection in installed.connections.values():
            connection.agent.disconnect()
            connection.agent.join(5)


def test_the_clients_of_each_scope_share_a_connection_that_proves_the_task_it_was_made_in(scheduler, context, running):
    alice, bob = b"C|h|1|alice", b"C|h|2|bob"
    made_in = {}
    for n, scope in enumerate((alice, bob, alice)):  # three tasks run in turn, of two scopes
        running.now = (bytes([n]) * 16, scope)
        made_in[n] = Client(timeout_seconds=10)
    assert made_in[0].client_id == made_in[2].client_id != made_in[1].client_id
    hellos = scheduler.messages(Hello)
    assert [hello.made_in for hello in hellos] == [bytes([0]) * 16, bytes([1]) * 16]
    for hello, client in zip(hellos, (made_in[0], made_in[1]), strict=True):
        assert delegation.proven(KEY, client.client_id, hello.made_in, hello.made_in_proof)
    running.now = None  # outside a task's own code (a thread it started): a connection that stands for itself
    assert Client(timeout_seconds=10).client_id not in {c.client_id for c in made_in.values()}
    assert scheduler.messages(Hello)[-1].made_in == b""


def test_clients_made_or_unpickled_in_a_processor_share_one_connection(scheduler, context):
    scheduler.execute = True
    threads_before = threading.active_count()
    made = Client(timeout_seconds=10)
    outside = pickle.dumps(made)
    views = [Client() for _ in range(20)] + [pickle.loads(outside) for _ in range(20)]
    assert threading.active_count() - threads_before <= 2  # one agent thread (and ZeroMQ's I/O thread), once
    assert len(scheduler.messages(Hello)) == 1
    assert {view.client_id for view in views} == {made.client_id}
    assert made.address == scheduler.address
    assert [view.submit(double, n).result(timeout=10) for n, view in enumerate(views[:3])] == [0, 2, 4]


def test_disconnecting_a_view_leaves_the_others_connected(scheduler, context):
    scheduler.execute = True
    first, second = Client(), Client()
    first.disconnect()
    assert not first.connected and second.connected
    assert second.submit(double, 21).result(timeout=10) == 42


def test_clear_on_a_view_cancels_only_the_tasks_it_submitted(scheduler, context):
    first, second = Client(), Client()
    mine = first.submit(double, 1)
    theirs = second.submit(double, 2)
    wait_until(lambda: len([t for b in scheduler.messages(TaskBatch) for t in b.tasks]) == 2, what="both tasks")
    first.clear()
    [cancel] = scheduler.wait_for(TaskCancel)
    assert list(cancel.task_ids) == [mine.task_id]
    wait_until(mine.cancelled, what="the view's task cancelled")
    assert not theirs.done()


def test_outside_a_processor_an_unpickled_client_has_its_own_connection(scheduler):
    with Client(scheduler.address, timeout_seconds=10) as original:
        copy = pickle.loads(pickle.dumps(original))
        try:
            assert copy.client_id != original.client_id
        finally:
            copy.disconnect()


def test_a_connection_no_client_holds_says_goodbye_once_another_is_used(scheduler, context, running):
    running.now = (bytes(16), b"C|h|1|alice")
    alices = Client(timeout_seconds=10).client_id  # made and dropped: its connection is kept, as the last used
    assert scheduler.messages(DisconnectRequest) == []
    running.now = (bytes([1]) * 16, b"C|h|2|bob")
    bobs = Client(timeout_seconds=10)  # another client's task: the last used is now bob's, alice's is unheld
    scheduler.wait_for(DisconnectRequest)
    [(_, identity, _, _)] = scheduler.records(DisconnectRequest)
    assert identity == alices != bobs.client_id and list(context.connections) == [b"C|h|2|bob"]
