"""scripts/prepare_corpus.py and data/corpora.py on small LibriSpeech- and Kaldi-layout corpora made here."""

import json

import pytest
import torch

from paraformer_asr.cli import run_main
from paraformer_asr.config import load_config
from paraformer_asr.data.audio import load_audio, write_audio
from paraformer_asr.data.corpora import prepare_kaldi, prepare_librispeech
from paraformer_asr.data.frontend import LogMelFrontend
from paraformer_asr.data.manifest import ManifestDataset, read_manifest
from paraformer_asr.data.tokenizer import CharTokenizer
from paraformer_asr.errors import DataError

from asr_helpers import PROJECT, load_script

RATE = 16000


def burst(seconds: float, seed: int) -> torch.Tensor:
    """Noise burst [N] with a rising envelope (every sample position distinct enough to compare slices)."""
    samples = torch.randn(int(seconds * RATE), generator=torch.Generator().manual_seed(seed))
    return 0.3 * samples * torch.linspace(0.1, 1.0, samples.numel())


def librispeech_subset(root, name, chapters):
    """root/name/SPEAKER/CHAPTER/SPEAKER-CHAPTER-NNNN.flac + SPEAKER-CHAPTER.trans.txt per {(spk, chap): texts}."""
    for (speaker, chapter), texts in chapters.items():
        folder = root / name / str(speaker) / str(chapter)
        folder.mkdir(parents=True)
        lines = []
        for index, text in enumerate(texts):
            utt_id = f"{speaker}-{chapter}-{index:04d}"
            write_audio(folder / f"{utt_id}.flac", burst(0.1 + 0.05 * index, speaker + index), RATE)
            lines.append(f"{utt_id} {text}")
        (folder / f"{speaker}-{chapter}.trans.txt").write_text("\n".join(lines) + "\n")
    return root / name


@pytest.fixture
def librispeech(tmp_path):
    root = tmp_path / "LibriSpeech"
    librispeech_subset(root, "train-clean-100", {(19, 198): ["NORTHANGER ABBEY", "CHAPTER ONE"],
                                                 (26, 495): ["THE BOY", "A GIRL", "IT'S LATE"]})
    librispeech_subset(root, "dev-clean", {(84, 121): ["HELLO THERE"]})
    (root / "README.TXT").write_text("not a subset")
    return root


def test_librispeech_folder_of_subsets_gives_one_manifest_each(librispeech, tmp_path):
    summaries = prepare_librispeech(librispeech, tmp_path / "manifests")
    assert [s["manifest"] for s in summaries] == [str(tmp_path / "manifests" / f"{n}.jsonl")
                                                  for n in ("dev-clean", "train-clean-100")]
    assert [(s["utterances"], s["skipped"]) for s in summaries] == [(1, 0), (5, 0)]
    assert summaries[1]["seconds"] == pytest.approx(0.1 + 0.15 + 0.1 + 0.15 + 0.2)
    entries = read_manifest(tmp_path / "manifests" / "train-clean-100.jsonl")
    assert [e.id for e in entries] == ["19-198-0000", "19-198-0001", "26-495-0000", "26-495-0001", "26-495-0002"]
    assert [e.text for e in entries][-1] == "IT'S LATE"
    assert entries[0].audio_path == librispeech / "train-clean-100" / "19" / "198" / "19-198-0000.flac"
    assert entries[0].audio_path.is_absolute() and entries[0].start_s is None
    dataset = ManifestDataset(entries, CharTokenizer.build([e.text for e in entries]), LogMelFrontend())
    assert dataset[4]["features"].shape == (LogMelFrontend().num_frames(3200), 80)


def test_librispeech_single_subset(librispeech, tmp_path):
    (summary,) = prepare_librispeech(librispeech / "dev-clean", tmp_path / "out")
    assert summary["manifest"] == str(tmp_path / "out" / "dev-clean.jsonl") and summary["utterances"] == 1


def test_missing_and_unreadable_audio_is_listed_or_skipped_and_counted(librispeech, tmp_path):
    chapter = librispeech / "train-clean-100" / "26" / "495"
    (chapter / "26-495-0001.flac").unlink()
    (chapter / "26-495-0002.flac").write_bytes(b"fLaC but not really")
    with pytest.raises(DataError) as info:
        prepare_librispeech(librispeech, tmp_path / "out")
    message = str(info.value)
    assert message.startswith("train-clean-100: 2 of 5 utterances cannot be used: 2 missing or unreadable")
    assert "26-495-0001.flac: audio file not found" in message and "26-495-0002.flac: not a readable audio file" \
        in message and "--skip-bad" in message
    assert not (tmp_path / "out" / "train-clean-100.jsonl").exists()
    summaries = prepare_librispeech(librispeech, tmp_path / "out", skip_bad=True)
    assert [(s["utterances"], s["skipped"]) for s in summaries] == [(1, 0), (3, 2)]
    assert len(summaries[1]["first_problems"]) == 2
    assert [e.id for e in read_manifest(tmp_path / "out" / "train-clean-100.jsonl")][-1] == "26-495-0000"


def test_no_known_layout_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="found no LibriSpeech transcripts"):
        prepare_librispeech(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(DataError, match="found no Kaldi data dirs"):
        prepare_kaldi(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(DataError, match="corpus folder not found"):
        prepare_kaldi(tmp_path / "nothing", tmp_path / "out")


def kaldi_dir(folder, wav_scp, text, segments=None):
    folder.mkdir(parents=True)
    (folder / "wav.scp").write_text(wav_scp)
    (folder / "text").write_text(text)
    if segments is not None:
        (folder / "segments").write_text(segments)
    return folder


def test_kaldi_segments_become_start_and_end_fields(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative wav.scp paths are relative to the current directory, as in Kaldi
    (tmp_path / "audio").mkdir()
    write_audio(tmp_path / "audio" / "meeting.flac", burst(2.0, 1), RATE)
    write_audio(tmp_path / "audio" / "call.wav", burst(1.0, 2), RATE)
    wav_scp = f"meeting audio/meeting.flac\ncall {tmp_path / 'audio' / 'call.wav'}\n"
    data = kaldi_dir(tmp_path / "data" / "train", wav_scp,
                     "meeting-a hello there\nmeeting-b general kenobi\ncall-a yes\n",
                     "meeting-a meeting 0.00 0.50\nmeeting-b meeting 1.25 -1\ncall-a call 0.1 0.6\n")
    (summary,) = prepare_kaldi(data, tmp_path / "manifests")
    assert summary["manifest"] == str(tmp_path / "manifests" / "train.jsonl") and summary["utterances"] == 3
    assert summary["seconds"] == pytest.approx(0.5 + 0.75 + 0.5)
    records = [json.loads(line) for line in (tmp_path / "manifests" / "train.jsonl").read_text().splitlines()]
    assert records[0] == {"audio": str(tmp_path / "audio" / "meeting.flac"), "text": "hello there",
                          "id": "meeting-a", "start_s": 0.0, "end_s": 0.5}
    assert records[1]["start_s"] == 1.25 and "end_s" not in records[1]
    entries = read_manifest(tmp_path / "manifests" / "train.jsonl")
    dataset = ManifestDataset(entries, CharTokenizer.build([e.text for e in entries]), LogMelFrontend())
    whole = load_audio(tmp_path / "audio" / "meeting.flac", RATE)
    torch.testing.assert_close(dataset[1]["features"], LogMelFrontend()(whole[20000:]), rtol=0, atol=0)
    assert dataset[2]["duration_s"] == pytest.approx(0.5)


def test_kaldi_without_segments_and_a_folder_of_data_dirs(tmp_path):
    write_audio(tmp_path / "a.wav", burst(0.3, 3), RATE)
    write_audio(tmp_path / "b.wav", burst(0.4, 4), RATE)
    kaldi_dir(tmp_path / "data" / "dev", f"a {tmp_path / 'a.wav'}\n", "a one\n")
    kaldi_dir(tmp_path / "data" / "test", f"a {tmp_path / 'a.wav'}\nb {tmp_path / 'b.wav'}\n", "a one\nb two\n")
    summaries = prepare_kaldi(tmp_path / "data", tmp_path / "out")
    assert [(s["manifest"], s["utterances"]) for s in summaries] == [(str(tmp_path / "out" / "dev.jsonl"), 1),
                                                                    (str(tmp_path / "out" / "test.jsonl"), 2)]
    assert [e.id for e in read_manifest(tmp_path / "out" / "test.jsonl")] == ["a", "b"]


KALDI_ERRORS = {
    "pipe": ("r1 sox /x/r1.sph -t wav - |\n", "u1 hi\n", None, "wav.scp:1: recording r1 is a pipe command"),
    "bad_segment": ("r1 {wav}\n", "u1 hi\n", "u1 r1 0.5\n",
                    "segments:1: expected 'UTTERANCE-ID RECORDING-ID START END'"),
    "empty_segment": ("r1 {wav}\n", "u1 hi\n", "u1 r1 0.5 0.5\n", "segments:1: segment [0.5, 0.5) of u1 is empty"),
}


@pytest.mark.parametrize("name", sorted(KALDI_ERRORS))
def test_kaldi_errors_name_file_and_line(tmp_path, name):
    write_audio(tmp_path / "r1.wav", burst(0.3, 5), RATE)
    wav_scp, text, segments, message = KALDI_ERRORS[name]
    data = kaldi_dir(tmp_path / "train", wav_scp.format(wav=tmp_path / "r1.wav"), text, segments)
    with pytest.raises(DataError, match=message.replace("[", r"\[").replace(")", r"\)").replace("(", r"\(")):
        prepare_kaldi(data, tmp_path / "out")


def test_kaldi_problems_by_utterance_are_listed_or_skipped(tmp_path):
    write_audio(tmp_path / "r1.wav", burst(0.3, 6), RATE)
    data = kaldi_dir(tmp_path / "train", f"r1 {tmp_path / 'r1.wav'}\nr2 {tmp_path / 'gone.wav'}\n",
                     "u1 fine\nu2 gone\nu3 \nu4 late\nu5 nowhere\n",
                     "u1 r1 0 0.2\nu2 r2 0 1\nu3 r1 0 0.1\nu4 r1 5.0 6.0\nu5 r9 0 1\n")
    with pytest.raises(DataError) as info:
        prepare_kaldi(data, tmp_path / "out")
    assert str(info.value).startswith("train: 4 of 5 utterances cannot be used")
    (summary,) = prepare_kaldi(data, tmp_path / "out", skip_bad=True)
    assert (summary["utterances"], summary["skipped"]) == (1, 4)
    problems = " | ".join(summary["first_problems"])
    for expected in ("no transcript after the utterance id u3", "recording r9 of utterance u5 is not in",
                     "gone.wav: audio file not found", "segment u4 starts at 5 s, after the recording's end"):
        assert expected in problems


def test_prepare_corpus_script(librispeech, tmp_path, capsys):
    script = load_script("prepare_corpus")
    assert run_main(script.main, ["librispeech", str(librispeech), "--out", str(tmp_path / "m")]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["utterances"] for line in lines] == [1, 5]
    (librispeech / "dev-clean" / "84" / "121" / "84-121-0000.flac").unlink()
    assert run_main(script.main, ["librispeech", str(librispeech), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: dev-clean: 1 of 1 utterances cannot be used") and "Traceback" not in err
    assert run_main(script.main, ["kaldi", str(tmp_path / "nowhere"), "--out", str(tmp_path / "m")]) == 2
    assert "corpus folder not found" in capsys.readouterr().err


def test_the_librispeech_config_reads_the_manifests_prepare_corpus_writes(librispeech, tmp_path, monkeypatch, capsys):
    librispeech_subset(librispeech, "test-clean", {(61, 70968): ["HE BEGAN A CONFUSED COMPLAINT"]})
    monkeypatch.chdir(tmp_path)  # the config's paths are relative to the working directory, as configs/README.md runs
    script = load_script("prepare_corpus")
    assert run_main(script.main, ["librispeech", str(librispeech), "--out", "data/librispeech"]) == 0
    written = {json.loads(line)["manifest"] for line in capsys.readouterr().out.splitlines()}
    cfg = load_config(PROJECT / "configs" / "paraformer_librispeech.yaml")
    assert cfg.model.type == "paraformer" and cfg.data.kind == "manifest"
    named = [cfg.data.train_manifest, cfg.data.val_manifest, cfg.data.test_manifest]
    assert named == ["data/librispeech/train-clean-100.jsonl", "data/librispeech/dev-clean.jsonl",
                     "data/librispeech/test-clean.jsonl"]
    assert set(named) == written and all((tmp_path / path).is_file() for path in named)
