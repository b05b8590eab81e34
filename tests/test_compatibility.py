"""Code written for the earlier engine, run unchanged on a real cluster (docs/compatibility.md).

What Parfun's Scaler backends do is here too (the whole of Parfun runs in tests/thirdparty, tox
environment ``thirdparty``): the earlier combo's options, `Processor.get_current_processor()` inside a
task, `Client(address=None)` there, profiling read in a done callback, clients kept by `identity`.
"""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from scaler import Client, SchedulerClusterCombo, ShutdownRefusedError


def burn(seconds: float) -> float:
    started = time.process_time()
    while time.process_time() - started < seconds:
        pass
    return seconds


def inside_a_worker() -> tuple:
    from scaler.worker.agent.processor.processor import Processor

    processor = Processor.get_current_processor()
    with Client(address=None) as nested:  # the earlier engine's way of reaching the worker's scheduler
        doubled = nested.submit(burn, 0.0).result() * 2
    return processor is not None, processor.scheduler_address(), nested.address, doubled


@pytest.fixture(scope="module")
def earlier_combo(tmp_path_factory):
    """A combo started as the earlier engine's code starts one (Parfun's ScalerLocalBackend among them)."""
    log = tmp_path_factory.mktemp("logs") / "cluster.log"
    config = tmp_path_factory.mktemp("config") / "logging.conf"
    config.write_text(
        "[loggers]\nkeys=root\n[handlers]\nkeys=file\n[formatters]\nkeys=plain\n"
        "[logger_root]\nlevel=INFO\nhandlers=file\n"
        f"[handler_file]\nclass=FileHandler\nformatter=plain\nargs=({str(log)!r}, 'a')\n"
        "[formatter_plain]\nformat=LOGGED-BY-CONFIG %(message)s\n"
    )
    combo = SchedulerClusterCombo(
        2, address=None, logging_paths=("/dev/stdout",), logging_level="INFO", logging_config_file=str(config),
        per_worker_task_queue_size=10,
    )  # fmt: skip
    try:
        yield combo, log
    finally:
        combo.shutdown()


def test_the_earlier_combo_options_are_honoured(earlier_combo):
    combo, log = earlier_combo
    with Client(address=combo.get_address()) as client:
        assert client.submit(burn, 0.0).result(timeout=60) == 0.0
        # protected by default, as the earlier combo: a client cannot shut it down, and is told so
        with pytest.raises(ShutdownRefusedError, match="the scheduler is protected"):
            client.shutdown()
        assert client.submit(burn, 0.0).result(timeout=60) == 0.0
    text = log.read_text()  # every process logged through the config file, none to stdout
    assert "LOGGED-BY-CONFIG" in text and "scheduler" in text.lower() and "worker" in text.lower()


def test_a_task_knows_it_runs_in_a_worker_and_reaches_its_scheduler(earlier_combo):
    from scaler.worker.agent.processor.processor import Processor

    combo, _ = earlier_combo
    assert Processor.get_current_processor() is None  # here, outside any worker
    with Client(address=combo.get_address()) as client:
        inside, processor_address, nested_address, doubled = client.submit(inside_a_worker).result(timeout=60)
    assert inside and processor_address == nested_address == combo.get_address() and doubled == 0.0


def test_profiling_in_a_done_callback_and_clients_by_identity(earlier_combo):
    """Parfun's ScalerSession: profiling_info().cpu_time_s in a done callback sets the caller's future."""
    combo, _ = earlier_combo
    pool = {}
    with Client(address=combo.get_address(), profiling=True) as client:
        pool[client.identity] = client
        outcome: concurrent.futures.Future = concurrent.futures.Future()

        def on_done(future):
            try:
                outcome.set_result((future.result(), future.profiling_info().cpu_time_s))
            except BaseException as error:
                outcome.set_exception(error)

        client.submit(burn, 0.2).add_done_callback(on_done)
        value, cpu_time_s = outcome.result(timeout=60)
        assert value == 0.2 and cpu_time_s >= 0.2
        assert pool.pop(client.identity) is client


def test_the_combo_refuses_an_unknown_earlier_option():
    with pytest.raises(TypeError, match="scaler_policy"):
        SchedulerClusterCombo(1, scaler_policy=object())  # type: ignore[call-arg]
