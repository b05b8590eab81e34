"""The protocol version and its compatibility rule.

Peers of the same major version understand each other (minor versions only
append fields); any other pairing is refused with a message naming both.
"""

from __future__ import annotations

from typing import Optional

from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import Version

# 1.1: objects of several frames (ObjectRequest/ObjectResponse.frameCounts)
# 1.2: monitoring: WorkerHeartbeat.functions, StateSnapshot.clientSnapshots
# 1.3: task output streamed to its client: Task.streamOutput, TaskOutputBatch
# 1.4: nested tasks: WaitingTasks (a worker's tasks that wait for the tasks they submitted)
# 1.5: failure handling: HelloAck.role, PeerRole.objectStorage, TaskBatch.sequence, WorkerHeartbeat.lastBatch,
#      heldTasks, heldDigest, heldTaskIds, WorkerHeartbeatEcho.sendTaskIds
# 1.6: worker managers: WorkerInfo.groupId, WorkerManagerHeartbeat's groups and limits, WorkerManagerCommand's
#      desiredGroups and stopGroups, StateSnapshot.managers, WorkerSnapshot.groupId and draining
# 1.7: graphs sent in parts: GraphTask.more
# 1.8: limits and quotas: HelloAck.maxMessageSize, clientQuota, ObjectRequestKind.usage, ClientSnapshot.storedBytes,
#      StateSnapshot.clientTaskQuota, clientMemoryQuota; a client's objects are its own, also through tasks:
#      ObjectRequestKind.admit, ObjectRequest.scopeId, Task.scopeId, Hello.madeIn and madeInProof,
#      WorkerInfo.delegationKey; seeing every task: TaskRuns in WorkerHeartbeat (endedRuns, currentRuns) and
#      ClientHeartbeatEcho (taskRuns), WorkerHeartbeatEcho.recordTasks, ClientHeartbeatEcho.recordTasks,
#      ClientHeartbeat.reportTasks and functions, Task.queuedSeconds, StateSnapshot.events (MonitorEvent) and
#      objectSummary, ObjectRequestKind.summary, ObjectResponse.summary (ObjectSummary); memory
#      limits: WorkerHeartbeat.memoryLimitBytes, memoryKills, memoryKilled (MemoryKill); quotas:
#      ObjectStatus.overQuota; what a scheduler serves, for its clients: SchedulerInfoRequest, SchedulerInfo;
#      reconnecting to a scheduler that restarted: Hello.reconnectSeconds and resuming, WorkerInfo.heldTasks
#      (HeldTask), GraphTask.again; what is spilled to disk: ObjectResponse.spilledSizes,
#      ClientSnapshot.spilledBytes, ObjectSummary.largestSpilled, memoryBytes, spilledBytes; futures as task
#      arguments: Argument kind task in a TaskBatch, TaskStatus.inputsGone; calls on every worker: WorkerCall
#      (WorkerCallKind), WorkerCallResult, WorkerCallAnswer
PROTOCOL_VERSION = Version(major=1, minor=8)


# The first version of each message that a peer of an older minor version cannot read (a new union member):
# it goes only to peers whose Hello or HelloAck says this version or later.
TASK_OUTPUT_VERSION = Version(major=1, minor=3)  # TaskOutputBatch
WAITING_TASKS_VERSION = Version(major=1, minor=4)  # WaitingTasks
RECONCILING_VERSION = Version(major=1, minor=5)  # a worker's heartbeat says what it holds (TaskBatch.sequence, ...)
MANAGING_VERSION = Version(major=1, minor=6)  # the first version whose worker managers the scheduler serves
GRAPH_PARTS_VERSION = Version(major=1, minor=7)  # a scheduler that reads a graph sent in parts (GraphTask.more)
USAGE_VERSION = Version(major=1, minor=8)  # a storage server that answers ObjectRequest(usage)
TASK_INPUTS_VERSION = Version(major=1, minor=8)  # a scheduler that holds a task until the tasks it names end
ISOLATION_VERSION = Version(major=1, minor=8)  # a storage server that takes admit; a worker that reads for a scope
TASK_RUNS_VERSION = Version(major=1, minor=8)  # a scheduler that sends a client the runs of its tasks (TaskRuns)
SCHEDULER_INFO_VERSION = Version(major=1, minor=8)  # a scheduler that answers SchedulerInfoRequest
WORKER_CALLS_VERSION = Version(major=1, minor=8)  # a scheduler and a worker that take a WorkerCall


def knows(theirs: Version, since: Version) -> bool:
    """Whether a peer of version ``theirs`` reads what was added in ``since`` (same major as ours)."""
    return theirs.major == since.major and theirs.minor >= since.minor


def require_scheduler(theirs: Version, since: Version, what: str) -> None:
    """`ProtocolError` unless a scheduler of version ``theirs`` reads what was added in ``since``, which ``what``
    needs."""
    if not knows(theirs, since):
        raise ProtocolError(
            f"{what} needs a scheduler of protocol {show_version(since)} or later; this one speaks "
            f"{show_version(theirs)}"
        )


def show_version(version: Version) -> str:
    return f"{version.major}.{version.minor}"


def incompatibility(theirs: Version, ours: Version = PROTOCOL_VERSION) -> Optional[str]:
    """None when ``theirs`` can talk to ``ours``, else the reason to refuse."""
    if theirs.major == ours.major:
        return None
    return (
        f"protocol version {show_version(theirs)} is not compatible with protocol version "
        f"{show_version(ours)}: major versions differ"
    )
