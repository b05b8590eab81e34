"""Dask collections computed on Scaler through client.dask_get, compared with Dask's own local results."""

from __future__ import annotations

import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from scaler import Client, SchedulerClusterCombo


def square(x):
    return x * x


def double(x):
    return 2 * x


def is_odd(x):
    return x % 2 == 1


def explode(x):
    raise ArithmeticError(f"cannot handle {x}")


def summed_on_scaler(values):
    """A task that computes a Dask collection on Scaler itself (nested)."""
    with Client() as client:
        return dask.delayed(sum)([dask.delayed(square)(v) for v in values]).compute(scheduler=client.dask_get)


@pytest.fixture(scope="module")
def cluster():
    combo = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture
def client(cluster):
    with Client(address=cluster.get_address(), timeout_seconds=60) as client:
        yield client


def _delayed_total():
    squares = [dask.delayed(square)(i) for i in range(20)]
    return dask.delayed(sum)(squares)


def test_dask_delayed_three_ways(client):
    expected = sum(i * i for i in range(20))
    total = _delayed_total()
    assert dask.compute(total, scheduler=client.dask_get) == (expected,)
    assert total.compute(scheduler=client.dask_get) == expected
    with dask.config.set(scheduler=client.dask_get):
        assert _delayed_total().compute() == expected
        assert dask.compute(_delayed_total(), {"nested": [_delayed_total()]}) == (expected, {"nested": [expected]})


def test_dask_array_matches_local_results(client):
    values = np.arange(90_000, dtype=np.float64).reshape(300, 300) / 1000.0
    x = da.from_array(values, chunks=(75, 100))
    y = ((x + x.T) @ x).mean(axis=0) - da.sin(x).sum(axis=1)
    local = y.compute(scheduler="sync")
    remote = y.compute(scheduler=client.dask_get)
    np.testing.assert_allclose(remote, local)
    np.testing.assert_allclose(remote, ((values + values.T) @ values).mean(axis=0) - np.sin(values).sum(axis=1))
    rng = da.random.default_rng(42).random((400, 200), chunks=(100, 50))
    assert np.array_equal(rng.compute(scheduler=client.dask_get), rng.compute(scheduler="sync"))
    chunks = x.to_delayed().ravel().tolist()
    assert len(dask.compute(*chunks, scheduler=client.dask_get)) == 12


def test_dask_array_persist_then_compute(client):
    x = da.ones((100, 100), chunks=25) * 3
    persisted = x.persist(scheduler=client.dask_get)
    assert float(persisted.sum().compute(scheduler=client.dask_get)) == 30_000.0


def test_dask_bag(client):
    bag = db.from_sequence(range(1, 101), npartitions=7)
    result = bag.filter(is_odd).map(double).sum()
    assert result.compute(scheduler=client.dask_get) == result.compute(scheduler="sync") == 5000
    words = db.from_sequence(["a b", "b c", "c a a"], npartitions=2).map(str.split).flatten().frequencies()
    assert sorted(words.compute(scheduler=client.dask_get)) == [("a", 3), ("b", 2), ("c", 2)]


def test_dask_dataframe(client):
    frame = pd.DataFrame({"group": [i % 5 for i in range(1000)], "value": list(range(1000))})
    ddf = dd.from_pandas(frame, npartitions=6)
    summary = ddf.groupby("group").value.sum()
    remote = summary.compute(scheduler=client.dask_get).sort_index()
    pd.testing.assert_series_equal(remote, frame.groupby("group").value.sum().sort_index())
    assert int(ddf.value.max().compute(scheduler=client.dask_get)) == 999


def test_dask_failure_raises_the_original_exception(client):
    broken = dask.delayed(sum)([dask.delayed(explode)(1), dask.delayed(square)(2)])
    with pytest.raises(ArithmeticError, match="cannot handle 1"):
        broken.compute(scheduler=client.dask_get)
    assert _delayed_total().compute(scheduler=client.dask_get) == sum(i * i for i in range(20))


def test_classic_graphs_and_nested_keys(client):
    dsk = {"x": 1, "y": (square, "x"), ("z", 0): (sum, ["x", "y"]), ("z", 1): (double, ("z", 0))}
    assert client.dask_get(dsk, [["y", ("z", 0)], ("z", 1)]) == ((1, 2), 4)
    assert client.dask_get(dsk, ("z", 1)) == 4


def test_dask_inside_a_task(client):
    assert client.submit(summed_on_scaler, [1, 2, 3]).result(timeout=120) == 14
