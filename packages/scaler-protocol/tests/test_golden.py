"""Golden vectors: the encoded bytes of one fixed message per type, frozen per protocol version.

golden/v1.0/ holds what peers of protocol version 1.0 send, golden/v1.1/ what peers of 1.1 send, and so on.
A directory is written once, when its version is released, and never rewritten: FROZEN pins the digest of
each. Today's code must decode every version's bytes to the values that version encoded (GOLDEN, with the
fields added since at their defaults, and OLDER_VALUES where an old vector held other values): that proves
bytes from an older peer still read the same and that new fields are optional. Today's code must also encode
GOLDEN to exactly the current version's bytes.

Any change of the bytes on the wire is a new protocol version: bump PROTOCOL_VERSION in
scaler/protocol/version.py, list the new fields in ADDED_IN, give them non-default values in GOLDEN, write
the new version's directory with

    SCALER_WRITE_GOLDEN=1 python -m pytest packages/scaler-protocol/tests/test_golden.py

(it refuses to touch a directory that exists), and add the digest the tests print to FROZEN. An incompatible
change fails decoding the older directories: it needs a new major protocol version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.version import PROTOCOL_VERSION, show_version

GOLDEN_ROOT = Path(__file__).parent / "golden"
CURRENT = show_version(PROTOCOL_VERSION)

# sha256 of each frozen directory (see _digest): a rewritten vector fails the tests
FROZEN = {
    "1.0": "69a3850171c8160235356d836fcdaf361884a5544fd65cb45310fb4b19f5b6a5",
    "1.1": "d326e031389d691bbaa1dc63b0942cec543c191f37133ce09310beffc3b31109",
    "1.2": "5d325b06524dab17f7aff68d5c590b769f7bd13fddbe6c4934ea5916e375a330",
    "1.3": "50189c6aa17e6c32f23cdcc4c8f48d8bc4a740c61a285d352067f380bad00061",
    "1.4": "ed2cd03bbfbc75b7582a61e11fb6fa9286331145d11e981dd4b1f6b72d5732a2",
    "1.5": "c7b3ef6b209b07c836da3fe2e20a2c047460f04eb3ed4619065eee272607da95",
    "1.6": "1e5a617b076e56d5da19d499278e0bba9d2390c9e0ef50bba76ec5604dd2415d",
    "1.7": "ea55ca9b8b731e39e253831312affaac22181827130fc4de5402faf19c75454c",
    "1.8": "92baea660e0e3e34d095a5a5126a334e6e13b8c6b1df082945e33862b9957d0d",
}

# Fields each version appended, as (message or struct type, field name): zero in every older vector; a field
# name of None is a message type the version appended (no older directory holds a vector of it).
ADDED_IN: Dict[str, List[Tuple[type, Optional[str]]]] = {
    "1.1": [(m.ObjectRequest, "frame_counts"), (m.ObjectResponse, "frame_counts")],
    "1.2": [(m.WorkerHeartbeat, "functions"), (m.StateSnapshot, "client_snapshots")],
    "1.3": [(m.Task, "stream_output"), (m.TaskOutputBatch, None)],
    "1.4": [(m.WaitingTasks, None)],
    "1.5": [
        (m.HelloAck, "role"),
        (m.TaskBatch, "sequence"),
        (m.WorkerHeartbeat, "last_batch"),
        (m.WorkerHeartbeat, "held_tasks"),
        (m.WorkerHeartbeat, "held_digest"),
        (m.WorkerHeartbeat, "held_task_ids"),
        (m.WorkerHeartbeatEcho, "send_task_ids"),
    ],
    "1.6": [
        (m.WorkerInfo, "group_id"),
        (m.WorkerSnapshot, "group_id"),
        (m.WorkerSnapshot, "draining"),
        (m.StateSnapshot, "managers"),
        (m.WorkerManagerHeartbeat, "workers_per_group"),
        (m.WorkerManagerHeartbeat, "min_groups"),
        (m.WorkerManagerHeartbeat, "max_groups"),
        (m.WorkerManagerHeartbeat, "capabilities"),
        (m.WorkerManagerHeartbeat, "groups"),
        (m.WorkerManagerHeartbeat, "kind"),
        (m.WorkerManagerCommand, "desired_groups"),
        (m.WorkerManagerCommand, "stop_groups"),
    ],
    "1.7": [(m.GraphTask, "more")],
    "1.8": [
        (m.WorkerInfo, "delegation_key"),
        (m.Hello, "made_in"),
        (m.Hello, "made_in_proof"),
        (m.Task, "scope_id"),
        (m.ObjectRequest, "scope_id"),
        (m.HelloAck, "max_message_size"),
        (m.HelloAck, "client_quota"),
        (m.ClientSnapshot, "stored_bytes"),
        (m.StateSnapshot, "client_task_quota"),
        (m.StateSnapshot, "client_memory_quota"),
        (m.ClientHeartbeat, "report_tasks"),
        (m.ClientHeartbeat, "functions"),
        (m.ClientHeartbeatEcho, "record_tasks"),
        (m.ClientHeartbeatEcho, "task_runs"),
        (m.WorkerHeartbeat, "ended_runs"),
        (m.WorkerHeartbeat, "current_runs"),
        (m.WorkerHeartbeatEcho, "record_tasks"),
        (m.Task, "queued_seconds"),
        (m.ObjectResponse, "summary"),
        (m.StateSnapshot, "events"),
        (m.StateSnapshot, "object_summary"),
        (m.WorkerHeartbeat, "memory_limit_bytes"),
        (m.WorkerHeartbeat, "memory_kills"),
        (m.SchedulerInfoRequest, None),
        (m.SchedulerInfo, None),
        (m.WorkerCall, None),
        (m.WorkerCallResult, None),
        (m.WorkerCallAnswer, None),
        (m.Hello, "reconnect_seconds"),
        (m.Hello, "resuming"),
        (m.WorkerInfo, "held_tasks"),
        (m.GraphTask, "again"),
        (m.WorkerHeartbeat, "memory_killed"),
        (m.ObjectResponse, "spilled_sizes"),
        (m.ClientSnapshot, "spilled_bytes"),
    ],
}


_VERSION = m.Version(major=1, minor=3)
_CAPABILITIES = [m.Capability("gpu", 2), m.Capability("linux", 1)]
_TASK_ID = bytes(range(16))
_OTHER_TASK_ID = bytes(range(16, 32))
_CLIENT_ID = b"C|golden-host|4242|0a0b0c0d0e0f"
_WORKER_ID = b"W|golden-host|4343|1a1b1c1d1e1f"
_MANAGER_ID = b"M|golden-host|4444|2a2b2c2d2e2f"
_GROUP_ID = _MANAGER_ID + b"/7"
_MANAGER_HEARTBEAT = m.WorkerManagerHeartbeat(
    max_workers=64,
    running_workers=12,
    workers_per_group=4,
    min_groups=1,
    max_groups=16,
    capabilities=_CAPABILITIES,
    groups=[
        m.WorkerGroup(_GROUP_ID, m.WorkerGroupState.RUNNING, 4, "slurm job 17"),
        m.WorkerGroup(_MANAGER_ID + b"/8", m.WorkerGroupState.RETIRING, 4, "slurm job 18"),
    ],
    kind="slurm",
)
_TASK_RUNS = m.TaskRuns(
    function_names=["module.square", "module.fail"],
    client_ids=[_CLIENT_ID],
    worker_ids=[_WORKER_ID],
    task_ids=[_TASK_ID, _OTHER_TASK_ID],
    functions=[0, 1],
    clients=[0, 0],
    workers=[0, 0],
    queued_seconds=[0.25, 1.5],
    run_seconds=[0.125, 2.0],
    ended_seconds_ago=[0.5, 0.75],
    failed_runs=[1],
    failed_statuses=[m.TaskStatus.FAILED],
    error_texts=["ValueError: raised in the task"],
)
_OBJECT_SUMMARY = m.ObjectSummary(
    largest_ids=[b"object-id-0000001"],
    largest_owners=[_CLIENT_ID],
    largest_sizes=[2 << 20],
    largest_spilled=[True],
    memory_bytes=5 << 20,
    spilled_bytes=3 << 20,
)
_HEARTBEAT = m.WorkerHeartbeat(
    agent_cpu=1.5,
    agent_rss_bytes=33_554_432,
    processor_cpu=99.25,
    processor_rss_bytes=67_108_864,
    queued_tasks=7,
    running_tasks=2,
    suspended_tasks=1,
    functions=[m.FunctionStats("module.square", succeeded=120_000, failed=3, seconds=12.75)],
    last_batch=41,
    held_tasks=2,
    held_digest=0xFEDCBA9876543210,
    held_task_ids=[_TASK_ID, _OTHER_TASK_ID],
    ended_runs=_TASK_RUNS,
    current_runs=_TASK_RUNS,
    memory_limit_bytes=12_884_901_888,
    memory_kills=2,
    memory_killed=[m.MemoryKill(_TASK_ID, "module.square", 13_000_000_000, False), m.MemoryKill(refused=True)],
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
    stream_output=True,
    scope_id=b"C|golden-host|4141|3a3b3c3d3e3f",
    queued_seconds=0.5,
)

_STATE_SNAPSHOT = m.StateSnapshot(
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
            group_id=_GROUP_ID,
            draining=True,
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
            stored_bytes=3 << 30,
            spilled_bytes=1 << 30,
        )
    ],
    managers=[
        m.ManagerSnapshot(
            manager_id=_MANAGER_ID,
            heartbeat=_MANAGER_HEARTBEAT,
            desired_groups=3,
            draining_groups=[_GROUP_ID],
            last_seen_seconds_ago=0.25,
        )
    ],
    client_task_quota=100_000,
    client_memory_quota=2 << 30,
    events=[m.MonitorEvent(1.25, "worker joined", _WORKER_ID, "worker W|golden-host|4343 joined")],
    object_summary=_OBJECT_SUMMARY,
)

GOLDEN = [
    m.Hello(
        version=_VERSION,
        role=m.PeerRole.WORKER,
        pid=4343,
        hostname="golden-host",
        worker_info=m.WorkerInfo(
            slots=4,
            queue_capacity=1000,
            capabilities=_CAPABILITIES,
            group_id=_GROUP_ID,
            delegation_key=bytes(range(32)),
            held_tasks=[
                m.HeldTask(_TASK_ID, _CLIENT_ID, b"C|golden-host|4141|3a3b3c3d3e3f", attempt=2, waiting=True),
                m.HeldTask(_OTHER_TASK_ID, _CLIENT_ID, attempt=1),
            ],
        ),
        made_in=_OTHER_TASK_ID,
        made_in_proof=bytes(range(64, 96)),
        reconnect_seconds=60.0,
        resuming=True,
    ),
    m.HelloAck(
        version=_VERSION,
        object_storage_address="tcp://127.0.0.1:2346",
        heartbeat_interval_seconds=2.0,
        timeout_seconds=60.0,
        role=m.PeerRole.OBJECT_STORAGE,
        max_message_size=(1 << 30) + (16 << 20),
        client_quota=2 << 30,
    ),
    m.Refusal(version=_VERSION, reason="protocol version 2.0 is not compatible with protocol version 1.3"),
    m.ClientHeartbeat(
        cpu=12.5,
        rss_bytes=123_456_789,
        pending_tasks=100_000,
        report_tasks=True,
        functions=[m.Counter("module.square", 99_000)],
    ),
    m.ClientHeartbeatEcho(record_tasks=True, task_runs=_TASK_RUNS),
    _HEARTBEAT,
    m.WorkerHeartbeatEcho(send_task_ids=True, record_tasks=True),
    m.TaskBatch(
        tasks=[_TASK, m.Task(task_id=_OTHER_TASK_ID, client_id=_CLIENT_ID, function_id=b"f", priority=1)], sequence=41
    ),
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
    m.GraphTask(graph_id=b"graph-0001", tasks=[_TASK], targets=[_TASK_ID], more=True, again=True),
    m.ObjectRequest(
        request_id=2**40 + 5,
        kind=m.ObjectRequestKind.PUT,
        owner_id=_CLIENT_ID,
        object_ids=[b"o1", b"o2"],
        frame_counts=[1, 3],
        scope_id=b"C|golden-host|4141|3a3b3c3d3e3f",
    ),
    m.ObjectResponse(
        request_id=2**40 + 5,
        kind=m.ObjectRequestKind.PUT,
        object_ids=[b"o1", b"o2", b"o3"],
        statuses=[m.ObjectStatus.OK, m.ObjectStatus.TOO_LARGE, m.ObjectStatus.STORAGE_FULL],
        sizes=[10, 1 << 33, 0],
        reason="object o2 is larger than the limit",
        frame_counts=[2],
        summary=_OBJECT_SUMMARY,
        spilled_sizes=[4, 1 << 32, 0],
    ),
    m.ObjectInstruction(kind=m.ObjectInstructionKind.DELETE, owner_id=_CLIENT_ID, object_ids=[b"o1"]),
    m.DisconnectRequest(reason="client closed"),
    m.DisconnectResponse(),
    m.ClientShutdownRequest(),
    m.ClientShutdownResponse(accepted=True, reason="shutting down"),
    m.BalanceRequest(count=17),
    m.BalanceResponse(task_ids=[_TASK_ID]),
    _STATE_SNAPSHOT,
    _MANAGER_HEARTBEAT,
    m.WorkerManagerCommand(
        kind=m.WorkerManagerCommandKind.STOP_WORKERS,
        count=2,
        worker_ids=[_WORKER_ID],
        desired_groups=3,
        stop_groups=[_GROUP_ID],
    ),
    m.TaskOutputBatch(
        outputs=[
            m.TaskOutput(task_id=_TASK_ID, client_id=_CLIENT_ID, stream=m.OutputStream.STDOUT, text="step 1 of 3\n"),
            m.TaskOutput(task_id=_TASK_ID, client_id=_CLIENT_ID, stream=m.OutputStream.STDERR, text="warning: é\n"),
        ]
    ),
    m.WaitingTasks(task_ids=[_TASK_ID, _OTHER_TASK_ID], waiting=[True, False]),
    m.SchedulerInfoRequest(),
    m.SchedulerInfo(
        snapshot=_STATE_SNAPSHOT, monitor_address="tcp://127.0.0.1:2347", dashboard_link="http://127.0.0.1:8081/"
    ),
    m.WorkerCall(call_id=7, kind=m.WorkerCallKind.UPLOAD, client_id=_CLIENT_ID, name="helper.py", payload=b"X = 1\n"),
    m.WorkerCallResult(
        call_id=7, client_id=_CLIENT_ID, worker_id=b"W|host|42|ab", success=True, payload=b"\x80\x05K\x01.", error="no"
    ),
    m.WorkerCallAnswer(
        call_id=7, results=[m.WorkerCallResult(call_id=7, client_id=_CLIENT_ID, success=True, payload=b"\x80\x05N.")]
    ),
]


# The messages of older vectors whose values differ from GOLDEN other than by the fields added since
# (1.1 changed the golden ObjectRequest into a PUT, whose frame counts mean something).
OLDER_VALUES: Dict[str, List] = {
    "1.0": [
        m.ObjectRequest(
            request_id=2**40 + 5, kind=m.ObjectRequestKind.CLEAR_OWNER, owner_id=_CLIENT_ID, object_ids=[b"o1", b"o2"]
        ),
    ],
}


def _key(version: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


VERSIONS = sorted(FROZEN, key=_key)


def golden_path(version: str, message_type: type) -> Path:
    return GOLDEN_ROOT / f"v{version}" / f"{codec.message_name(message_type)}.bin"


def _digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.bin")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def write_current_vectors() -> None:
    """Write golden/v<current>/ from GOLDEN (run with SCALER_WRITE_GOLDEN=1); an existing directory stays."""
    directory = GOLDEN_ROOT / f"v{CURRENT}"
    if directory.exists():
        raise FileExistsError(f"{directory} exists: frozen vectors are never rewritten (see this module's docstring)")
    directory.mkdir(parents=True)
    for message in GOLDEN:
        golden_path(CURRENT, type(message)).write_bytes(codec.encode(message)[0])


if os.environ.get("SCALER_WRITE_GOLDEN") == "1":
    write_current_vectors()


def _without_fields_added_after(version: str, value):
    """``value`` as a peer of ``version`` wrote it: the fields appended by later versions at their defaults."""
    if isinstance(value, list):
        return [_without_fields_added_after(version, item) for item in value]
    if not dataclasses.is_dataclass(value):
        return value
    later = {name for added, fields in ADDED_IN.items() if _key(added) > _key(version) for kind, name in fields
             if kind is type(value)}  # fmt: skip
    default = type(value)()
    changes = {
        f.name: getattr(default, f.name)
        if f.name in later
        else _without_fields_added_after(version, getattr(value, f.name))
        for f in dataclasses.fields(value)
    }
    return dataclasses.replace(value, **changes)


def expected_values(version: str) -> Dict[type, object]:
    """What each message of golden/v<version>/ decodes to."""
    values = {type(message): _without_fields_added_after(version, message) for message in GOLDEN}
    values.update((type(message), message) for message in OLDER_VALUES.get(version, []))
    return values


def _ids(message) -> str:
    return type(message).__name__


def _vectors() -> List[Tuple[str, type]]:
    return [(version, kind) for version in VERSIONS for kind in m.MESSAGE_TYPES if golden_path(version, kind).exists()]


def test_one_golden_message_per_type():
    assert [type(message) for message in GOLDEN] == list(m.MESSAGE_TYPES)
    names = sorted(golden_path(CURRENT, kind).name for kind in m.MESSAGE_TYPES)
    assert sorted(path.name for path in (GOLDEN_ROOT / f"v{CURRENT}").glob("*.bin")) == names


def test_every_version_directory_is_frozen_and_the_current_one_exists():
    assert CURRENT in FROZEN, f"protocol version {CURRENT} has no frozen vectors: see this module's docstring"
    assert sorted(path.name for path in GOLDEN_ROOT.iterdir()) == sorted(f"v{version}" for version in FROZEN)
    digests = {version: _digest(GOLDEN_ROOT / f"v{version}") for version in VERSIONS}
    assert digests == FROZEN, "a frozen golden directory changed (or a new one needs its digest in FROZEN)"


def test_older_vectors_hold_only_message_types_of_today():
    names = {golden_path(version, kind).name for version in VERSIONS for kind in m.MESSAGE_TYPES}
    for version in VERSIONS:
        assert {path.name for path in (GOLDEN_ROOT / f"v{version}").glob("*.bin")} <= names


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


@pytest.mark.parametrize("version, kind", _vectors(), ids=lambda x: x if isinstance(x, str) else x.__name__)
def test_every_version_decodes_to_the_values_it_encoded(version, kind):
    decoded, blobs = codec.decode([golden_path(version, kind).read_bytes()])
    assert decoded == expected_values(version)[kind]
    assert blobs == []


@pytest.mark.parametrize("version", [v for v in VERSIONS if _key(v) < _key(CURRENT)])
def test_fields_added_since_an_older_version_read_as_their_defaults(version):
    """New fields are optional: an older peer's message, which lacks them, decodes with each at its default."""
    later = [(kind, name) for added, fields in ADDED_IN.items() if _key(added) > _key(version) for kind, name in fields]
    assert later, f"nothing was added after {version}: its vectors would equal {CURRENT}'s"
    decoded = [codec.decode([golden_path(version, kind).read_bytes()])[0] for _, kind in _vectors() if _ == version]
    for kind, name in later:  # a message type, or a struct inside messages (Task inside TaskBatch, ...)
        if name is None:  # a message type added since
            assert not golden_path(version, kind).exists(), f"{kind.__name__} did not exist in {version}"
            continue
        found = [each for message in decoded for each in _instances(message, kind)]
        reachable = [each for message in expected_values(version).values() for each in _instances(message, kind)]
        if not reachable:  # a struct that travels only in fields added since (ClientSnapshot before 1.2)
            continue
        assert found, f"no {kind.__name__} in the vectors of {version}"
        assert all(getattr(each, name) == getattr(kind(), name) for each in found), f"{kind.__name__}.{name}"
        current = [each for message in GOLDEN for each in _instances(message, kind)]
        assert any(getattr(each, name) != getattr(kind(), name) for each in current), "GOLDEN must set it"


def _instances(value, kind: type) -> List:
    """Every ``kind`` inside ``value`` (a message, a struct or a list of them), ``value`` included."""
    if isinstance(value, list):
        return [found for item in value for found in _instances(item, kind)]
    if not dataclasses.is_dataclass(value):
        return []
    own = [value] if type(value) is kind else []
    return own + [found for f in dataclasses.fields(value) for found in _instances(getattr(value, f.name), kind)]


@pytest.mark.parametrize("message", GOLDEN, ids=_ids)
def test_encoding_is_unchanged(message):
    assert codec.encode(message)[0] == golden_path(CURRENT, type(message)).read_bytes(), (
        f"the encoding of {_ids(message)} changed: a new protocol version (see this module's docstring)"
    )
