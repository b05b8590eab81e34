"""The joblib backend ("scaler") with joblib itself and with scikit-learn, on a real cluster."""

from __future__ import annotations

import multiprocessing
import os
import time

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.svm import SVC

import scaler.compat.joblib  # noqa: F401  (registers the backend)
from scaler.compat.joblib import ScalerBackend


def square(x):
    return x * x


def fail_on_five(x):
    if x == 5:
        raise KeyError("five")
    return x


def process_id(estimator, X, y):
    """A scikit-learn scorer that says which process scored."""
    return float(os.getpid())


def test_registration_makes_the_backend_a_joblib_name(client):
    with joblib.parallel_config(backend="scaler", client=client, n_jobs=2):
        results = joblib.Parallel()(joblib.delayed(square)(i) for i in range(2000))
    assert results == [i * i for i in range(2000)]


def test_joblib_batches_many_short_calls(client):
    """Automatic batching: 20,000 tiny calls take far fewer tasks (each batch is one task)."""
    backend = ScalerBackend(client=client)
    submitted = []
    submit = backend.submit

    def counting_submit(func, callback=None):
        submitted.append(len(func))  # a joblib BatchedCalls knows how many calls it holds
        return submit(func, callback)

    backend.submit = backend.apply_async = counting_submit  # type: ignore[method-assign]
    with joblib.parallel_config(backend=backend, n_jobs=2):
        results = joblib.Parallel()(joblib.delayed(square)(i) for i in range(20_000))
    assert results == [i * i for i in range(20_000)]
    assert sum(submitted) == 20_000
    assert len(submitted) < 20_000 and max(submitted) > 1


def test_a_failing_call_raises_its_own_exception(client):
    with joblib.parallel_config(backend="scaler", client=client, n_jobs=2):
        with pytest.raises(KeyError, match="five"):
            joblib.Parallel()(joblib.delayed(fail_on_five)(i) for i in range(10))
        # the client and the backend stay usable
        assert joblib.Parallel()(joblib.delayed(square)(i) for i in range(3)) == [0, 1, 4]
    assert client.submit(square, 4).result(timeout=60) == 16


def test_return_as_generator(client):
    with joblib.parallel_config(backend="scaler", client=client, n_jobs=2):
        generator = joblib.Parallel(return_as="generator")(joblib.delayed(square)(i) for i in range(50))
        assert list(generator) == [i * i for i in range(50)]


def test_a_parallel_timeout_raises_timeout_error(client):
    with joblib.parallel_config(backend="scaler", client=client, n_jobs=2):
        with pytest.raises(multiprocessing.TimeoutError):  # what joblib raises on a timeout, whatever the backend
            joblib.Parallel(timeout=0.5)(joblib.delayed(time.sleep)(10) for _ in range(2))
        # the cancelled batches free the workers at once: a new call runs
        assert joblib.Parallel(timeout=30)(joblib.delayed(square)(i) for i in range(3)) == [0, 1, 4]


def test_cross_val_score_runs_on_the_workers(client):
    X, y = load_iris(return_X_y=True)
    with joblib.parallel_config(backend="scaler", client=client):
        where = cross_val_score(SVC(), X, y, cv=5, n_jobs=-1, scoring=process_id)
        remote = cross_val_score(SVC(), X, y, cv=5, n_jobs=-1)
    assert os.getpid() not in set(where)  # scored in the workers' processes, not here
    np.testing.assert_allclose(remote, cross_val_score(SVC(), X, y, cv=5, n_jobs=1))


def test_grid_search_matches_a_local_run(client):
    X, y = load_iris(return_X_y=True)
    grid = {"C": [0.1, 1, 10], "kernel": ["linear", "rbf"]}
    local = GridSearchCV(SVC(), grid, cv=3, n_jobs=1).fit(X, y)
    with joblib.parallel_config(backend="scaler", client=client, n_jobs=4):
        remote = GridSearchCV(SVC(), grid, cv=3, n_jobs=-1).fit(X, y)
    assert remote.best_params_ == local.best_params_
    np.testing.assert_allclose(remote.cv_results_["mean_test_score"], local.cv_results_["mean_test_score"])


def test_nested_parallelism_runs_inside_the_task(client):
    """A forest with n_jobs inside a grid search: the inner Parallel runs sequentially on the worker."""
    X, y = load_iris(return_X_y=True)
    forest = RandomForestClassifier(n_estimators=8, random_state=0, n_jobs=2)
    with joblib.parallel_config(backend="scaler", client=client, n_jobs=2):
        search = GridSearchCV(forest, {"max_depth": [2, 4]}, cv=3, n_jobs=-1).fit(X, y)
    assert search.best_score_ > 0.8


def test_address_and_environment_variable(cluster, monkeypatch):
    with joblib.parallel_config(backend="scaler", address=cluster.get_address(), n_jobs=2):
        assert joblib.Parallel()(joblib.delayed(square)(i) for i in range(5)) == [0, 1, 4, 9, 16]
    monkeypatch.setenv("SCALER_SCHEDULER_ADDRESS", cluster.get_address())
    with joblib.parallel_config(backend="scaler", n_jobs=2):
        assert joblib.Parallel()(joblib.delayed(square)(i) for i in range(3)) == [0, 1, 4]


def test_a_backend_without_a_cluster_says_what_it_needs(monkeypatch):
    monkeypatch.delenv("SCALER_SCHEDULER_ADDRESS", raising=False)
    monkeypatch.setattr("scaler.client.current_client.current", lambda: None)  # no Client made in this process
    with joblib.parallel_config(backend="scaler", n_jobs=2):
        with pytest.raises(ValueError, match="needs a cluster"):
            joblib.Parallel()(joblib.delayed(square)(i) for i in range(3))
    with pytest.raises(ValueError, match="not both"):
        ScalerBackend(client=object(), address="tcp://127.0.0.1:1")  # type: ignore[arg-type]


def test_n_jobs_counts(client):
    backend = ScalerBackend(client=client, cluster_size=8)
    assert backend.effective_n_jobs(3) == 3
    assert backend.effective_n_jobs(-1) == 8
    assert backend.effective_n_jobs(-2) == 7
    with pytest.raises(ValueError):
        backend.effective_n_jobs(0)
