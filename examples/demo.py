"""A real workload on an embedded local cluster: what `python3 dev.py demo` runs."""

import math
import time

from scaler import Client, SchedulerClusterCombo


def square(value: int) -> int:
    return value * value


def main() -> None:
    cluster = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
    try:
        with Client(address=cluster.get_address()) as client:
            print("submit(math.sqrt, 16) ->", client.submit(math.sqrt, 16).result())
            print("sum of map(math.sqrt, 0..99) ->", round(sum(client.map(math.sqrt, [(i,) for i in range(100)])), 2))
            print("submit(square, 4) ->", client.submit(square, 4).result())

            start = time.perf_counter()
            results = client.map(square, [(i,) for i in range(10_000)])
            elapsed = time.perf_counter() - start
            assert results == [i * i for i in range(10_000)]
            print(f"10,000 tasks through map: correct, {10_000 / elapsed:,.0f} tasks/s")

            start = time.perf_counter()
            futures = [client.submit(square, i) for i in range(10_000)]
            assert [future.result() for future in futures] == [i * i for i in range(10_000)]
            elapsed = time.perf_counter() - start
            print(f"10,000 tasks through submit: correct, {10_000 / elapsed:,.0f} tasks/s")
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
