"""The protocol version and its compatibility rule.

Peers of the same major version understand each other (minor versions only
append fields); any other pairing is refused with a message naming both.
"""

from __future__ import annotations

from typing import Optional

from scaler.protocol.messages import Version

# 1.1: objects of several frames (ObjectRequest/ObjectResponse.frameCounts)
# 1.2: monitoring: WorkerHeartbeat.functions, StateSnapshot.clientSnapshots
# 1.3: failure handling: HelloAck.role, PeerRole.objectStorage, TaskBatch.sequence, WorkerHeartbeat.lastBatch,
#      heldTasks, heldDigest, heldTaskIds, WorkerHeartbeatEcho.sendTaskIds
PROTOCOL_VERSION = Version(major=1, minor=3)


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
