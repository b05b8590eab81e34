import os
import socket
import threading

from scaler.protocol.ids import IDS_PER_DRAW, IDGenerator, clients_made_in, made_in, new_client_id, new_worker_id, show


def test_client_and_worker_ids_are_readable_and_unique():
    client, worker = new_client_id(), new_worker_id()
    kind, host, pid, suffix = client.decode().split("|")
    assert (kind, host, pid) == ("C", socket.gethostname(), str(os.getpid()))
    assert len(suffix) == 12 and int(suffix, 16) >= 0
    assert worker.startswith(b"W|")
    assert len({new_client_id() for _ in range(100)}) == 100
    assert show(client) == client.decode()
    assert show(worker) == worker.decode()


def test_generated_ids_are_16_random_bytes_that_say_nothing_of_the_next():
    first, second = IDGenerator(), IDGenerator()
    ids = [first.next_id() for _ in range(3 * IDS_PER_DRAW)]  # past a few draws of randomness
    assert all(type(identifier) is bytes and len(identifier) == 16 for identifier in ids)
    assert len(set(ids)) == len(ids)
    # no two IDs of one generator share a prefix or a suffix that would tell the next (as a counter would)
    for part in (slice(0, 8), slice(8, 16)):
        assert len({identifier[part] for identifier in ids}) == len(ids)
    assert not set(ids) & {second.next_id() for _ in range(1000)}


def test_threads_sharing_a_generator_get_distinct_ids():
    generator = IDGenerator()
    drawn: list = []

    def draw() -> None:
        drawn.extend([generator.next_id() for _ in range(IDS_PER_DRAW)])  # each thread crosses a draw

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(drawn) == 4 * IDS_PER_DRAW == len(set(drawn))


def test_show_binary_ids_as_hex():
    identifier = bytes(range(16))
    assert show(identifier) == identifier.hex()
    assert show(b"C|\xff") == "C|\ufffd"  # never raises on a malformed readable ID


def test_a_client_made_inside_a_task_names_it_and_only_there():
    outside = new_client_id()
    with clients_made_in("symphony:7:42"):
        inside = new_client_id()
        elsewhere: list = []
        thread = threading.Thread(target=lambda: elsewhere.append(new_client_id()))  # another thread: no task
        thread.start()
        thread.join(10)
    after = new_client_id()
    assert inside.startswith(b"C|") and inside.endswith(b"|in:symphony:7:42")
    assert made_in(inside) == "symphony:7:42"
    assert [made_in(client_id) for client_id in (outside, after, *elsewhere)] == ["", "", ""]
    assert made_in(b"W|host|1|abc") == ""
