"""Golden vectors: the encoded bytes of one fixed message per type, checked in under golden/.

Decoding the checked-in bytes proves that what older peers send still reads the same; re-encoding
the same values proves the encoding did not change. A compatible schema change (appended fields)
changes the bytes: check that decoding still passes, then regenerate with

    SCALER_REGENERATE_GOLDEN=1 python -m pytest packages/scaler-protocol/tests/test_golden.py

and commit the new files. An incompatible change fails decoding: it needs a new major protocol version.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from scaler.protocol import codec
from scaler.protocol import messages as m

GOLDEN_DIR = Path(__file__).parent / "golden"

_VERSION = m.Version(major=1, minor=3)
_CAPABILITIES = [m.Capability("gpu", 2), m.Capability("linux", 1)]
_TASK_ID = bytes(range(16))
_OTHER_TASK_ID = bytes(range(16, 32))
_CLIENT_ID = b"C|golden-host|4242|0a0b0c0d0e0f"
_WORKER_ID = b"W|golden-host|4343|1a1b1c1d1e1f"
_HEARTBEAT = m.WorkerHeartbeat(
    agent_cpu=1.5,
    agent_rss_bytes=33_554_432,
    processor_cpu=99.25,
    processor_rss_bytes=67_108_864,
    queued_tasks=7,
    running_tasks=2,
    suspended_tasks=1,
    functions=[m.FunctionStats("module.square", succeeded=120_000, failed=3, seconds=12.75)],
)
_TASK = m.Task(
    task_id=_TASK_ID,
    client_id=_CLIENT_ID,
    function_id=b"function-object-id",
    arguments=[
        m.Argument("", m.ArgumentKind.INLINE, b"\x80\x05K\x10."),
        m.Argument("key", m.ArgumentKind.OBJECT, b"object-id-0000001"),
        m.Argument("dep", m.ArgumentKind.TASK, _OTHER_TASK_ID),
    ],
    priority=-3,
    capabilities=_CAPABILITIES,
    attempt=2,
    timeout_seconds=12.5,
    retries=4,
    profiling=True,
    serializer_id=b"serializer-object",
    store_result=True,
)

GOLDEN = [
    m.Hello(
        version=_VERSION,
        role=m.PeerRole.WORKER,
        pid=4343,
        hostname="golden-host",
        worker_info=m.WorkerInfo(slots=4, queue_capacity=1000, capabilities=_CAPABILITIES),
    ),
    m.HelloAck(
        version=_VERSION,
        object_storage_address="tcp://127.0.0.1:2346",
        heartbeat_interval_seconds=2.0,
        timeout_seconds=60.0,
    ),
    m.Refusal(version=_VERSION, reason="protocol version 2.0 is not compatible with protocol version 1.3"),
    m.ClientHeartbeat(cpu=12.5, rss_bytes=123_456_789, pending_tasks=100_000),
    m.ClientHeartbeatEcho(),
    _HEARTBEAT,
    m.WorkerHeartbeatEcho(),
    m.TaskBatch(tasks=[_TASK, m.Task(task_id=_OTHER_TASK_ID, client_id=_CLIENT_ID, function_id=b"f", priority=1)]),
    m.TaskResultBatch(
        results=[
            m.TaskResult(
                task_id=_TASK_ID,
                attempt=2,
                status=m.TaskStatus.WORKER_DIED,
                payload_kind=m.PayloadKind.OBJECT,
                payload=b"result-object-id",
                error_text="processor killed by signal 9",
                profiling=m.Profiling(duration_seconds=0.75, cpu_seconds=0.5, peak_memory_bytes=1 << 30),
            ),
            m.TaskResult(task_id=_OTHER_TASK_ID, status=m.TaskStatus.SUCCESS, payload_kind=m.PayloadKind.INLINE),
        ]
    ),
    m.TaskCancel(task_ids=[_TASK_ID, _OTHER_TASK_ID]),
    m.TaskCancelConfirm(task_ids=[_TASK_ID, _OTHER_TASK_ID], cancelled=[True, False]),
    m.GraphTask(graph_id=b"graph-0001", tasks=[_TASK], targets=[_TASK_ID]),
    m.ObjectRequest(
        request_id=2**40 + 5,
        kind=m.ObjectRequestKind.PUT,
        owner_id=_CLIENT_ID,
        object_ids=[b"o1", b"o2"],
        frame_counts=[1, 3],
    ),
    m.ObjectResponse(
        request_id=2**40 + 5,
        kind=m.ObjectRequestKind.PUT,
        object_ids=[b"o1", b"o2", b"o3"],
        statuses=[m.ObjectStatus.OK, m.ObjectStatus.TOO_LARGE, m.ObjectStatus.STORAGE_FULL],
        sizes=[10, 1 << 33, 0],
        reason="object o2 is larger than the limit",
        frame_counts=[2],
    ),
    m.ObjectInstruction(kind=m.ObjectInstructionKind.DELETE, owner_id=_CLIENT_ID, object_ids=[b"o1"]),
    m.DisconnectRequest(reason="client closed"),
    m.DisconnectResponse(),
    m.ClientShutdownRequest(),
    m.ClientShutdownResponse(accepted=True, reason="shutting down"),
    m.BalanceRequest(count=17),
    m.BalanceResponse(task_ids=[_TASK_ID]),
    m.StateSnapshot(
        scheduler_cpu=37.5,
        scheduler_rss_bytes=38_797_312,
        task_states=[m.Counter("running", 3), m.Counter("success", 200_000)],
        messages_sent=[m.Counter("TaskBatch", 2_000)],
        messages_received=[m.Counter("TaskResultBatch", 1_999)],
        workers=[
            m.WorkerSnapshot(
                worker_id=_WORKER_ID,
                heartbeat=_HEARTBEAT,
                slots=4,
                assigned_tasks=9,
                capabilities=_CAPABILITIES,
                last_seen_seconds_ago=0.5,
            )
        ],
        clients=2,
        objects=11,
        client_snapshots=[
            m.ClientSnapshot(
                client_id=_CLIENT_ID,
                heartbeat=m.ClientHeartbeat(cpu=0.5, rss_bytes=50_331_648, pending_tasks=1_000),
                tasks=990,
                last_seen_seconds_ago=1.5,
            )
        ],
    ),
    m.WorkerManagerHeartbeat(max_workers=64, running_workers=12),
    m.WorkerManagerCommand(kind=m.WorkerManagerCommandKind.STOP_WORKERS, count=2, worker_ids=[_WORKER_ID]),
]


def golden_path(message) -> Path:
    return GOLDEN_DIR / f"{codec.message_name(type(message))}.bin"


def regenerate_golden() -> None:
    """Rewrite golden/ from GOLDEN (run with SCALER_REGENERATE_GOLDEN=1)."""
    GOLDEN_DIR.mkdir(exist_ok=True)
    for message in GOLDEN:
        golden_path(message).write_bytes(codec.encode(message)[0])


if os.environ.get("SCALER_REGENERATE_GOLDEN") == "1":
    regenerate_golden()


def _ids(message) -> str:
    return type(message).__name__


def test_one_golden_message_per_type():
    assert [type(message) for message in GOLDEN] == list(m.MESSAGE_TYPES)
    assert sorted(path.name for path in GOLDEN_DIR.glob("*.bin")) == sorted(golden_path(x).name for x in GOLDEN)


def _differs_from_default(value, default) -> bool:
    if dataclasses.is_dataclass(value):
        return all(
            _differs_from_default(getattr(value, f.name), getattr(default, f.name)) for f in dataclasses.fields(value)
        )
    return value != default


@pytest.mark.parametrize("message", GOLDEN, ids=_ids)
def test_golden_values_set_every_field(message):
    """Every field holds a non-default value, so the vectors cover every field's encoding."""
    first = message.tasks[0] if isinstance(message, (m.TaskBatch, m.GraphTask)) else message
    first = message.results[0] if isinstance(message, m.TaskResultBatch) else first
    default = type(first)()
    for f in dataclasses.fields(first):
        assert _differs_from_default(getattr(first, f.name), getattr(default, f.name)), f"{_ids(first)}.{f.name}"


@pytest.mark.parametrize("message", GOLDEN, ids=_ids)
def test_checked_in_bytes_decode_to_the_golden_values(message):
    decoded, blobs = codec.decode([golden_path(message).read_bytes()])
    assert decoded == message
    assert blobs == []


@pytest.mark.parametrize("message", GOLDEN, ids=_ids)
def test_encoding_is_unchanged(message):
    assert codec.encode(message)[0] == golden_path(message).read_bytes(), (
        f"the encoding of {_ids(message)} changed; see this module's docstring"
    )


# Messages as protocol 1.1 peers encode them (before the monitoring fields of 1.2): they still decode, the
# fields 1.2 appended read as empty.
_BEFORE_1_2 = {
    "workerHeartbeat": dataclasses.replace(_HEARTBEAT, functions=[]),
    "stateSnapshot": dataclasses.replace(
        GOLDEN[list(m.MESSAGE_TYPES).index(m.StateSnapshot)],
        workers=[
            dataclasses.replace(worker, heartbeat=dataclasses.replace(_HEARTBEAT, functions=[]))
            for worker in GOLDEN[list(m.MESSAGE_TYPES).index(m.StateSnapshot)].workers
        ],
        client_snapshots=[],
    ),
}


@pytest.mark.parametrize("name", sorted(_BEFORE_1_2))
def test_protocol_1_1_messages_decode_with_the_new_fields_empty(name):
    decoded, _ = codec.decode([(GOLDEN_DIR / "protocol-1.1" / f"{name}.bin").read_bytes()])
    assert decoded == _BEFORE_1_2[name]
