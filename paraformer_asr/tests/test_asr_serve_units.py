"""The service's settings validation and the dynamic micro-batcher (with a stand-in transcriber)."""

import math
import threading
from concurrent.futures import Future

import pytest
import torch

from paraformer_asr.errors import ConfigError
from paraformer_asr.serving.batcher import BatcherClosed, MicroBatcher
from paraformer_asr.serving.settings import ServeSettings

RESULT_TIMEOUT_S = 30  # only guards against a hung worker; never reached when the batcher works


class GatedTranscriber:
    """Answers 'len=<T>' per utterance and records batch sizes; the first call blocks until ``gate`` is set,
    so that a test can queue requests while the worker is busy."""

    def __init__(self, fail_first: bool = False):
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.batch_sizes: list[int] = []
        self.fail_first = fail_first

    def __call__(self, features):
        if not self.batch_sizes:
            self.entered.set()
            self.gate.wait(RESULT_TIMEOUT_S)
        self.batch_sizes.append(len(features))
        if self.fail_first and len(self.batch_sizes) == 1:
            raise RuntimeError("decoder exploded")
        return [f"len={f.shape[0]}" for f in features]


def features(num_frames: int) -> torch.Tensor:
    return torch.zeros(num_frames, 4)


def started(transcriber, max_batch_size: int, max_wait_ms: float) -> MicroBatcher:
    batcher = MicroBatcher(transcriber, max_batch_size, max_wait_ms)
    batcher.start()
    return batcher


def test_default_settings_are_valid():
    settings = ServeSettings()
    assert settings.max_batch_size >= 1 and settings.max_wait_ms >= 0 and settings.max_upload_bytes >= 1
    assert settings.to_dict()["max_audio_seconds"] == settings.max_audio_seconds


@pytest.mark.parametrize("name, value", [
    ("max_upload_bytes", 0), ("max_upload_bytes", -5), ("max_upload_bytes", 1.5), ("max_upload_bytes", True),
    ("max_batch_size", 0), ("max_batch_size", "8"), ("max_audio_seconds", 0), ("max_audio_seconds", -1.0),
    ("max_audio_seconds", math.nan), ("max_audio_seconds", math.inf), ("max_wait_ms", -1), ("max_wait_ms", math.nan),
])
def test_bad_settings_name_the_setting(name, value):
    with pytest.raises(ConfigError, match=f"serve setting '{name}' must be"):
        ServeSettings(**{name: value})


def test_queued_requests_are_batched_up_to_the_limit_and_get_their_own_answers():
    transcriber = GatedTranscriber()
    batcher = started(transcriber, max_batch_size=8, max_wait_ms=0)
    try:
        first = batcher.submit(features(3))
        assert transcriber.entered.wait(RESULT_TIMEOUT_S)  # the worker is busy with the first request
        rest = [batcher.submit(features(10 + i)) for i in range(19)]
        transcriber.gate.set()
        assert first.result(RESULT_TIMEOUT_S) == "len=3"
        assert [f.result(RESULT_TIMEOUT_S) for f in rest] == [f"len={10 + i}" for i in range(19)]
    finally:
        batcher.close()
    assert transcriber.batch_sizes == [1, 8, 8, 3]
    stats = batcher.stats()
    assert stats["batches"] == 4 and stats["requests"] == 20 and stats["max_batch_size_seen"] == 8
    assert stats["batch_size_counts"] == {"1": 1, "3": 1, "8": 2}
    assert stats["mean_batch_size"] == pytest.approx(5.0)


def test_a_full_batch_is_decoded_without_waiting_for_the_deadline():
    transcriber = GatedTranscriber()
    transcriber.gate.set()
    batcher = started(transcriber, max_batch_size=4, max_wait_ms=600_000)  # the deadline is never reached here
    try:
        futures = [batcher.submit(features(5 + i)) for i in range(4)]
        assert [f.result(RESULT_TIMEOUT_S) for f in futures] == ["len=5", "len=6", "len=7", "len=8"]
    finally:
        batcher.close()


def test_close_finishes_queued_requests_then_refuses_new_ones():
    transcriber = GatedTranscriber()
    batcher = started(transcriber, max_batch_size=2, max_wait_ms=0)
    first = batcher.submit(features(1))
    assert transcriber.entered.wait(RESULT_TIMEOUT_S)
    queued = [batcher.submit(features(2 + i)) for i in range(3)]
    closer = threading.Thread(target=batcher.close)
    closer.start()
    transcriber.gate.set()
    closer.join(RESULT_TIMEOUT_S)
    assert not closer.is_alive()
    assert [f.result(0) for f in [first] + queued] == ["len=1", "len=2", "len=3", "len=4"]
    assert transcriber.batch_sizes == [1, 2, 1]
    with pytest.raises(BatcherClosed):
        batcher.submit(features(1))
    batcher.close()  # a second close is harmless


def test_submit_before_start_is_refused():
    with pytest.raises(BatcherClosed):
        MicroBatcher(GatedTranscriber(), 2, 1.0).submit(features(1))


def test_a_failing_batch_fails_its_requests_and_the_worker_keeps_serving():
    transcriber = GatedTranscriber(fail_first=True)
    batcher = started(transcriber, max_batch_size=4, max_wait_ms=0)
    try:
        doomed = batcher.submit(features(1))
        assert transcriber.entered.wait(RESULT_TIMEOUT_S)
        transcriber.gate.set()
        with pytest.raises(RuntimeError, match="decoder exploded"):
            doomed.result(RESULT_TIMEOUT_S)
        assert batcher.submit(features(7)).result(RESULT_TIMEOUT_S) == "len=7"
    finally:
        batcher.close()
    assert batcher.stats()["requests"] == 1  # only decoded requests are counted


def test_cancelled_requests_are_skipped():
    transcriber = GatedTranscriber()
    batcher = started(transcriber, max_batch_size=4, max_wait_ms=0)
    try:
        first = batcher.submit(features(1))
        assert transcriber.entered.wait(RESULT_TIMEOUT_S)
        cancelled: Future = batcher.submit(features(2))
        kept = batcher.submit(features(3))
        assert cancelled.cancel()
        transcriber.gate.set()
        assert first.result(RESULT_TIMEOUT_S) == "len=1" and kept.result(RESULT_TIMEOUT_S) == "len=3"
    finally:
        batcher.close()
    assert transcriber.batch_sizes == [1, 1]


def test_invalid_batcher_arguments_are_programming_errors():
    with pytest.raises(ValueError):
        MicroBatcher(GatedTranscriber(), 0, 1.0)
    with pytest.raises(ValueError):
        MicroBatcher(GatedTranscriber(), 1, -1.0)
