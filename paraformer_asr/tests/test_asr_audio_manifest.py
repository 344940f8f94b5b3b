"""JSON Lines manifests and ManifestDataset: parsing errors name file and line, skipping is counted, items,
segments, word times, on-the-fly features, speed and voice perturbation, edge pads."""

import dataclasses
import json
import logging
import math

import pytest
import torch

from paraformer_asr.data.frontend import FeatureNormalizer, LogMelFrontend, SpecAugment, VoicePerturb
from paraformer_asr.data.manifest import ManifestDataset, read_manifest, read_manifest_records
from paraformer_asr.data.audio import noise_floor, write_audio
from paraformer_asr.data.batching import Collator
from paraformer_asr.errors import DataError


class DigitTokenizer:
    """Duck-typed stand-in: digits 0-9 -> ids 4-13."""

    def encode(self, text):
        return [4 + int(char) for char in text]


def make_corpus(folder, texts, rate=16000, suffix=".wav"):
    """One audio file per text (length grows with the text) in folder/wavs; returns manifest lines with relative
    paths."""
    (folder / "wavs").mkdir(parents=True, exist_ok=True)
    lines = []
    for index, text in enumerate(texts):
        num_samples = 1600 * (len(text) + 1)
        t = torch.arange(num_samples, dtype=torch.float64) / rate
        write_audio(folder / "wavs" / f"u{index}{suffix}", 0.3 * torch.sin(2 * math.pi * 440 * (index + 1) * t), rate)
        lines.append(json.dumps({"audio": f"wavs/u{index}{suffix}", "text": text, "id": f"utt{index}"}))
    return lines


def write_manifest(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_read_manifest_resolves_relative_paths_and_ids(tmp_path):
    lines = make_corpus(tmp_path / "corpus", ["12", "345"])
    lines.append("")  # blank lines are ignored
    lines.append(json.dumps({"audio": str(tmp_path / "corpus" / "wavs" / "u0.wav"), "text": " 9 "}))
    entries = read_manifest(write_manifest(tmp_path / "corpus" / "train.jsonl", lines))
    assert [entry.id for entry in entries] == ["utt0", "utt1", "u0"]
    assert [entry.text for entry in entries] == ["12", "345", "9"]
    assert [entry.line_no for entry in entries] == [1, 2, 4]
    assert entries[0].audio_path == tmp_path / "corpus" / "wavs" / "u0.wav"
    assert entries[2].audio_path.is_file()


BAD_LINES = {
    "invalid_json": ('{"audio": "wavs/u0.wav", "text": ', "invalid JSON"),
    "not_object": ("[1, 2]", "expected a JSON object"),
    "missing_text": ('{"audio": "wavs/u0.wav"}', "missing or empty 'text'"),
    "empty_text": ('{"audio": "wavs/u0.wav", "text": "  "}', "missing or empty 'text'"),
    "missing_audio_field": ('{"text": "12"}', "missing or empty 'audio'"),
    "missing_audio_file": ('{"audio": "wavs/nope.wav", "text": "12"}', "audio file not found"),
    "negative_start": ('{"audio": "wavs/u0.wav", "text": "1", "start_s": -1}', "'start_s' must be a number of seconds"),
    "text_end": ('{"audio": "wavs/u0.wav", "text": "1", "end_s": "2"}', "'end_s' must be a number of seconds"),
    "end_before_start": ('{"audio": "wavs/u0.wav", "text": "1", "start_s": 2, "end_s": 1}', "must be greater"),
    "words_not_list": ('{"audio": "wavs/u0.wav", "text": "1", "words": "one"}', "'words' must be a list"),
    "word_without_end": ('{"audio": "wavs/u0.wav", "text": "1", "words": [{"word": "one", "start_ms": 0}]}',
                         "words[0] must be"),
    "word_reversed": ('{"audio": "wavs/u0.wav", "text": "1 2", "words": [{"word": "one", "start_ms": 0, "end_ms": 9},'
                      ' {"word": "two", "start_ms": 50, "end_ms": 20}]}', "words[1] ('two') has times"),
    "word_empty": ('{"audio": "wavs/u0.wav", "text": "1", "words": [{"word": " ", "start_ms": 0, "end_ms": 9}]}',
                   "words[0] must be"),
}


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_bad_line_names_manifest_and_line(tmp_path, name):
    bad_line, reason = BAD_LINES[name]
    lines = make_corpus(tmp_path, ["1", "2"])
    manifest = write_manifest(tmp_path / "m.jsonl", [lines[0], bad_line, lines[1]])
    with pytest.raises(DataError) as info:
        read_manifest(manifest)
    assert f"{manifest}:2" in str(info.value)
    assert reason in str(info.value)


def test_skip_bad_files_counts_and_warns(tmp_path, caplog):
    lines = make_corpus(tmp_path, ["1", "2"])
    bad = [BAD_LINES["invalid_json"][0], BAD_LINES["missing_audio_file"][0]]
    manifest = write_manifest(tmp_path / "m.jsonl", [lines[0], *bad, lines[1]])
    with caplog.at_level(logging.WARNING, logger="paraformer_asr"):
        entries = read_manifest(manifest, skip_bad_files=True)
    assert [entry.text for entry in entries] == ["1", "2"]
    assert all(entry.start_s is None and entry.end_s is None and entry.words is None for entry in entries)
    assert "skipped 2 bad line(s) of 4" in caplog.text and f"{manifest}:2" in caplog.text


def test_manifest_records_keep_each_kept_lines_extra_fields(tmp_path):
    lines = make_corpus(tmp_path, ["1", "2"])
    lines[1] = json.dumps({**json.loads(lines[1]), "source": "klettres", "speaker": 7})
    manifest = write_manifest(tmp_path / "m.jsonl", [lines[0], BAD_LINES["missing_audio_file"][0], lines[1]])
    records = read_manifest_records(manifest, skip_bad_files=True)
    assert [entry for entry, _ in records] == read_manifest(manifest, skip_bad_files=True)
    assert [record for _, record in records] == [json.loads(lines[0]), json.loads(lines[1])]
    assert records[1][1]["source"] == "klettres" and records[1][1]["speaker"] == 7


def test_manifest_with_nothing_usable_is_an_error(tmp_path):
    with pytest.raises(DataError, match="has no usable entries"):
        read_manifest(write_manifest(tmp_path / "m.jsonl", ['{"text": "1"}']), skip_bad_files=True)
    with pytest.raises(DataError, match="has no usable entries"):
        read_manifest(write_manifest(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(DataError, match="manifest not found"):
        read_manifest(tmp_path / "absent.jsonl")


def test_dataset_items_follow_the_contract(tmp_path):
    texts = ["1", "42", "907"]
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", make_corpus(tmp_path, texts)))
    frontend = LogMelFrontend()
    dataset = ManifestDataset(entries, DigitTokenizer(), frontend)
    assert len(dataset) == 3
    for index, text in enumerate(texts):
        item = dataset[index]
        num_samples = 1600 * (len(text) + 1)
        assert set(item) == {"id", "features", "tokens", "text", "duration_s"}
        assert item["id"] == f"utt{index}" and item["text"] == text
        assert item["features"].shape == (frontend.num_frames(num_samples), 80)
        assert item["features"].dtype == torch.float32
        assert item["tokens"].dtype == torch.long and item["tokens"].tolist() == DigitTokenizer().encode(text)
        assert item["duration_s"] == pytest.approx(num_samples / 16000)
    assert dataset.frame_counts() == [item.shape[0] for item in dataset.feature_iterator()]  # headers only


def test_dataset_resamples_other_rates(tmp_path):
    lines = make_corpus(tmp_path, ["12"], rate=22050)
    dataset = ManifestDataset(read_manifest(write_manifest(tmp_path / "m.jsonl", lines)), DigitTokenizer(),
                              LogMelFrontend())
    assert dataset[0]["duration_s"] == pytest.approx(4800 / 22050, abs=1e-4)


def test_normalisation_and_spec_augment_per_item(tmp_path):
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", make_corpus(tmp_path, ["1", "22", "333", "4444"])))
    plain = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend())
    normalizer = FeatureNormalizer.fit(plain.feature_iterator())
    everything = torch.cat([plain[i]["features"] for i in range(len(plain))])
    augment = SpecAugment(freq_masks=2, freq_width=10, time_masks=1, time_width=5)
    dataset = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), normalizer, augment, seed=3)
    torch.testing.assert_close(next(dataset.feature_iterator()), plain[0]["features"])  # raw log-mel
    normalised = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), normalizer)
    torch.testing.assert_close(torch.cat([normalised[i]["features"] for i in range(4)]).mean(0), torch.zeros(80),
                               atol=1e-4, rtol=0)
    assert everything.abs().mean() > 1  # raw features are far from normalised
    first = [dataset[i]["features"] for i in range(4)]
    again = [dataset[i]["features"] for i in range(4)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))  # pure function of (seed, index, epoch)
    assert any((f == 0).any() for f in first)
    dataset.set_epoch(1)
    assert not all(torch.equal(a, dataset[i]["features"]) for i, a in enumerate(first))
    dataset.set_epoch(0)
    assert all(torch.equal(a, dataset[i]["features"]) for i, a in enumerate(first))


def test_voice_perturbation_per_item_before_normalisation_keeps_the_masks(tmp_path):
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", make_corpus(tmp_path, ["1", "22", "333"])))
    frontend = LogMelFrontend()
    normalizer = FeatureNormalizer(torch.full((80,), -3.0), torch.full((80,), 2.0))
    augment = SpecAugment(freq_masks=1, freq_width=5, time_masks=1, time_width=3)
    level = VoicePerturb.for_frontend(frontend, envelope_terms=1, envelope_max_db=6.0)  # one gain per item
    masked = ManifestDataset(entries, DigitTokenizer(), frontend, normalizer, augment, seed=2)
    perturbed = ManifestDataset(entries, DigitTokenizer(), frontend, normalizer, augment, seed=2, voice_perturb=level)
    for epoch in (0, 1):
        masked.set_epoch(epoch)
        perturbed.set_epoch(epoch)
        for index in range(3):
            a, b = masked[index]["features"], perturbed[index]["features"]
            assert torch.equal(a == 0, b == 0)  # the same SpecAugment masks: their draws are apart
            shift = (b - a)[a != 0]  # a level in the log domain, divided by the normaliser's std
            assert shift.numel() > 0 and float(shift.std()) < 1e-4 and float(shift.abs().mean()) > 1e-3
            assert torch.equal(b, perturbed[index]["features"])  # a pure function of (seed, index, epoch)
    first = [perturbed[i]["features"] for i in range(3)]
    perturbed.set_epoch(0)
    assert not all(torch.equal(a, perturbed[i]["features"]) for i, a in enumerate(first))


def test_unreadable_audio_names_file_and_line_or_is_skipped(tmp_path, caplog):
    lines = make_corpus(tmp_path, ["1", "2", "3"])
    (tmp_path / "wavs" / "u1.wav").write_bytes(b"RIFF....WAVEjunk")
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", lines))
    with pytest.raises(DataError) as info:
        ManifestDataset(entries, DigitTokenizer(), LogMelFrontend())
    message = str(info.value)
    assert f"{tmp_path / 'm.jsonl'}:2" in message and str(tmp_path / "wavs" / "u1.wav") in message
    with caplog.at_level(logging.WARNING, logger="paraformer_asr"):
        dataset = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), skip_bad_files=True)
    assert len(dataset) == 2 and dataset.num_skipped == 1
    assert [dataset[i]["text"] for i in range(2)] == ["1", "3"]
    assert "skipped 1 unreadable audio file(s) of 3" in caplog.text


def test_segments_are_items_of_their_part_of_the_file(tmp_path):
    from paraformer_asr.data.audio import load_audio

    make_corpus(tmp_path, ["1234567"], suffix=".flac")  # 12800 samples, 0.8 s
    lines = [json.dumps({"audio": "wavs/u0.flac", "text": "12", "start_s": 0.25, "end_s": 0.5}),
             json.dumps({"audio": "wavs/u0.flac", "text": "34", "start_s": 0.6}),
             json.dumps({"audio": "wavs/u0.flac", "text": "56", "end_s": 0.5})]
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", lines))
    assert [(e.start_s, e.end_s) for e in entries] == [(0.25, 0.5), (0.6, None), (None, 0.5)]
    frontend = LogMelFrontend()
    dataset = ManifestDataset(entries, DigitTokenizer(), frontend)
    assert [dataset[i]["duration_s"] for i in range(3)] == pytest.approx([0.25, 0.2, 0.5])
    assert dataset.frame_counts() == [frontend.num_frames(n) for n in (4000, 3200, 8000)]
    assert [dataset[i]["features"].shape[0] for i in range(3)] == dataset.frame_counts()
    whole = load_audio(tmp_path / "wavs" / "u0.flac", 16000)  # [12800]
    for index, (start, stop) in enumerate([(4000, 8000), (9600, 12800), (0, 8000)]):
        torch.testing.assert_close(dataset[index]["features"], frontend(whole[start:stop]), rtol=0, atol=0)


def test_a_segment_past_the_end_of_its_file_names_the_line(tmp_path, caplog):
    make_corpus(tmp_path, ["1"])  # 0.2 s
    lines = [json.dumps({"audio": "wavs/u0.wav", "text": "1", "start_s": 0.05}),
             json.dumps({"audio": "wavs/u0.wav", "text": "1", "start_s": 3.0})]
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", lines))
    with pytest.raises(DataError, match=r"m.jsonl:2: .*u0.wav: the segment starts at 3 s but the file is only 0.200"):
        ManifestDataset(entries, DigitTokenizer(), LogMelFrontend())
    with caplog.at_level(logging.WARNING, logger="paraformer_asr"):
        assert len(ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), skip_bad_files=True)) == 1


def test_speed_perturbation_draws_are_a_pure_function_of_seed_index_and_epoch(tmp_path):
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", make_corpus(tmp_path, ["1", "22", "333", "4444"])))
    words = [{"word": "one", "start_ms": 100.0, "end_ms": 200.0}]
    entries = [dataclasses.replace(entries[0], words=words), *entries[1:]]
    factors = [0.9, 1.0, 1.1]
    dataset = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), speed_factors=factors, seed=5)
    plain = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend())
    drawn = {}
    for epoch in range(12):
        dataset.set_epoch(epoch)
        for index in range(4):
            factor = dataset.speed_factor(index)
            item = dataset[index]
            num_samples = 1600 * (len(entries[index].text) + 1)
            assert item["duration_s"] * 16000 == -(-num_samples * 16000 // round(16000 * factor))  # N / factor
            assert item["features"].shape[0] == LogMelFrontend().num_frames(round(item["duration_s"] * 16000))
            assert item["features"].shape[0] == dataset.frame_counts(epoch)[index]  # what the sampler buckets by
            if factor == 1.0:
                assert torch.equal(item["features"], plain[index]["features"])
            if index == 0:
                assert item["words"][0]["start_ms"] == pytest.approx(100.0 / factor)
            drawn[(epoch, index)] = factor
    assert set(drawn.values()) == set(factors)
    again = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), speed_factors=factors, seed=5)
    again.set_epoch(7)
    assert [again.speed_factor(i) for i in range(4)] == [drawn[(7, i)] for i in range(4)]
    other_seed = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), speed_factors=factors, seed=6)
    other_draws = {}
    for epoch in range(12):
        other_seed.set_epoch(epoch)
        other_draws.update({(epoch, index): other_seed.speed_factor(index) for index in range(4)})
    assert other_draws != drawn
    assert dataset.frame_counts() == plain.frame_counts() == plain.frame_counts(epoch=3)  # unperturbed


def test_edge_pads_are_quiet_drawn_per_item_and_epoch_and_counted_by_the_sampler(tmp_path):
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", make_corpus(tmp_path, ["1", "22", "333", "4444"])))
    words = [{"word": "one", "start_ms": 100.0, "end_ms": 200.0}]
    entries = [dataclasses.replace(entries[0], words=words), *entries[1:]]
    dataset = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), speed_factors=[0.9, 1.1], seed=5,
                              edge_pad_ms=100)
    draws = set()
    for epoch in range(6):
        dataset.set_epoch(epoch)
        pads = dataset.edge_pads_of_epoch(epoch)  # [4, 2] samples
        assert pads.shape == (4, 2) and pads.min() >= 0 and pads.max() <= 1600
        draws.add(tuple(pads.flatten().tolist()))
        for index in range(4):
            item = dataset[index]
            factor = dataset.speed_factor(index)
            perturbed = -(-1600 * (len(entries[index].text) + 1) * 16000 // round(16000 * factor))
            assert round(item["duration_s"] * 16000) == perturbed + pads[index].sum()
            assert item["features"].shape[0] == dataset.frame_counts(epoch)[index]  # what the sampler buckets by
            if index == 0:
                assert item["words"][0]["start_ms"] == pytest.approx(100.0 / factor + pads[0, 0] / 16)
    assert len(draws) == 6  # drawn again every epoch
    again = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), speed_factors=[0.9, 1.1], seed=5,
                            edge_pad_ms=100)
    again.set_epoch(4)
    dataset.set_epoch(4)
    assert torch.equal(again[2]["features"], dataset[2]["features"])
    plain = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend())
    assert plain.edge_pads_of_epoch(3).sum() == 0 and plain.frame_counts(epoch=3) == plain.frame_counts()


def test_edge_pads_keep_the_speech_and_stay_below_its_noise_floor(tmp_path):
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", make_corpus(tmp_path, ["1"])))
    dataset = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), edge_pad_ms=100)
    speech = 0.5 * torch.randn(3200) * torch.linspace(0.01, 1.0, 3200)  # [N], louder towards its end
    padded = dataset._pad_edges(speech, 800, 1200, 0)  # [800 + N + 1200]
    assert padded.shape == (5200,)
    assert torch.equal(padded[800:4000], speech)
    quiet = torch.cat([padded[:800], padded[4000:]])
    assert quiet.square().mean().sqrt() <= 1.2 * noise_floor(speech.numpy(), 16000)


def test_speed_perturbation_changes_tempo_and_pitch_together():
    from paraformer_asr.data.resample import speed_perturb

    t = torch.arange(16000, dtype=torch.float64) / 16000
    tone = torch.sin(2 * math.pi * 1000 * t)
    faster = speed_perturb(tone, 16000, 1.1)
    assert faster.shape == (math.ceil(16000 / 1.1),)
    spectrum = torch.fft.rfft(faster * torch.hann_window(faster.numel(), dtype=torch.float64)).abs()
    assert abs(float(spectrum.argmax()) * 16000 / faster.numel() - 1100) < 5  # 1000 Hz played 1.1x faster
    assert speed_perturb(tone, 16000, 1.0) is tone
    with pytest.raises(ValueError, match=r"in \(0, 2\]"):
        speed_perturb(tone, 16000, 2.5)


def test_dataloader_workers_give_the_same_items(tmp_path):
    from paraformer_asr.data.setup import make_loader

    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", make_corpus(tmp_path, ["1", "22", "333", "4444"])))
    dataset = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend(), speed_factors=[0.9, 1.1], seed=1,
                              spec_augment=SpecAugment(1, 5, 1, 5))
    dataset.set_epoch(3)
    batches = []
    for workers in (0, 2):
        loader, sampler = make_loader(dataset, 2, 0, shuffle=True, seed=1, num_workers=workers)
        assert sampler.lengths_of_epoch == dataset.frame_counts
        sampler.set_epoch(3)
        batches.append([(b.ids, b.features) for b in loader])
    assert [ids for ids, _ in batches[0]] == [ids for ids, _ in batches[1]]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(batches[0], batches[1]))


def test_timed_words_are_read_checked_and_batched(tmp_path):
    lines = make_corpus(tmp_path, ["12", "3"])
    record = json.loads(lines[0])
    record["words"] = [{"word": "12", "start_ms": 40, "end_ms": 250.5}]
    lines[0] = json.dumps(record)
    entries = read_manifest(write_manifest(tmp_path / "m.jsonl", lines))
    assert entries[0].words == [{"word": "12", "start_ms": 40.0, "end_ms": 250.5}] and entries[1].words is None
    dataset = ManifestDataset(entries, DigitTokenizer(), LogMelFrontend())
    assert dataset[0]["words"] == entries[0].words and "words" not in dataset[1]
    batch = Collator(0)([dataset[0], dataset[1]])
    assert batch.words == [entries[0].words, None]


@pytest.mark.parametrize("words, problem", [
    ("12", "'words' must be a list"),
    ([{"word": "12", "start_ms": "0", "end_ms": 1}], "words\\[0\\] must be"),
    ([{"word": "12", "start_ms": 50, "end_ms": 10}], "start <= end"),
    ([{"word": "1", "start_ms": 0, "end_ms": 10}], "must list the transcript's words"),
])
def test_bad_timed_words_name_the_line(tmp_path, words, problem):
    lines = make_corpus(tmp_path, ["12"])
    record = json.loads(lines[0])
    record["words"] = words
    with pytest.raises(DataError, match=f"m.jsonl:1: .*{problem}"):
        read_manifest(write_manifest(tmp_path / "m.jsonl", [json.dumps(record)]))
