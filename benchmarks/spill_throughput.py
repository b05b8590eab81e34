#!/usr/bin/env python3
"""Objects through a spilling storage server against a non-spilling one, in the same run (issue 28;
docs/memory.md has the results).

    python3 benchmarks/spill_throughput.py                       # 48 objects of 8 MiB, 128 MiB of memory
    python3 benchmarks/spill_throughput.py --objects 96 --object-mib 4

Runs in the virtualenv it is started from (Scaler's distributions installed). Two storage servers on free local
ports: one whose memory holds a third of the objects (the rest spill to a directory under the system's
temporary directory), one whose memory holds them all. A raw client puts every object (one put request each,
waiting for its answer), then reads each back in the order put (the oldest first: for the spilling server, each
read brings back an object from disk and spills another), checking every byte. Prints MB/s of puts and of gets
for each server, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cluster_processes import Processes, free_address  # noqa: E402
from raw_peers import RawPeer, identity  # noqa: E402

from scaler.protocol import messages as m  # noqa: E402


def _run(address: str, objects: List[bytes]) -> Tuple[float, float]:
    """(seconds to put them all, seconds to get them all back), each answer awaited."""
    context = zmq.Context()
    peer = RawPeer(context, address, identity("C"))
    try:
        assert isinstance(peer.hello(m.PeerRole.CLIENT), m.HelloAck)
        ids = [index.to_bytes(16, "big") for index in range(len(objects))]
        start = time.perf_counter()
        for request_id, (object_id, data) in enumerate(zip(ids, objects, strict=True), 1):
            peer.send(m.ObjectRequest(request_id, m.ObjectRequestKind.PUT, peer.peer_id, [object_id]), (data,))
            answer = peer.expect(m.ObjectResponse, 120)
            assert answer.statuses == [m.ObjectStatus.OK], answer.reason
        put = time.perf_counter() - start
        start = time.perf_counter()
        for request_id, (object_id, data) in enumerate(zip(ids, objects, strict=True), 1000):
            peer.send(m.ObjectRequest(request_id, m.ObjectRequestKind.GET, peer.peer_id, [object_id]))
            received = peer.receive(120)
            assert received is not None and received[0].statuses == [m.ObjectStatus.OK]
            assert bytes(received[1][0]) == data, f"object {object_id.hex()} read back wrong"
        get = time.perf_counter() - start
        return put, get
    finally:
        peer.close()
        context.destroy(linger=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=48, help="how many objects (default: %(default)s)")
    parser.add_argument("--object-mib", type=int, default=8, help="each object's size (default: %(default)s)")
    args = parser.parse_args()
    size = args.object_mib << 20
    total = args.objects * size
    objects = [os.urandom(64) * (size // 64) for _ in range(args.objects)]
    processes = Processes()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="spill-benchmark-") as spill:
            for title, options in (
                ("spilling (memory: a third)", ["--memory-limit", str(total // 3), "--spill-directory", spill]),
                ("in memory (no spilling)", ["--memory-limit", str(2 * total), "--spill-directory", "none"]),
            ):
                address = free_address()
                processes.storage(address, "--max-object-size", str(size), *options)
                put, get = _run(address, objects)
                rows.append((title, total / put / 1e6, total / get / 1e6))
    finally:
        processes.stop_all()
    print(f"{args.objects} objects of {args.object_mib} MiB ({total >> 20} MiB), each answer awaited: MB/s")
    print(f"{'':<28}{'put':>10}{'get':>10}")
    for title, put_rate, get_rate in rows:
        print(f"{title:<28}{put_rate:>10.0f}{get_rate:>10.0f}")
    (_, spill_put, spill_get), (_, memory_put, memory_get) = rows
    print(f"{'spilling / in memory':<28}{spill_put / memory_put:>10.2f}{spill_get / memory_get:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
