"""tasks.tune_channel: a validation reported from a task on a real Dask worker, the verdict answered
by the driver's side through the scheduler's queues; a driver that never answers; a late verdict."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster

from tasks import tune_channel
from tasks.tune_channel import TrialChannel, answer_reports, channel_listener, close_channel


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """A cluster of one worker thread in this process, on Dask's in-process transport (the queues are the
    scheduler's either way); its HTTP server on a free loopback port, no dashboard."""
    cluster = LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        dashboard_address=None,
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
    )
    with cluster, Client(cluster, set_as_default=False) as connected:
        yield connected


def report(channel: TrialChannel, index: int, epoch: int, value: float) -> str | None:
    """What a run's listener on a worker returns for one validation (runs as a Dask task)."""
    return channel_listener(channel)(index, epoch, value)


def test_each_report_gets_the_drivers_verdict(client: Client) -> None:
    channel = TrialChannel.new("study", 3)
    heard: list[tuple[int, int, float]] = []

    def pruner(index: int, epoch: int, value: float) -> str | None:
        heard.append((index, epoch, value))
        return "pruned by study s (validation 2, epoch 4)" if index == 2 else None

    for index, expected in ((1, None), (2, "pruned by study s (validation 2, epoch 4)")):
        future = client.submit(report, channel, index, 2 * index, 0.25 * index, pure=False)
        answered = 0
        while not answered:  # the driver's loop: answer what is waiting (the report may not be there yet)
            answered = answer_reports(client, channel, pruner)
        assert answered == 1 and future.result(timeout=30) == expected
    assert heard == [(1, 2, 0.25), (2, 4, 0.5)]
    assert answer_reports(client, channel, pruner) == 0  # nothing left waiting
    close_channel(client, channel)


def test_a_driver_that_never_answers_lets_the_trial_go_on(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune_channel, "VERDICT_WAIT_SECONDS", 0.5)  # in this process: the worker thread's too
    channel = TrialChannel.new("study", 4)
    assert client.submit(report, channel, 1, 1, 0.5, pure=False).result(timeout=30) is None
    close_channel(client, channel)


def test_a_late_verdict_does_not_decide_the_next_validation(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune_channel, "VERDICT_WAIT_SECONDS", 0.5)
    channel = TrialChannel.new("study", 5)
    assert client.submit(report, channel, 1, 5, 0.5, pure=False).result(timeout=30) is None  # wait ran out
    # The driver answers validation 1 late ("pruned"), then validation 2 ("go on"): the run hears the latter.
    assert answer_reports(client, channel, lambda index, epoch, value: "pruned late") == 1
    monkeypatch.setattr(tune_channel, "VERDICT_WAIT_SECONDS", 30.0)
    future = client.submit(report, channel, 2, 10, 0.6, pure=False)
    answered = 0
    while not answered:
        answered = answer_reports(client, channel, lambda index, epoch, value: None)
    assert future.result(timeout=30) is None
    close_channel(client, channel)
