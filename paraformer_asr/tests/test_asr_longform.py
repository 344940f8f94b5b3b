"""Long-form decoding: window planning, windowed reading, pause segmentation, stitching (CIF times and text), the
long-recording tool, eval.py and infer.py on long files, and the options' errors."""

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

import paraformer_asr.decode.longform as longform
import paraformer_asr.decode.longform.reader as window_reader
import paraformer_asr.decode.longform.transcribe as long_transcribe
from paraformer_asr.cli import run_main
from paraformer_asr.config import config_from_dict
from paraformer_asr.data.audio import load_audio, open_audio, write_audio
from paraformer_asr.data.manifest import read_manifest
from paraformer_asr.data.tokenizer import CharTokenizer, build_tokenizer
from paraformer_asr.decode.longform import LongFormOptions, transcribe_long
from paraformer_asr.decode.longform.pauses import joined_window, judge_pauses
from paraformer_asr.decode.longform.plan import Window, plan_recording, plan_windows, stitched_windows
from paraformer_asr.decode.longform.reader import WindowReader
from paraformer_asr.decode.longform.stitch import (TimedUnit, append_in_order, stitch_by_text, stitch_by_times,
                                                   text_overlap_cut, window_units)
from paraformer_asr.decode.longform.transcribe import has_word_separators, padded_batches
from paraformer_asr.decode.longform.vad import energy_profile, local_noise_floor, speech_runs
from paraformer_asr.errors import ConfigError
from paraformer_asr.factory import build_model
from paraformer_asr.inference import LoadedModel
from paraformer_asr_tools.corpus.long_recording import join_utterances, noise_floor

from asr_helpers import PROJECT, load_script, speech_like
from asr_reference import loop_speech_runs

RATE = 16000
HOP = 160


# ---------------------------------------------------------------- window planning


@pytest.mark.parametrize("num_samples", [1, 999, 1000, 1001, 5432, 10_000, 123_457])
@pytest.mark.parametrize("window, overlap, align", [(1000, 200, 160), (1000, 0, 1), (1600, 400, 160), (2000, 999, 7)])
def test_windows_cover_the_recording_overlap_and_end_at_its_end(num_samples, window, overlap, align):
    spans = plan_windows(num_samples, window, overlap, align)
    assert spans[0][0] == 0 and spans[-1][1] == num_samples
    assert all(end - start <= window for start, end in spans)
    assert all(start % align == 0 for start, _ in spans)
    for (start, end), (next_start, next_end) in zip(spans, spans[1:]):
        assert start < next_start and end < next_end  # strictly moving forward
        assert end - next_start >= overlap  # overlap at least as asked (the last pair may overlap more)
    if num_samples > window:
        assert all(end - start == window for start, end in spans[:-1])  # full windows but the last
        assert spans[-1][1] - spans[-1][0] > window - align  # the last one is (nearly) full too
    else:
        assert spans == [(0, num_samples)]


def test_impossible_window_plans_are_programming_errors():
    with pytest.raises(ValueError):
        plan_windows(100, 50, 50, 1)  # overlap as long as the window
    with pytest.raises(ValueError):
        plan_windows(0, 50, 10, 1)


def test_cuts_lie_in_the_middle_half_of_each_overlap_and_keep_ranges_meet():
    spans = plan_windows(1000 * HOP, 300 * HOP, 100 * HOP, HOP)  # first overlap: frames 200..300
    profile = torch.zeros(1000)
    profile[200:300] = 40.0
    profile[258:275] = 0.0  # a 170 ms pause inside the overlap's middle half (frames 225..275)
    for cut in ("middle", "quiet"):
        planned = stitched_windows(spans, cut, profile, HOP, RATE)
        assert planned[0][2] == -math.inf and planned[-1][3] == math.inf
        for (start, end, low, high), (next_start, next_end, next_low, _) in zip(planned, planned[1:]):
            assert high == next_low
            quarter_ms = (end - next_start) * 1000 / RATE / 4
            assert next_start * 1000 / RATE + quarter_ms <= high <= end * 1000 / RATE - quarter_ms
        if cut == "middle":
            assert planned[0][3] == (spans[1][0] + spans[0][1]) / 2 * 1000 / RATE
    quiet = stitched_windows(spans, "quiet", profile, HOP, RATE)
    assert 2580 + 50 <= quiet[0][3] <= 2750 - 50  # inside the pause, 100 ms of quiet around it


# ---------------------------------------------------------------- pause segmentation


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("min_pause, min_speech", [(0, 1), (3, 1), (8, 5)])
def test_speech_runs_equal_the_frame_by_frame_reference(seed, min_pause, min_speech):
    generator = torch.Generator().manual_seed(seed)
    profile = -60 + 5 * torch.randn(700, generator=generator)
    loud = torch.rand(700, generator=generator) < 0.3
    profile = torch.where(loud, profile + 40, profile)
    profile[100:180] = -120.0  # digital silence: not part of the floor
    profile[300:600] = -120.0  # longer than the reach on both sides but for one frame
    profile[450] = -30.0
    profile[620:] += 20.0  # the floor steps up
    expected = loop_speech_runs(profile.tolist(), 15.0, 100, min_pause, min_speech)
    assert speech_runs(profile, 15.0, 100, min_pause, min_speech) == expected


def test_speech_runs_split_at_pauses_and_drop_clicks():
    profile = torch.full((400,), -60.0)
    profile[50:100] = -10.0  # speech
    profile[110:150] = -10.0  # after a 10-frame (100 ms) pause: same segment
    profile[200:240] = -10.0  # after 50 frames: a new segment
    profile[330:332] = -10.0  # a 20 ms click, alone
    assert speech_runs(profile, 15.0, 200, 30, 5) == [(50, 150), (200, 240)]


def test_a_pause_filled_with_the_next_utterances_louder_noise_is_not_speech():
    profile = torch.full((900,), -55.0)  # a quiet utterance, then a pause and an utterance 20 dB noisier
    profile[50:250] = -10.0
    profile[300:] = -35.0
    profile[380:550] = -10.0
    floor = local_noise_floor(profile, 200)
    assert torch.allclose(floor[301:379], torch.tensor(-35.0, dtype=floor.dtype))  # the pause's own noise
    assert speech_runs(profile, 12.0, 200, 30, 5) == [(50, 250), (380, 550)]  # the windows start at the speech


def test_pause_plan_gives_each_speech_segment_its_margins_without_overlap():
    profile = torch.full((1000,), -60.0)  # 10 s at 10 ms frames
    profile[100:200] = -10.0
    profile[230:300] = -10.0  # 300 ms after the first: a separate segment at min_pause 300 ms
    profile[500:900] = -10.0  # 4 s of speech: longer than the 2 s chunks, cut into overlapping windows
    profile[510:900:50] = -60.0  # its closures: within the floor's reach of every frame, as in recorded speech
    options = LongFormOptions(chunk_seconds=2.0, overlap_seconds=0.5, min_pause_ms=300, margin_ms=(100, 150))
    windows = plan_recording(1000 * HOP, options, HOP, HOP, RATE, profile)
    first, second = windows[0], windows[1]
    assert (first.start, first.end) == (90 * HOP, 215 * HOP)  # 100 ms before; 150 ms after, cut at the pause middle
    assert (second.start, second.end) == (220 * HOP, 315 * HOP)  # its own margin fits in the pause
    assert first.keep_end_ms == second.keep_start_ms == 2150.0
    long_run = windows[2:]
    assert len(long_run) >= 3 and long_run[0].start == 490 * HOP and long_run[-1].end == 915 * HOP
    for window, following in zip(long_run, long_run[1:]):
        assert window.end > following.start and window.keep_end_ms == following.keep_start_ms
    assert all(w.end - w.start <= 2 * RATE for w in windows)


def test_digital_silence_neither_sets_the_floor_nor_enters_a_window():
    profile = torch.full((600,), -120.0)  # digital silence between two utterances with a noise floor of -50 dB
    profile[100:250] = -50.0
    profile[120:200] = -10.0
    profile[350:500] = -50.0
    profile[370:470] = -10.0
    assert speech_runs(profile, 15.0, 200, 30, 5) == [(120, 200), (370, 470)]  # the noisy edges are not speech
    options = LongFormOptions(margin_ms=(300, 300))  # margins reaching past each utterance into the zeros
    windows = plan_recording(600 * HOP, options, HOP, HOP, RATE, profile)
    assert [(w.start // HOP, w.end // HOP) for w in windows] == [(100, 230), (350, 500)]
    assert windows[0].keep_end_ms == windows[1].keep_start_ms == 2850.0  # keep ranges still meet mid-pause


def test_a_recording_without_speech_gets_no_window():
    assert plan_recording(500 * HOP, LongFormOptions(), HOP, HOP, RATE, torch.full((500,), -60.0)) == []


# ---------------------------------------------------------------- windowed reading


def _tone(seconds: float, rate: int, channels: int = 1) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    mono = 0.3 * np.sin(2 * np.pi * 440 * t) * (1 + np.sin(2 * np.pi * 0.7 * t)) / 2
    return np.stack([mono, 0.5 * mono]) if channels == 2 else mono[None]


@pytest.mark.parametrize("rate, channels", [(16000, 1), (44100, 2), (22050, 1), (8000, 1)])
def test_windows_read_alone_equal_the_whole_recording_resampled(tmp_path, rate, channels):
    path = tmp_path / "x.wav"
    soundfile.write(str(path), _tone(3.3, rate, channels).T, rate, subtype="FLOAT")
    whole = load_audio(path, RATE)  # [N]
    with open_audio(path) as handle:
        reader = WindowReader(handle, str(path), RATE)
        assert reader.num_samples == whole.numel()
        align = math.lcm(HOP, reader.up)
        for start, end in plan_windows(reader.num_samples, RATE, RATE // 4, align):
            assert torch.allclose(reader.read(start, end), whole[start:end], atol=1e-5)
        segment = WindowReader(handle, str(path), RATE, first_frame=rate, num_frames=rate)  # [1 s, 2 s)
        expected = load_audio(path, RATE, start_s=1.0, end_s=2.0)
        assert torch.allclose(segment.read(0, segment.num_samples), expected, atol=1e-5)


def test_a_long_file_is_only_ever_read_window_by_window(tmp_path, monkeypatch):
    """The profile pass and the decoding pass read bounded windows; nothing reads the whole file."""
    seconds = 12.0
    path = tmp_path / "long.wav"
    write_audio(path, torch.from_numpy(_tone(seconds, RATE)[0]).float(), RATE)
    reads = []
    real_read_frames = window_reader.read_frames

    def recording_read_frames(handle, name, start_frame=0, num_frames=-1):
        reads.append((start_frame, num_frames))
        return real_read_frames(handle, name, start_frame, num_frames)

    monkeypatch.setattr(window_reader, "read_frames", recording_read_frames)
    monkeypatch.setattr(long_transcribe, "PROFILE_BLOCK_SECONDS", 2.0)
    monkeypatch.setattr("paraformer_asr.data.audio.read_audio", None)  # the whole-file reader must not be used
    loaded = random_loaded_model()
    options = LongFormOptions(segment="windows", chunk_seconds=2.0, overlap_seconds=0.5, batch_windows=2)
    result = transcribe_long(loaded, path, torch.device("cpu"), options)
    assert result.num_windows >= 7 and result.duration_s == pytest.approx(seconds)
    assert len(reads) >= 6 + result.num_windows
    assert all(0 < count <= 2 * RATE for _, count in reads), reads
    covered = torch.zeros(round(seconds * RATE), dtype=torch.bool)
    for start, count in reads:
        covered[start:start + count] = True
    assert bool(covered.all())


def test_energy_profile_equals_the_whole_recording_profile(tmp_path):
    path = tmp_path / "x.wav"
    soundfile.write(str(path), _tone(2.345, 44100).T, 44100, subtype="FLOAT")
    whole = load_audio(path, RATE).double()
    power = torch.stack([whole[i:i + HOP].square().mean() for i in range(0, whole.numel(), HOP)])
    expected = (10 * torch.log10(power + 1e-12)).float()
    with open_audio(path) as handle:
        profile = energy_profile(WindowReader(handle, str(path), RATE), HOP, 3000)
    assert torch.allclose(profile, expected, atol=1e-3)


# ---------------------------------------------------------------- stitching


def unit(text, start_ms, end_ms):
    return TimedUnit(text, float(start_ms), float(end_ms), ((text, float(start_ms), float(end_ms)),))


def stitch(windows, units_per_window):
    """What transcribe_long does with the windows' decoded units."""
    stitched, previous = [], []
    for window, units in zip(windows, units_per_window):
        stitched, previous = stitch_by_times(stitched, previous, units, window), units
    return stitched


def test_a_word_spanning_a_window_boundary_is_kept_once():
    """Windows [0, 10 s) and [6 s, 16 s), cut at 8 s. 'edge' spans the second window's start (6 s): the second
    window hears only its end, the first all of it. 'cross' spans the cut. 'late' spans the first window's end."""
    spans = [(0, 10 * RATE), (6 * RATE, 16 * RATE)]
    windows = [Window(i, *entry) for i, entry in enumerate(stitched_windows(spans, "middle", None, HOP,
                                                                                      RATE))]
    assert windows[0].keep_end_ms == 8000.0
    first = [unit("a", 1000, 1400), unit("edge", 5800, 6300), unit("cross", 7800, 8300),
             unit("late", 9700, 10000)]  # 'late' cut by the window's end: its centre is past the cut
    second = [unit("dge", 6000, 6300), unit("cross", 7790, 8290), unit("late", 9700, 10400), unit("z", 12000, 12300)]
    words = [u.text for u in stitch(windows, [first, second])]
    assert words == ["a", "edge", "cross", "late", "z"]


@pytest.mark.parametrize("seed", range(20))
def test_words_in_overlaps_are_neither_doubled_nor_dropped_when_estimates_jitter(seed):
    """Random words on a 60 s timeline, fixed windows with overlap; each window sees the words inside it (a word
    cut by an edge is clipped) with +-40 ms jitter: the stitched sequence is exactly the true one."""
    rng = random.Random(seed)
    true_words, time_ms = [], 0.0
    while time_ms < 58_000:
        start = time_ms + rng.uniform(80, 400)
        end = start + rng.uniform(150, 700)
        true_words.append((f"w{len(true_words)}", start, end))
        time_ms = end
    spans = plan_windows(60 * RATE, 10 * RATE, 3 * RATE, HOP)
    windows = [Window(i, *entry) for i, entry in enumerate(stitched_windows(spans, "middle", None, HOP,
                                                                                      RATE))]
    seen = []
    for window in windows:
        low, high = window.start * 1000 / RATE, window.end * 1000 / RATE
        units = []
        for text, start, end in true_words:
            if end <= low or start >= high:
                continue
            units.append(unit(text, max(low, start + rng.uniform(-40, 40)), min(high, end + rng.uniform(-40, 40))))
        seen.append(units)
    stitched = stitch(windows, seen)
    assert [u.text for u in stitched] == [text for text, _, _ in true_words]
    times = [t for u in stitched for t in (u.start_ms, u.end_ms)]
    assert times == sorted(times)


def test_a_unit_whose_two_estimates_straddle_the_cut_is_kept_once():
    windows = [Window(0, 0, 10 * RATE, -math.inf, 8000.0), Window(1, 6 * RATE, 16 * RATE, 8000.0)]
    # kept by both: centres 7990 (first window) and 8010 (second); the mean is past the cut: the second's
    twice = stitch(windows, [[unit("a", 7000, 7500), unit("x", 7800, 8180)], [unit("x", 7820, 8200)]])
    assert [(u.text, u.start_ms) for u in twice] == [("a", 7000), ("x", 7820)]
    # kept by neither: centres 8010 (first) and 7995 (second); the mean is past the cut: the second's
    neither = stitch(windows, [[unit("x", 7810, 8210)], [unit("x", 7790, 8200), unit("b", 9000, 9300)]])
    assert [(u.text, u.start_ms) for u in neither] == [("x", 7790), ("b", 9000)]
    # neighbours that only touch are two units
    touching = stitch(windows, [[unit("a", 7500, 7990)], [unit("b", 8000, 8400)]])
    assert [u.text for u in touching] == ["a", "b"]


def test_junction_times_are_made_ordered():
    stitched = append_in_order([unit("a", 0, 1000)], [unit("b", 900, 1500), unit("c", 1600, 1700)])
    assert [(u.start_ms, u.end_ms) for u in stitched] == [(0, 950), (950, 1500), (1600, 1700)]
    assert stitched[0].tokens[0][2] == 950 and stitched[1].tokens[0][1] == 950


def test_word_units_own_the_separators_before_them_and_tokens_without_separators_stand_alone():
    pieces = ["a", "b", " ", "c", " ", " ", "d"]
    times = [(i * 100.0, i * 100.0 + 100) for i in range(len(pieces))]
    units = window_units(pieces, times, 5000.0, by_words=True)
    assert [(u.text, u.start_ms, u.end_ms) for u in units] == [("ab", 5000, 5200), ("c", 5300, 5400),
                                                               ("d", 5600, 5700)]
    assert [p for p, _, _ in units[2].tokens] == [" ", " ", "d"]
    tokens = window_units(["4", "0", "7"], times[:3], 0.0, by_words=False)
    assert [u.text for u in tokens] == ["4", "0", "7"]
    assert [u.text for u in window_units(["x", " ", "y"], None, 0.0, by_words=True)] == ["x", "y"]


def test_word_separators_are_found_in_every_kind_of_vocabulary():
    assert has_word_separators(CharTokenizer.build(["four zero seven"]))
    assert not has_word_separators(CharTokenizer.build(["407", "12"]))
    assert has_word_separators(build_tokenizer("bpe", ["four zero seven", "one two"] * 20, 40))


def test_text_stitching_finds_the_overlap_by_alignment():
    previous = "a b c d e f g".split()
    current = "e f g h i".split()
    keep, resume = text_overlap_cut(previous, current, 4, 4)
    assert previous[:keep] + current[resume:] == "a b c d e f g h i".split()
    keep, resume = text_overlap_cut("a b c d".split(), "x y z w".split(), 2, 2)  # nothing matches: halves
    assert (keep, resume) == (3, 1)


def test_text_stitching_appends_windows_that_do_not_overlap_and_merges_those_that_do():
    windows = [Window(0, 0, 10 * RATE), Window(1, 10 * RATE, 20 * RATE),
               Window(2, 16 * RATE, 26 * RATE)]
    texts = ["a b c d e".split(), "f g h i j k l".split(), "j k l m n o".split()]
    stitched, count = [], 0
    for index, (window, words) in enumerate(zip(windows, texts)):
        units = [TimedUnit(w, None, None) for w in words]
        stitched, count = stitch_by_text(stitched, count, windows[index - 1] if index else None, units, window)
    assert [u.text for u in stitched] == "a b c d e f g h i j k l m n o".split()


# ---------------------------------------------------------------- options and errors


@pytest.mark.parametrize("field, value, flag", [
    ("chunk_seconds", 0.5, "--chunk-seconds"), ("chunk_seconds", math.nan, "--chunk-seconds"),
    ("overlap_seconds", 11.0, "--chunk-overlap"), ("overlap_seconds", -1.0, "--chunk-overlap"),
    ("cut", "edge", "--chunk-cut"), ("segment", "vad", "--segment"), ("batch_windows", 0, "--chunk-batch"),
    ("speech_threshold_db", 0.0, "--speech-threshold-db"), ("min_pause_ms", -5.0, "--min-pause-ms"),
    ("judged_pauses_ms", (500.0, 200.0), "--judged-pauses-ms"),
    ("judged_pauses_ms", (-1.0, 200.0), "--judged-pauses-ms"),
    ("judged_pauses_ms", (200.0, math.inf), "--judged-pauses-ms"),
    ("judged_pauses_ms", (200.0,), "--judged-pauses-ms"),
])
def test_bad_long_form_options_name_the_option(field, value, flag):
    with pytest.raises(ConfigError, match=flag):
        LongFormOptions(**{field: value})


def test_infer_rejects_bad_long_form_options_with_exit_2(capsys):
    infer = load_script("infer")
    assert run_main(infer.main, ["--checkpoint", "x.pt", "a.wav", "--chunk-overlap", "30"]) == 2
    assert "--chunk-overlap must be between 0 and half of --chunk-seconds" in capsys.readouterr().err


# ---------------------------------------------------------------- the long-recording tool


def test_joined_recording_has_the_offsets_words_and_noise_filled_pauses(tmp_path):
    lines = []
    for index, text in enumerate(["one two", "three"]):
        samples = 0.01 * torch.randn(RATE, generator=torch.Generator().manual_seed(index))  # noise floor
        samples[4000:8000] += 0.3 * torch.sin(torch.arange(4000) * 0.1)
        write_audio(tmp_path / f"u{index}.wav", samples, RATE)
        words = [{"word": w, "start_ms": 250.0 + 300 * k, "end_ms": 400.0 + 300 * k} for k, w in enumerate(text.split())]
        lines.append(json.dumps({"audio": f"u{index}.wav", "text": text, "words": words}))
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    entries = read_manifest(tmp_path / "m.jsonl")
    summary = join_utterances(entries, tmp_path / "out" / "long.wav", RATE, (0.5, 0.5), seed=3, target_seconds=4.5)
    assert summary["utterances"] == 3 and summary["passes"] == 1.5 and summary["words"] == 5
    line = read_manifest(summary["manifest"])[0]  # a valid manifest line, words checked against the text
    assert line.text == "one two three one two"
    offsets = [u["start_ms"] for u in json.loads(open(summary["manifest"]).read())["utterances"]]
    assert offsets == pytest.approx([500.0, 2000.0, 3500.0])
    assert [w["start_ms"] for w in line.words] == pytest.approx([750.0, 1050.0, 2250.0, 3750.0, 4050.0])
    audio = load_audio(tmp_path / "out" / "long.wav", RATE)
    assert audio.numel() == round(summary["duration_s"] * RATE) == 3 * RATE + 4 * RATE // 2
    pause = audio[:RATE // 2].numpy().astype(np.float64)
    floor = noise_floor(load_audio(tmp_path / "u0.wav", RATE).numpy().astype(np.float64), RATE)
    assert 0.5 * floor < float(np.sqrt(np.mean(pause ** 2))) < 2.0 * floor  # noise at the floor, not silence


def _utterance(index: int, edge_s: float = 0.15) -> torch.Tensor:
    """A tiny test utterance [N]: a noise floor (RMS 0.003) with ``edge_s`` of it on either side of a 0.3-0.5 s
    gliding tone, every part a whole number of 10 ms frames."""
    generator = torch.Generator().manual_seed(100 + index)
    edge = round(edge_s * RATE)
    t = torch.arange((3 + index) * RATE // 10) / RATE
    speech = 0.3 * torch.sin(2 * math.pi * (300 + 100 * index + 400 * t) * t)
    samples = torch.cat([torch.zeros(edge), speech, torch.zeros(edge)])
    return samples + 0.003 * torch.randn(samples.numel(), generator=generator)


def _three_utterances(folder: Path) -> Path:
    """Three :func:`_utterance` files and their manifest in ``folder`` -> the manifest's path."""
    lines = []
    for index in range(3):
        write_audio(folder / f"u{index}.wav", _utterance(index), RATE)
        lines.append(json.dumps({"audio": f"u{index}.wav", "text": str(index)}))
    (folder / "m.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "m.jsonl"


def _joined(manifest: Path, out: Path, pauses_s: tuple[float, float], seed: int, **options) -> list[dict]:
    """join_utterances of the manifest's utterances into ``out`` -> where it placed each of them."""
    summary = join_utterances(read_manifest(manifest), out, RATE, pauses_s, seed, **options)
    return json.loads(Path(summary["manifest"]).read_text())["utterances"]


@pytest.mark.parametrize("gap", ["silence", "noise", "none"])
def test_joined_recording_pauses_of_each_gap_kind(tmp_path, gap):
    manifest = _three_utterances(tmp_path)
    placed = _joined(manifest, tmp_path / "long.wav", (0.3, 0.8), 1, gap=gap)
    audio = load_audio(tmp_path / "long.wav", RATE).numpy()
    noise = _joined(manifest, tmp_path / "n.wav", (0.3, 0.8), 1)
    lengths = [round((u["end_ms"] - u["start_ms"]) * RATE / 1000) for u in placed]
    pauses = np.diff([0] + [x for u in placed for x in (u["start_ms"], u["end_ms"])] + [len(audio) / RATE * 1000])
    if gap == "none":
        assert len(audio) == sum(lengths) and not pauses[::2].any()
    else:
        assert placed == noise  # the same pause lengths whatever fills them
        assert (0.3 * 1000 <= pauses[::2]).all() and (pauses[::2] <= 0.8 * 1000 + 1).all()
        first_pause = audio[:round(placed[0]["start_ms"] * RATE / 1000)]
        assert (not first_pause.any()) if gap == "silence" else first_pause.std() > 0.001


@pytest.mark.parametrize("gap", ["silence", "noise", "none"])
def test_joined_utterances_decode_as_one_by_one_whatever_the_gap(tmp_path, gap):
    """Each utterance (a noise floor, 150 ms of it either side of its bursts) becomes exactly one window, its own
    samples: no digital silence at its edges, nothing cut off; so the long-form transcript is the utterances'
    transcripts, decoded one by one, in order (a random model reads anything, which makes the check exact)."""
    from paraformer_asr.inference import features_from_file
    from paraformer_asr.serving.batcher import GreedyTranscriber

    manifest = _three_utterances(tmp_path)
    placed = _joined(manifest, tmp_path / "long.wav", (0.5, 0.5), 0, gap=gap)
    loaded = random_loaded_model()
    options = LongFormOptions(margin_ms=(150.0, 150.0), min_pause_ms=200.0, judged_pauses_ms=None)
    with open_audio(tmp_path / "long.wav", "long") as handle:
        reader = WindowReader(handle, "long", RATE)
        windows = plan_recording(reader.num_samples, options, HOP, HOP, RATE, energy_profile(reader, HOP, RATE))
    assert [(w.start * 1000 / RATE, w.end * 1000 / RATE) for w in windows] == [
        (u["start_ms"], u["end_ms"]) for u in placed]
    alone = GreedyTranscriber(loaded, torch.device("cpu"))(
        [features_from_file(tmp_path / f"u{index}.wav", loaded) for index in range(3)])
    long = transcribe_long(loaded, tmp_path / "long.wav", torch.device("cpu"), options)
    assert long.text.split() == " ".join(result.text for result in alone).split()


# ---------------------------------------------------------------- judged pauses


def _pieces(pauses_ms: list[float], seconds: float = 1.0) -> list[Window]:
    """Windows of ``seconds`` each in a row, window k followed by the pause pauses_ms[k] (the last by none)."""
    step = round(seconds * RATE)
    return [Window(k, k * step, (k + 1) * step, pause_after_ms=pause) for k, pause in enumerate(pauses_ms + [0.0])]


def _phrase_scorer(phrases: list[range], calls: list):
    """A stand-in decoder: a span inside one phrase scores the share of the phrase it holds (a whole phrase reads
    best, a fragment worse), a span over two phrases 0; one token per window."""
    def score(spans):
        calls.append(list(spans))
        out = []
        for first, last in spans:
            phrase = next(p for p in phrases if first in p)
            out.append(((last - first + 1) / len(phrase) if last in phrase else 0.0, last - first + 1))
        return out
    return score


def test_judged_pauses_join_the_fragments_of_each_phrase_and_part_the_phrases():
    phrases = [range(0, 3), range(3, 4), range(4, 6), range(6, 10)]
    calls = []
    groups = judge_pauses(_pieces([300.0] * 9), (200.0, 1000.0), 20 * RATE, _phrase_scorer(phrases, calls))
    assert groups == [(0, 2), (3, 3), (4, 5), (6, 9)]
    decoded = [span for call in calls for span in call]
    assert len(decoded) == len(set(decoded))  # every span decoded once


def test_only_judged_pauses_are_judged_and_no_group_outgrows_the_longest_window():
    calls = []
    everything = _phrase_scorer([range(0, 8)], calls)  # one phrase: every join gains
    # pause 1 too short to be judged (a long run's overlapping windows), pause 4 too long, pause 5 judged
    groups = judge_pauses(_pieces([300.0, 0.0, 300.0, 300.0, 1000.0, 999.0, 300.0]), (200.0, 1000.0), 20 * RATE,
                          everything)
    assert groups == [(0, 1), (2, 4), (5, 7)]
    groups = judge_pauses(_pieces([300.0] * 7), (200.0, 1000.0), 3 * RATE, everything)
    assert all(last - first + 1 <= 3 for first, last in groups)
    assert [k for first, last in groups for k in range(first, last + 1)] == list(range(8))
    never = judge_pauses(_pieces([300.0] * 7), (200.0, 1000.0), 20 * RATE, lambda spans: [(0.0, 1)] * len(spans))
    assert never == [(k, k) for k in range(8)]
    assert judge_pauses([], (200.0, 1000.0), RATE, everything) == []


def test_a_joined_window_runs_from_the_first_start_to_the_last_end_and_keeps_between_them():
    windows = [Window(0, 0, 10, -math.inf, 5.0, 300.0), Window(1, 10, 20, 5.0, 15.0, 400.0),
               Window(2, 20, 30, 15.0, math.inf)]
    assert joined_window(windows, (0, 1)) == Window(0, 0, 20, -math.inf, 15.0, 400.0)
    assert joined_window(windows, (1, 2)) == Window(1, 10, 30, 5.0, math.inf, 0.0)


@pytest.mark.parametrize("seed", range(5))
def test_padded_batches_keep_every_batch_within_its_window_count_and_padded_budget(seed):
    rng = random.Random(seed)
    lengths = sorted(rng.randint(1, 40) for _ in range(rng.randint(0, 60)))
    sizes = padded_batches(lengths, 8, 100)
    assert sum(sizes) == len(lengths) and all(1 <= size <= 8 for size in sizes)
    start = 0
    for size in sizes:  # within budget, and as full as the budget and the window count allow
        batch = lengths[start:start + size]
        assert size == 1 or size * max(batch) <= 100
        start += size
        if start < len(lengths) and size < 8:
            assert (size + 1) * lengths[start] > 100


def test_importing_the_package_bounds_the_onednn_cache_unless_the_environment_says_otherwise():
    import os
    import subprocess
    import sys

    code = "import paraformer_asr, os; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'])"
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "16"
    assert subprocess.run([sys.executable, "-c", code], env={**env, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64"},
                          capture_output=True, text=True, check=True).stdout.strip() == "64"


def test_long_form_decoding_keeps_a_phrase_with_an_inner_pause_whole(tmp_path, monkeypatch):
    """A recording of two phrases, the first with a 350 ms pause inside it, 600 ms between them: segmentation at
    pauses cuts three pieces; judged by a decoder that reads whole phrases best, the first two are decoded as one
    window and the third alone (the stand-in decoder names each window by the pieces it holds)."""
    from paraformer_asr.decode.search import Transcript

    generator = torch.Generator().manual_seed(0)

    def tone(seconds: float) -> torch.Tensor:
        return 0.3 * torch.sin(2 * math.pi * 440.0 * torch.arange(round(seconds * RATE)) / RATE)

    silence = [torch.zeros(round(s * RATE)) for s in (0.3, 0.35, 0.6, 0.3)]
    audio = torch.cat([silence[0], tone(0.4), silence[1], tone(0.4), silence[2], tone(0.5), silence[3]])
    write_audio(tmp_path / "two.wav", audio + 0.003 * torch.randn(audio.numel(), generator=generator), RATE)
    loaded = random_loaded_model()
    options = LongFormOptions()
    with open_audio(tmp_path / "two.wav", "two") as handle:
        reader = WindowReader(handle, "two", RATE)
        pieces = plan_recording(reader.num_samples, LongFormOptions(min_pause_ms=options.judged_pauses_ms[0]), HOP,
                                HOP, RATE, energy_profile(reader, HOP, RATE))
    assert len(pieces) == 3
    spans = {(pieces[first].index, joined_window(pieces, (first, last)).end - pieces[first].start): (first, last)
             for first in range(3) for last in range(first, 3)}
    labels = {(0, 1): "7", (2, 2): "8"}  # the phrases; fragments read '5', two phrases '3'
    scores = {(0, 1): 1.0, (2, 2): 1.0, (0, 0): 0.5, (1, 1): 0.5, (1, 2): 0.0, (0, 2): 0.0}

    def stand_in(model, batches, *args):
        transcripts = []
        for batch in batches:
            for row, window_id in enumerate(batch.ids):
                seconds = float(batch.durations[row])
                span = spans[(int(window_id), round(seconds * RATE))]
                label = labels.get(span, "5" if span[0] == span[1] else "3")
                transcripts.append(Transcript(window_id, [], loaded.tokenizer.encode(label), "", seconds,
                                              [(0.0, seconds * 1000.0)], score=scores[span]))
        return transcripts, 0.0

    monkeypatch.setattr(long_transcribe, "transcribe_batches", stand_in)
    judged = transcribe_long(loaded, tmp_path / "two.wav", torch.device("cpu"), options)
    assert (judged.text, judged.num_windows) == ("7 8", 2)
    parted = transcribe_long(loaded, tmp_path / "two.wav", torch.device("cpu"),
                             LongFormOptions(min_pause_ms=200.0, judged_pauses_ms=None))
    assert (parted.text, parted.num_windows) == ("5 5 8", 3)


# ---------------------------------------------------------------- with a model


def random_loaded_model(model_type: str = "paraformer", vocabulary: str = "0123456789 ",
                        predictor: str = "cif") -> LoadedModel:
    """An untrained audio model (random weights) with a character vocabulary: enough to run the machinery.
    ``predictor`` ctc: the CTC token extractor (with the CTC head it needs)."""
    cfg = config_from_dict({
        "run": {"name": "lf", "seed": 0, "num_threads": 1},
        "data": {"kind": "manifest", "train_manifest": "unused.jsonl", "val_manifest": "unused.jsonl", "n_mels": 20},
        "model": {"type": model_type, "d_model": 32, "num_heads": 4, "encoder_layers": 1, "decoder_layers": 1,
                  "ffn_dim": 64, "subsampling": "4x", "subsampling_channels": 4, "dropout": 0.0,
                  "predictor": predictor, "ctc_weight": 0.3 if predictor == "ctc" else 0.0},
    })
    tokenizer = CharTokenizer.build([vocabulary], with_blank=predictor == "ctc")
    torch.manual_seed(0)
    model = build_model(cfg, 20, tokenizer).eval()
    return LoadedModel(model, cfg, tokenizer, None, 20, PROJECT / "untrained.pt")


@pytest.mark.parametrize("segment,predictor", [("pauses", "cif"), ("windows", "cif"), ("windows", "ctc")])
def test_long_transcripts_have_increasing_absolute_times_inside_the_recording(tmp_path, segment, predictor):
    path = tmp_path / "long.flac"
    write_audio(path, speech_like(14.0, 0), RATE)
    options = LongFormOptions(segment=segment, chunk_seconds=3.0, overlap_seconds=1.0, batch_windows=3)
    result = transcribe_long(random_loaded_model(predictor=predictor), path, torch.device("cpu"), options)
    assert result.num_windows > 3 and result.duration_s == pytest.approx(14.0)
    times = [t for w in result.words for t in (w["start_ms"], w["end_ms"])]
    assert times == sorted(times) and all(0 <= t <= 14000 for t in times)
    assert result.text == " ".join(w["word"] for w in result.words)
    token_times = [t for tok in result.tokens for t in (tok["start_ms"], tok["end_ms"])]
    assert token_times == sorted(token_times)


def test_a_recording_that_fits_one_window_is_decoded_like_a_short_utterance(tmp_path):
    from paraformer_asr.inference import features_from_file
    from paraformer_asr.serving.batcher import GreedyTranscriber

    path = tmp_path / "short.wav"
    write_audio(path, speech_like(2.5, 1), RATE)
    loaded = random_loaded_model()
    options = LongFormOptions(segment="windows", chunk_seconds=5.0, overlap_seconds=1.0)
    long = transcribe_long(loaded, path, torch.device("cpu"), options)
    short = GreedyTranscriber(loaded, torch.device("cpu"))([features_from_file(path, loaded)])[0]
    assert long.num_windows == 1 and long.text.split() == short.text.split()
    assert [w["start_ms"] for w in long.words] == [w["start_ms"] for w in short.words[:len(long.words)]]


def test_the_autoregressive_baseline_gives_stitched_text_without_times(tmp_path):
    path = tmp_path / "long.wav"
    write_audio(path, speech_like(10.0, 2), RATE)
    options = LongFormOptions(segment="windows", chunk_seconds=3.0, overlap_seconds=1.0)
    result = transcribe_long(random_loaded_model("transformer_ar"), path, torch.device("cpu"), options)
    assert result.num_windows >= 4 and result.words is None and result.tokens is None
    assert isinstance(result.text, str)


# ---------------------------------------------------------------- scripts on long files


@pytest.mark.slow
def test_infer_decodes_long_files_in_windows_with_timestamps_and_subtitles(tmp_path, tone_checkpoint, monkeypatch,
                                                                          capsys):
    long_path, short_path = tmp_path / "long.wav", tmp_path / "short.wav"
    write_audio(long_path, speech_like(9.0, 3), RATE)
    write_audio(short_path, speech_like(1.5, 4), RATE)
    calls = []
    real = longform.transcribe_long

    def recording_transcribe_long(loaded, source, *args, **kwargs):
        calls.append(str(source))
        return real(loaded, source, *args, **kwargs)

    monkeypatch.setattr(longform, "transcribe_long", recording_transcribe_long)
    infer = load_script("infer")
    common = ["--checkpoint", str(tone_checkpoint), "--chunk-seconds", "2", "--chunk-overlap", "0.5"]
    assert run_main(infer.main, common + [str(long_path), str(short_path), "--timestamps"]) == 0
    assert calls == [str(long_path)]  # only the file longer than --chunk-seconds
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["audio"] for line in lines] == [str(long_path), str(short_path)]
    assert set(lines[0]) == {"audio", "text", "tokens", "words"}
    times = [t for w in lines[0]["words"] for t in (w["start_ms"], w["end_ms"])]
    assert times == sorted(times) and all(0 <= t <= 9000 for t in times)
    srt = tmp_path / "long.srt"
    assert run_main(infer.main, common + ["--segment", "windows", str(long_path), "--srt", str(srt)]) == 0
    text = capsys.readouterr().out.strip()
    assert srt.read_text().startswith("1\n00:00:0") or text == ""


@pytest.mark.slow
def test_eval_scores_long_recordings_window_by_window(tmp_path, tone_checkpoint, capsys):
    write_audio(tmp_path / "a.wav", speech_like(6.0, 5), RATE)
    (tmp_path / "long.jsonl").write_text(json.dumps({"audio": "a.wav", "text": "12 3 4 56"}) + "\n")
    evaluate = load_script("eval")
    predictions = tmp_path / "p.jsonl"
    assert run_main(evaluate.main, ["--checkpoint", str(tone_checkpoint), "--manifest", str(tmp_path / "long.jsonl"),
                                    "--chunk-seconds", "2", "--save-predictions", str(predictions)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["long_form"] is True and scores["windows"] >= 2 and scores["num_utterances"] == 1
    assert scores["word_times_increase"] is True
    assert 0 <= scores["wer"] and scores["rtf"] > 0
    line = json.loads(predictions.read_text())
    assert line["ref"] == "12 3 4 56" and "words" in line


# ---------------------------------------------------------------- the timing tool


def test_measured_peak_memory_is_the_child_process_own():  # not the test process's (torch loaded, hundreds of MB)
    import sys

    from paraformer_asr_tools.benchmarks.long_form import measure_process

    small = measure_process([sys.executable, "-c", "pass"])
    large = measure_process([sys.executable, "-c", "block = bytearray(300 * 2**20); block[::4096] = b'x' * 76800"])
    assert small["exit_status"] == large["exit_status"] == 0 and small["wall_s"] > 0
    assert small["peak_rss_mb"] < 200 and large["peak_rss_mb"] > small["peak_rss_mb"] + 250


def test_a_failing_timed_run_names_the_command_and_its_error():
    import sys

    from paraformer_asr_tools.benchmarks.long_form import measure_process
    from paraformer_asr.errors import DataError

    with pytest.raises(DataError, match="exit status 3: boom"):
        measure_process([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])


@pytest.mark.slow
def test_the_timing_tool_transcribes_each_recording_and_writes_its_table(tmp_path, tone_checkpoint, capsys):
    write_audio(tmp_path / "a.wav", speech_like(5.0, 6), RATE)
    benchmark = load_script("long_form_benchmark")
    rows_path, table_path = tmp_path / "rows.json", tmp_path / "table.md"
    assert run_main(benchmark.main, ["--checkpoint", str(tone_checkpoint), "--recordings", str(tmp_path / "a.wav"),
                                     "--repeats", "2", "--out", str(rows_path), "--markdown", str(table_path),
                                     "--", "--chunk-seconds", "2"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row == json.loads(rows_path.read_text())[0]
    assert row["audio_s"] == 5.0 and len(row["walls"]) == 2 and row["wall_s"] > 0 and row["peak_rss_mb"] > 50
    assert row["rtf"] == pytest.approx(row["wall_s"] / 5.0, rel=0.01)
    table = table_path.read_text().splitlines()
    assert len(table) == 3 and table[2].startswith("| a.wav | 0.1 |")
    assert run_main(benchmark.main, ["--checkpoint", str(tone_checkpoint), "--recordings", "missing.wav"]) == 2
