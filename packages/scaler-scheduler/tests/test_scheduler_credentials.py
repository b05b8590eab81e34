"""Who may be what at the scheduler core: the roles of keys, the identity bound to a key, a revoked key, and
ownership of tasks (with and without keys)."""

from __future__ import annotations

import dataclasses

from test_scheduler_core import CLIENT, WORKER_A, admitted, core_with, hello, sent, serving, task

from scaler.protocol import messages as m
from scaler.protocol.security import OPEN, Credential
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import STORAGE, AuthorizedKeysRead, FromPeer
from scaler.scheduler.scheduler_settings import SchedulerSettings
from scaler.scheduler.task_lifecycle import TaskState

CLIENT_KEY = Credential("c" * 40, frozenset({m.PeerRole.CLIENT}))
OTHER_CLIENT_KEY = Credential("o" * 40, frozenset({m.PeerRole.CLIENT}))
WORKER_KEY = Credential("w" * 40, frozenset({m.PeerRole.WORKER}))
MONITOR_KEY = Credential("m" * 40, frozenset({m.PeerRole.MONITOR}))


def secure_core() -> SchedulerCore:
    core = serving(SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1")))
    assert type(say_hello(core, CLIENT, m.PeerRole.CLIENT, CLIENT_KEY)) is m.HelloAck
    assert type(say_hello(core, WORKER_A, m.PeerRole.WORKER, WORKER_KEY)) is m.HelloAck
    return core


def say_hello(core: SchedulerCore, source: bytes, role: m.PeerRole, credential: Credential, now: float = 0.0):
    (answer,) = sent(admitted(core, core.handle(FromPeer(source, hello(role), credential), now)), to=source)
    return answer


def test_a_key_connects_only_as_a_role_it_is_authorized_as():
    core = serving(SchedulerCore(SchedulerSettings()))
    for role, credential, held in (
        (m.PeerRole.CLIENT, WORKER_KEY, "worker"),
        (m.PeerRole.CLIENT, MONITOR_KEY, "monitor"),
        (m.PeerRole.WORKER, CLIENT_KEY, "client"),
        (m.PeerRole.CLIENT, Credential("u" * 40, frozenset()), "nothing (unknown or revoked)"),
    ):
        refusal = say_hello(core, b"C|x|1|" + role.name.encode(), role, credential)
        assert type(refusal) is m.Refusal
        assert f"is authorized as {held}, not as a {role.name.lower()}" in refusal.reason
        assert "SHA256:" in refusal.reason
    assert core.client_ids == [] and core.worker_ids == []


def test_a_worker_key_cannot_submit_even_through_a_worker_identity():
    core = secure_core()
    effects = core.handle(FromPeer(WORKER_A, m.TaskBatch([task(1)]), WORKER_KEY), 1.0)
    assert sent(effects, kind=m.TaskBatch) == [] and core.task_count == 0


def test_an_identity_stays_with_the_key_that_said_hello():
    core = secure_core()
    refusal = say_hello(core, CLIENT, m.PeerRole.CLIENT, OTHER_CLIENT_KEY)
    assert type(refusal) is m.Refusal and "connected with another key" in refusal.reason
    effects = core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)]), OTHER_CLIENT_KEY), 1.0)
    assert [type(message) for message in sent(effects)] == [m.Refusal] and core.task_count == 0
    assert CLIENT in core.client_ids  # the client of the first key is still served
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(2)]), CLIENT_KEY), 2.0)
    assert core.task_count == 1


def test_a_revoked_key_is_refused_and_its_peer_forgotten_and_a_key_read_again_is_served():
    core = secure_core()
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)]), CLIENT_KEY), 1.0)
    again = Credential(CLIENT_KEY.key, frozenset({m.PeerRole.CLIENT}))  # the keys were read again, still there
    assert type(sent(core.handle(FromPeer(CLIENT, m.ClientHeartbeat(), again), 2.0))[0]) is m.ClientHeartbeatEcho
    revoked = Credential(WORKER_KEY.key, frozenset())
    effects = core.handle(FromPeer(WORKER_A, m.WorkerHeartbeat(), revoked), 3.0)
    (refusal,) = sent(effects, to=WORKER_A)
    assert type(refusal) is m.Refusal and "no longer authorized as a worker" in refusal.reason
    assert core.worker_ids == []
    assert core.state_counts[TaskState.QUEUED] == 1 and core.state_counts[TaskState.ASSIGNED] == 0  # queued again


def test_peers_whose_keys_were_revoked_are_refused_and_forgotten_as_soon_as_the_keys_are_read_again():
    core = secure_core()
    manager, other = b"M|host|4|mm", b"C|host|5|oo"
    manager_key = Credential("g" * 40, frozenset({m.PeerRole.WORKER_MANAGER}))
    manager_hello = dataclasses.replace(hello(m.PeerRole.WORKER_MANAGER), version=PROTOCOL_VERSION)
    assert type(sent(core.handle(FromPeer(manager, manager_hello, manager_key), 0.0))[0]) is m.HelloAck
    assert type(say_hello(core, other, m.PeerRole.CLIENT, OTHER_CLIENT_KEY)) is m.HelloAck
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)]), CLIENT_KEY), 1.0)
    assert core.state_counts[TaskState.ASSIGNED] == 1
    # the client key and the manager key removed, the worker key moved to the clients' directory
    still = {OTHER_CLIENT_KEY.key: OTHER_CLIENT_KEY, WORKER_KEY.key: Credential(WORKER_KEY.key, CLIENT_KEY.roles)}
    effects = core.handle(AuthorizedKeysRead(still), 2.0)  # no message of theirs needed
    refusals = {to: message.reason for to, message in [(e.to, e.message) for e in effects if hasattr(e, "to")]
                if type(message) is m.Refusal}  # fmt: skip
    assert set(refusals) == {CLIENT, WORKER_A, manager}
    assert "no longer authorized as a client" in refusals[CLIENT]
    assert "no longer authorized as a worker" in refusals[WORKER_A]
    assert "no longer authorized as a worker_manager" in refusals[manager]
    assert core.client_ids == [other] and core.worker_ids == [] and core.task_count == 0  # its task withdrawn
    (echo,) = sent(core.handle(FromPeer(other, m.ClientHeartbeat(), OTHER_CLIENT_KEY), 3.0))
    assert type(echo) is m.ClientHeartbeatEcho  # the other client's key is still served


def test_a_client_cancels_and_clears_only_its_own_tasks_also_without_keys():
    core = core_with()
    other = b"C|host|9|zz"
    assert type(say_hello(core, other, m.PeerRole.CLIENT, OPEN)) is m.HelloAck
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 1.0)
    (confirm,) = sent(core.handle(FromPeer(other, m.TaskCancel([task(1).task_id])), 2.0), to=other)
    assert confirm.cancelled == [False]
    effects = core.handle(FromPeer(other, m.ObjectInstruction(m.ObjectInstructionKind.CLEAR, CLIENT, [])), 3.0)
    assert core.task_count == 2
    clear, admit = sent(effects, to=STORAGE)  # the sender stays: admitted again after its clear
    assert clear.owner_id == other  # the storage server is asked to clear the sender's objects, not the named
    assert (clear.kind, admit.kind, admit.owner_id) == (
        m.ObjectRequestKind.CLEAR_OWNER,
        m.ObjectRequestKind.ADMIT,
        other,
    )
    effects = core.handle(FromPeer(other, m.ObjectInstruction(m.ObjectInstructionKind.DELETE, CLIENT, [b"o"])), 4.0)
    (delete,) = sent(effects, to=STORAGE)
    assert delete.owner_id == other  # storage deletes only the sender's objects among these
