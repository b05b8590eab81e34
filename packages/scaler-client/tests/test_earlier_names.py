"""The earlier engine's names (scaler.compat.earlier, docs/compatibility.md) in the client installed alone."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import threading

import cloudpickle
import pytest
from client_fakes import FakeScheduler, wait_until
from test_client import _submitted, add, answer, tasks_sent

from scaler import Client
from scaler.compat.earlier import ALIASES
from scaler.protocol.messages import Capability, GraphTask, PayloadKind, Profiling, TaskResult, TaskStatus


def _resolve(dotted: str):
    module, _, attribute = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def _ours(earlier: str) -> bool:
    """True when the component that holds the name of ours is installed (a unit run may lack it)."""
    root = ".".join(ALIASES[earlier].split(".")[:2])
    return importlib.util.find_spec(root) is not None


@pytest.mark.parametrize("earlier", sorted(ALIASES))
def test_each_earlier_name_is_ours(earlier):
    if not _ours(earlier):
        # an alias the client holds (scaler.config.SchedulerConfig) says what to install; a name that lives in the
        # missing distribution itself (scaler.cluster.combo, scaler.worker.agent...) is simply not there
        with pytest.raises(ImportError, match=r"pip install scaler-|No module named 'scaler\.(cluster|worker)'"):
            _resolve(earlier)
        return
    assert _resolve(earlier) is _resolve(ALIASES[earlier])


def test_earlier_defaults_are_ours():
    from scaler.config import defaults
    from scaler.io import config as io_config

    client = inspect.signature(Client).parameters
    assert defaults.DEFAULT_CLIENT_TIMEOUT_SECONDS == client["timeout_seconds"].default
    assert defaults.DEFAULT_HEARTBEAT_INTERVAL_SECONDS == client["heartbeat_interval_seconds"].default
    assert (
        defaults.DEFAULT_TASK_TIMEOUT_SECONDS
        == inspect.signature(Client.submit_verbose).parameters["timeout_seconds"].default
    )
    assert io_config.DEFAULT_PER_WORKER_QUEUE_SIZE == defaults.DEFAULT_PER_WORKER_QUEUE_SIZE


def test_earlier_serializer_subclass_with_static_methods_is_used(scheduler, storage):
    """An earlier custom serializer: a subclass of scaler.client.serializer.mixins.Serializer, static methods."""
    from scaler.client.serializer.mixins import Serializer

    class Tagged(Serializer):
        @staticmethod
        def serialize(obj):
            return b"tagged:" + cloudpickle.dumps(obj)

        @staticmethod
        def deserialize(payload):
            assert payload.startswith(b"tagged:")
            return cloudpickle.loads(payload[len(b"tagged:") :])

    with Client(scheduler.address, serializer=Tagged()) as client:
        future = _submitted(scheduler, client)
        (task,) = tasks_sent(scheduler)
        assert task.arguments[0].data.startswith(b"tagged:")
        answer(scheduler, client, TaskResult(future.task_id, 0, TaskStatus.SUCCESS, PayloadKind.INLINE,
                                             Tagged.serialize(111)))  # fmt: skip
        assert future.result(timeout=10) == 111


def test_security_config_without_credentials_only():
    from scaler.config import SecurityConfig

    assert not SecurityConfig().has_credentials()
    with pytest.raises(ValueError, match="CurveZMQ"):
        SecurityConfig(tls_cert="cert.pem", tls_key="key.pem")


def test_identity_and_profile_result_names_in_a_done_callback(scheduler: FakeScheduler, storage):
    """What Parfun does: read profiling_info().cpu_time_s in a done callback, and key clients by identity."""
    seen = {}
    called = threading.Event()

    def on_done(future):
        try:
            info = future.profiling_info()
            seen["values"] = (info.duration_s, info.cpu_time_s, info.memory_peak)
        finally:
            called.set()

    with Client(scheduler.address, profiling=True) as client:
        assert client.identity == client.client_id
        future = _submitted(scheduler, client)
        future.add_done_callback(on_done)
        result = TaskResult(future.task_id, 0, TaskStatus.SUCCESS, PayloadKind.INLINE, cloudpickle.dumps(3))
        result.profiling = Profiling(duration_seconds=1.5, cpu_seconds=1.0, peak_memory_bytes=1024)
        answer(scheduler, client, result)
        assert called.wait(10)
    assert seen["values"] == (1.5, 1.0, 1024)


def test_map_sends_capabilities(executing_scheduler: FakeScheduler, storage):
    with Client(executing_scheduler.address) as client:
        assert client.map(add, [(1,), (2,)], capabilities={"gpu": -1}) == [111, 112]
    assert [task.capabilities for task in tasks_sent(executing_scheduler)] == [[Capability("gpu", -1)]] * 2


def test_get_sends_capabilities(scheduler: FakeScheduler, storage):
    with Client(scheduler.address) as client:
        client.get({"a": (add, 1)}, ["a"], block=False, capabilities={"os": 2})
        wait_until(lambda: scheduler.messages(GraphTask), what="the graph")
        (graph,) = scheduler.messages(GraphTask)
        assert [task.capabilities for task in graph.tasks] == [[Capability("os", 2)]]


def test_map_of_several_iterables_zips_them(executing_scheduler, storage):
    with Client(executing_scheduler.address) as client:
        assert client.map(add, [1, 2], [10, 20]) == [111, 122]


def test_earlier_modules_import_without_the_daemons():
    code = (
        "import sys\n"
        "import scaler.client.serializer.mixins, scaler.client.serializer.default, scaler.config, "
        "scaler.config.defaults, scaler.utility.metadata.profile_result, scaler.utility.exceptions, scaler.io.config\n"
        "assert not [m for m in ('scaler.scheduler', 'scaler.worker', 'psutil') if m in sys.modules]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
