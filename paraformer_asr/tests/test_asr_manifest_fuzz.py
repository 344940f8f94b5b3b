"""Generated manifests holding missing, empty, corrupt and sample-less audio files among good ones: a DataError
naming the first bad file (and its manifest line), or with ``skip_bad_files`` exactly the good utterances, every
one decodable, and the skipped ones counted in the log."""

import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraformer_asr.data.frontend import LogMelFrontend
from paraformer_asr.data.manifest import ManifestDataset, read_manifest
from paraformer_asr.data.tokenizer import CharTokenizer
from paraformer_asr.errors import DataError

from asr_fuzz import FAST, SLOW, encode, signal
from asr_helpers import PackageLog

BAD_KINDS = ("missing", "empty", "garbage", "no samples")
TOKENIZER = CharTokenizer.build(["0123456789"])


def write_file(path: Path, kind: str, seed: int) -> None:
    if kind == "good":
        path.write_bytes(encode(signal(1600 + 40 * seed, 1, 16000, seed), 16000, "WAV", "PCM_16"))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(b"\x00" + bytes(np.random.default_rng(seed).integers(0, 256, 64, dtype=np.uint8)))
    elif kind == "no samples":
        path.write_bytes(encode(np.zeros((0, 1), np.float32), 16000, "WAV", "PCM_16"))
    # "missing": no file


def build_dataset(folder: Path, kinds: list[str], skip_bad_files: bool) -> ManifestDataset:
    lines = []
    for index, kind in enumerate(kinds):
        write_file(folder / f"u{index}.wav", kind, index)
        lines.append(json.dumps({"audio": f"u{index}.wav", "text": str(index % 10)}))
    manifest = folder / "m.jsonl"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    entries = read_manifest(manifest, skip_bad_files=skip_bad_files)
    return ManifestDataset(entries, TOKENIZER, LogMelFrontend(), skip_bad_files=skip_bad_files)


def check_manifest(kinds: list[str], skip_bad_files: bool) -> None:
    goods = [index for index, kind in enumerate(kinds) if kind == "good"]
    bads = [index for index, kind in enumerate(kinds) if kind != "good"]
    with tempfile.TemporaryDirectory() as name, PackageLog() as warnings:
        folder = Path(name)
        if bads and not skip_bad_files:
            with pytest.raises(DataError) as refused:
                build_dataset(folder, kinds, skip_bad_files)
            missing = [index for index in bads if kinds[index] == "missing"]
            first = (missing or bads)[0]  # the manifest's lines are read (files found) before any header
            assert f"u{first}.wav" in str(refused.value) and f"m.jsonl:{first + 1}" in str(refused.value)
            return
        if not goods:
            with pytest.raises(DataError, match="no usable|no utterances"):
                build_dataset(folder, kinds, skip_bad_files)
            return
        dataset = build_dataset(folder, kinds, skip_bad_files)
        assert [entry.audio_path.name for entry in dataset.entries] == [f"u{index}.wav" for index in goods]
        assert all(dataset[i]["features"].shape[0] > 0 for i in range(len(dataset)))
        skipped = sum(int(count) for message in warnings.messages for count in re.findall(r"skipped (\d+) ", message))
        assert skipped == len(bads), warnings.messages


kinds_lists = st.lists(st.sampled_from(("good", "good") + BAD_KINDS), min_size=1, max_size=6)


@settings(FAST, max_examples=10)
@given(kinds=kinds_lists, skip_bad_files=st.booleans())
def test_generated_manifests_name_or_skip_their_bad_files(kinds, skip_bad_files):
    check_manifest(kinds, skip_bad_files)


@pytest.mark.slow
@settings(SLOW, max_examples=250)
@given(kinds=kinds_lists, skip_bad_files=st.booleans())
def test_generated_manifests_name_or_skip_their_bad_files_many(kinds, skip_bad_files):
    check_manifest(kinds, skip_bad_files)
