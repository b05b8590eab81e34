"""The life of a peer of the object storage server, as one table (`PEER_LIFECYCLE`).

A peer is served once it said Hello with a compatible version, as a role its credential allows, and only while
its messages come with the key it said Hello with; it is forgotten when the connection of its last Hello closes
(it says Hello again on its next one). `object_store.ObjectStore` steps each peer through this table and carries
out the actions.
"""

from __future__ import annotations

import enum

from scaler.protocol.lifecycle import Lifecycle, Transition


class PeerState(enum.Enum):
    STRANGER = "stranger"  # no Hello yet, or a Hello of an incompatible version: not served
    GREETED = "greeted"  # said Hello with a compatible version: served


class PeerEvent(enum.Enum):
    HELLO = "hello"  # of a compatible version, as a role its credential allows
    BAD_HELLO = "bad_hello"  # of an incompatible version
    FORBIDDEN = "forbidden"  # a Hello as a role its key is not authorized as, or any message with another key
    REQUEST = "request"  # any other message
    LEFT = "left"  # the connection of its last Hello closed


class PeerAction(enum.Enum):
    ACKNOWLEDGE = "acknowledge"  # HelloAck; note the peer's role, key and whether it reads objects of several frames
    REFUSE_VERSION = "refuse_version"  # Refusal naming both versions; forget the peer
    REFUSE_CREDENTIAL = "refuse_credential"  # Refusal naming the key and the role (a greeted peer stays as it was)
    REFUSE_STRANGER = "refuse_stranger"  # Refusal: send Hello first
    SERVE = "serve"  # the answer to its request
    FORGET = "forget"  # its greeting: its next connection says Hello again


S, E, A, T = PeerState, PeerEvent, PeerAction, Transition
PEER_LIFECYCLE: Lifecycle[PeerState, PeerEvent] = Lifecycle(
    "storage peer",
    states=PeerState,
    terminal=(),
    always_possible=PeerEvent,
    table={
        (S.STRANGER, E.HELLO): T(S.GREETED, (A.ACKNOWLEDGE,)),
        (S.STRANGER, E.BAD_HELLO): T(S.STRANGER, (A.REFUSE_VERSION,)),
        (S.STRANGER, E.FORBIDDEN): T(S.STRANGER, (A.REFUSE_CREDENTIAL,)),
        (S.STRANGER, E.REQUEST): T(S.STRANGER, (A.REFUSE_STRANGER,)),
        (S.STRANGER, E.LEFT): T(S.STRANGER),
        (S.GREETED, E.HELLO): T(S.GREETED, (A.ACKNOWLEDGE,)),
        (S.GREETED, E.BAD_HELLO): T(S.STRANGER, (A.REFUSE_VERSION,)),  # no longer served
        (S.GREETED, E.FORBIDDEN): T(S.GREETED, (A.REFUSE_CREDENTIAL,)),  # its identity stays bound to its key
        (S.GREETED, E.REQUEST): T(S.GREETED, (A.SERVE,)),
        (S.GREETED, E.LEFT): T(S.STRANGER, (A.FORGET,)),
    },
)
del S, E, A, T
