"""The reference examples, against a cluster started from the command line:

    scaler_scheduler tcp://127.0.0.1:2345
    scaler_cluster -n 4 tcp://127.0.0.1:2345
"""

import math

from scaler import Client


def square(value: int):
    return value * value


with Client(address="tcp://127.0.0.1:2345") as client:
    future = client.submit(math.sqrt, 16)
    print(future.result())  # 4.0

    results = client.map(math.sqrt, [(i,) for i in range(100)])
    print(sum(results))  # 661.46...

    print(client.submit(square, 4).result())  # 16
