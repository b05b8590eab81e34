"""Revoking a key ends what it holds within seconds (issue 25, item 6), with real processes: the peers of a key
removed from the authorized keys are told and forgotten without sending anything, the storage server refuses
them, and a monitor subscription of a removed key stops while another monitor keeps receiving. And what a second
key can do under an identity already connected: nothing.

Each test removes a key and makes no other connection after: no handshake (at which the daemons read their keys
again anyway) notices the removal for them; the daemons must read the keys again on their own.
"""

from __future__ import annotations

import os
import time
from typing import List

import pytest
from cluster_processes import wait_until
from hostile_attacks import revoked_subscription_ends
from keyed_clusters import RawPeer, another_client_key, another_key

from scaler import Client
from scaler.monitor.subscription import SnapshotSubscription
from scaler.protocol import messages as m
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.ids import new_client_id, new_worker_id

WITHIN_SECONDS = 30.0  # the bound of every wait: revocation takes a second or two


def test_the_peers_of_a_revoked_key_are_refused_without_sending_anything(secure_cluster, tmp_path):
    alice = another_client_key(secure_cluster, tmp_path, "alice")
    node, node_key = another_key(secure_cluster, tmp_path, "workers", "node9", "worker")
    client = Client(secure_cluster.address, security=alice, heartbeat_interval_seconds=0.5)
    peers: List[RawPeer] = []
    try:
        assert client.submit(len, "ab").result(timeout=60) == 2  # before the raw worker joins: it would hold the task
        raw_client = RawPeer(secure_cluster.address, m.PeerRole.CLIENT, alice, new_client_id())
        peers.append(raw_client)
        raw_worker = RawPeer(secure_cluster.address, m.PeerRole.WORKER, node, new_worker_id())
        peers.append(raw_worker)
        storage = RawPeer(raw_client.answer.object_storage_address, m.PeerRole.CLIENT, alice, raw_client.identity)
        peers.append(storage)
        assert type(raw_client.answer) is m.HelloAck and type(raw_worker.answer) is m.HelloAck
        get = m.ObjectRequest(1, m.ObjectRequestKind.GET, b"", [os.urandom(16)])
        assert type(storage.request(get)) is m.ObjectResponse
        os.remove(os.path.join(secure_cluster.keys.server.authorized_keys, "clients", "alice.key"))
        os.remove(node_key)
        # the raw peers send nothing: the scheduler tells them itself
        for peer, role in ((raw_client, "client"), (raw_worker, "worker")):
            refusal = peer.receive()
            while type(refusal) is not m.Refusal:  # a heartbeat echo, a balance request...
                refusal = peer.receive()
            assert f"is no longer authorized as a {role}" in refusal.reason
        # the storage server refuses the next request, once it read its keys again (every second)
        deadline = time.monotonic() + WITHIN_SECONDS
        while type(answer := storage.request(get)) is not m.Refusal:
            assert time.monotonic() < deadline, f"the storage server still serves a revoked key: {answer}"
            time.sleep(0.1)
        assert "is no longer authorized as a client" in answer.reason
        wait_until(lambda: not client.connected, WITHIN_SECONDS, "the revoked Client to be refused")
        with pytest.raises(DisconnectedError, match="no longer authorized"):
            client.submit(len, "ab").result(timeout=60)
    finally:
        for peer in peers:
            peer.close()
        client.disconnect()
    with Client(secure_cluster.address, security=secure_cluster.security("client")) as other:
        assert other.submit(len, "abc").result(timeout=60) == 3  # everybody else is served as before


def test_a_revoked_monitor_key_stops_receiving_and_another_monitor_goes_on(secure_cluster, tmp_path):
    ops, ops_key = another_key(secure_cluster, tmp_path, "monitors", "ops", "monitor")
    with SnapshotSubscription(secure_cluster.monitor_address, secure_cluster.security("monitor")) as kept:
        assert kept.receive(WITHIN_SECONDS) is not None
        revoked_subscription_ends(secure_cluster.monitor_address, ops, ops_key, WITHIN_SECONDS)
        while kept.receive(0.01) is not None:  # what it had received before the feed closed its subscription
            pass
        for _ in range(3):  # the other monitor reconnected by itself and receives on
            assert kept.receive(WITHIN_SECONDS) is not None
    assert "key(s) that subscribed to the monitor feed revoked" in secure_cluster.log()


def test_a_second_key_cannot_act_under_an_identity_already_connected(secure_cluster, tmp_path):
    """ZeroMQ's ROUTER does not read a connection whose identity is taken (ZMQ_ROUTER_HANDOVER off, so that no one
    can cut the owner off): the second key gets no answer at all, and nothing it sends acts (docs/security.md)."""
    mallory = another_client_key(secure_cluster, tmp_path)
    with Client(secure_cluster.address, security=secure_cluster.security("client")) as victim:
        assert victim.submit(len, "ab").result(timeout=60) == 2
        squatter = RawPeer(secure_cluster.address, m.PeerRole.CLIENT, mallory, victim.client_id, say_hello=False)
        try:
            squatter.send(squatter.hello)
            squatter.send(m.ClientShutdownRequest())
            squatter.send(m.DisconnectRequest("as the victim"))
            assert victim.submit(len, "abc").result(timeout=60) == 3  # served, after all of those arrived
            assert not squatter.socket.poll(1000)  # and nothing was answered to them
        finally:
            squatter.close()
        assert victim.connected
