"""The progress bar module alone, over plain futures (no cluster), with and without tqdm."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from scaler.client import progress_bar as progress_module
from scaler.client.progress_bar import ProgressBar, progress, start_progress


def _futures(count):
    return [concurrent.futures.Future() for _ in range(count)]


def test_off_means_no_bar():
    assert start_progress(False, "map") is None
    assert start_progress(None, "map") is None


def test_without_tqdm_true_falls_back_to_the_text_line_and_tqdm_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "_tqdm_class", lambda: None)
    futures = _futures(3)
    with ProgressBar(True, "work") as bar:
        bar.watch(futures)
        for index, future in enumerate(futures):
            future.set_result(index)
    assert capsys.readouterr().err.split("\r")[-1].startswith("work: 3/3 tasks (100%)")
    with pytest.raises(ImportError, match="pip install tqdm"):
        ProgressBar("tqdm", "work")


def test_futures_ending_in_other_threads_are_all_counted(capsys):
    futures = _futures(2000)
    bar = ProgressBar("text", "threads")
    bar.watch(futures[:1000])
    for future in futures[:10]:
        future.set_result(None)  # ended before the rest are watched
    threads = [
        threading.Thread(target=lambda part: [f.set_result(None) for f in part], args=(futures[10 + i :: 4],))
        for i in range(4)
    ]
    for thread in threads:
        thread.start()
    bar.watch(futures[1000:])
    for thread in threads:
        thread.join()
    bar.close()
    assert capsys.readouterr().err.split("\r")[-1].startswith("threads: 2,000/2,000 tasks (100%)")


def test_progress_returns_the_futures_once_they_ended(capsys):
    futures = _futures(5)
    threading.Timer(0.2, lambda: [f.set_result(1) for f in futures]).start()
    assert progress(iter(futures), style="text", timeout=30) == futures
    pending = _futures(2)
    pending[0].set_result(1)
    with pytest.raises(TimeoutError, match="1 of 2"):
        progress(pending, style="text", timeout=0.05)


def test_bad_options():
    for option in ("fancy", 2, 0.5):
        with pytest.raises(ValueError, match="progress must be"):
            ProgressBar(option, "x")  # type: ignore[arg-type]


def test_a_bar_that_watched_nothing_draws_nothing(capsys):
    ProgressBar("text", "empty").close()
    assert capsys.readouterr().err == ""
