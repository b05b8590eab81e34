"""Objects as large as the user needs (issue 28): the maximum object size is an option of the combo (and of
every command), its refusal names it, and a result of more than 1 GiB flows with the cap raised."""

from __future__ import annotations

import pytest

from scaler import Client, ObjectStorageRefusedError, SchedulerClusterCombo

MIB = 1 << 20


def make(size: int) -> bytes:
    return b"\x01" * size


def test_the_maximum_object_size_is_the_combos_and_its_refusal_names_it():
    combo = SchedulerClusterCombo(n_workers=1, max_object_size="1MiB", logging_paths=("/dev/null",))
    try:
        with Client(address=combo.get_address(), timeout_seconds=60) as client:
            with pytest.raises(ObjectStorageRefusedError) as error:
                client.submit(make, 2 * MIB).result(timeout=60)
            assert client.submit(make, MIB // 2).result(timeout=60) == make(MIB // 2)
    finally:
        combo.shutdown()
    text = str(error.value)
    assert "over the maximum object size of 1.0 MiB" in text and "max_object_size=" in text


def test_a_result_of_more_than_a_gibibyte_flows_with_the_cap_raised():
    size = (1 << 30) + 64 * MIB
    combo = SchedulerClusterCombo(n_workers=1, max_object_size="2GiB", logging_paths=("/dev/null",))
    try:
        with Client(address=combo.get_address(), timeout_seconds=120) as client:
            result = client.submit(make, size).result(timeout=300)
            assert len(result) == size and result[:1] == result[-1:] == b"\x01"
            assert result.count(0) == 0
            del result
    finally:
        combo.shutdown()
