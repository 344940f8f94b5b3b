"""Build tokenizer, normaliser, datasets and loaders from a Config (toy or manifest data)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from paraformer_asr.config import Config
from paraformer_asr.data.augment import RecordingAugment
from paraformer_asr.data.batching import Collator, LengthBucketBatchSampler
from paraformer_asr.data.frontend import FeatureNormalizer, LogMelFrontend, SpecAugment, VoicePerturb
from paraformer_asr.data.manifest import ManifestDataset, read_manifest
from paraformer_asr.data.tokenizer import Tokenizer, build_tokenizer
from paraformer_asr.data.toy import ToySeq2SeqDataset
from paraformer_asr.errors import DataError


@dataclass
class DataBundle:
    """Everything a run needs from the data side. ``normalizer`` is None for toy data."""

    tokenizer: Tokenizer
    normalizer: Any
    train: Dataset | None
    val: Dataset
    input_dim: int


def epoch_lengths(dataset: Dataset) -> Callable[[int], list[int]] | None:
    """``epoch -> frame counts`` for a dataset whose lengths change between epochs (speed perturbation, edge pads),
    else None."""
    return dataset.frame_counts if isinstance(dataset, ManifestDataset) and dataset.lengths_vary else None


def make_frontend(cfg: Config):
    return LogMelFrontend(sample_rate=cfg.data.sample_rate, n_mels=cfg.data.n_mels)


def manifest_dataset(cfg: Config, manifest: str, tokenizer: Tokenizer, normalizer: Any,
                     training: bool = False) -> Dataset:
    """A ManifestDataset over ``manifest`` (speed and voice perturbation, edge pads, the recording augmentation and
    SpecAugment only when ``training``)."""
    entries = read_manifest(manifest, skip_bad_files=cfg.data.skip_bad_files)
    check_vocabulary([e.text for e in entries], tokenizer, manifest)
    spec = cfg.data.spec_augment
    augment = SpecAugment(spec.freq_masks, spec.freq_width, spec.time_masks, spec.time_width) if training else None
    speed_factors = (cfg.data.speed_perturb or []) if training else []
    frontend = make_frontend(cfg)
    voice = cfg.data.voice_perturb
    voice_perturb = VoicePerturb.for_frontend(frontend, voice.max_warp, voice.envelope_terms,
                                              voice.envelope_max_db) if training else None
    recording = RecordingAugment(cfg.data.augment, cfg.data.sample_rate) if training else None
    return ManifestDataset(entries, tokenizer, frontend, normalizer=normalizer, spec_augment=augment,
                           skip_bad_files=cfg.data.skip_bad_files, seed=cfg.run.seed, speed_factors=speed_factors,
                           voice_perturb=voice_perturb, edge_pad_ms=cfg.data.edge_pad_ms if training else 0.0,
                           recording_augment=recording)


def check_vocabulary(texts: list[str], tokenizer: Tokenizer, source: str) -> None:
    """Raise DataError when transcripts use characters the tokenizer can only encode as ``<unk>``."""
    unknown = tokenizer.unknown_characters(texts)
    if unknown:
        raise DataError(f"{source}: transcripts use characters missing from the model's vocabulary: "
                        f"{''.join(unknown)!r} (was the checkpoint trained on other data?)")


def tokenizer_for(cfg: Config, texts: list[str]) -> Tokenizer:
    """The tokenizer ``data.tokenizer`` describes, learned from ``texts`` (with ``<blank>`` when CTC is on)."""
    return build_tokenizer(cfg.data.tokenizer, texts, cfg.data.vocab_size, with_blank=cfg.model.ctc_weight > 0,
                           word_units_max=cfg.data.word_units_max)


def training_transcripts(cfg: Config) -> list[str]:
    """The transcripts of the training split (for the tokenizer and n-gram language models)."""
    if cfg.data.kind == "toy":
        return ToySeq2SeqDataset.from_config(cfg.data.toy, "train").texts()
    return [e.text for e in read_manifest(cfg.data.train_manifest, skip_bad_files=cfg.data.skip_bad_files)]


def build_data(cfg: Config, tokenizer: Tokenizer | None = None, normalizer_state: dict | None = None,
               with_train: bool = True) -> DataBundle:
    """Datasets for training (tokenizer and normaliser fitted on the training split unless given)."""
    if tokenizer is None:
        tokenizer = tokenizer_for(cfg, training_transcripts(cfg))
    if cfg.data.kind == "toy":
        train = ToySeq2SeqDataset.from_config(cfg.data.toy, "train") if with_train else None
        if train is not None:
            train.tokenizer = tokenizer
        val = ToySeq2SeqDataset.from_config(cfg.data.toy, "val", tokenizer)
        return DataBundle(tokenizer, None, train, val, cfg.data.toy.feature_dim)

    normalizer = FeatureNormalizer.from_dict(normalizer_state) if normalizer_state is not None else None
    train = None
    if with_train:
        train = manifest_dataset(cfg, cfg.data.train_manifest, tokenizer, None, training=True)
        if normalizer is None:
            show = sys.stderr.isatty() and not os.environ.get("CI")
            features = tqdm(train.feature_iterator(), total=len(train), desc="normaliser statistics", unit="utt",
                            disable=not show, leave=False)
            # unperturbed training features, once per run
            normalizer = FeatureNormalizer.fit(features, cfg.data.utterance_mean)
        train.normalizer = normalizer
    val = manifest_dataset(cfg, cfg.data.val_manifest, tokenizer, normalizer)
    return DataBundle(tokenizer, normalizer, train, val, cfg.data.n_mels)


def make_loader(dataset: ToySeq2SeqDataset | ManifestDataset, batch_size: int, pad_id: int, shuffle: bool, seed: int,
                num_workers: int = 0, num_replicas: int = 1,
                rank: int = 0) -> tuple[DataLoader, LengthBucketBatchSampler]:
    """Length-bucketed loader (this process's shard when ``num_replicas`` > 1). Its own generator keeps
    the global torch RNG untouched (exact resume)."""
    if len(dataset) == 0:
        raise DataError("the dataset is empty")
    if len(dataset) < num_replicas:
        raise DataError(f"the dataset has {len(dataset)} items, fewer than the {num_replicas} processes")
    sampler = LengthBucketBatchSampler(dataset.frame_counts(), batch_size, shuffle=shuffle, seed=seed,
                                       num_replicas=num_replicas, rank=rank, lengths_of_epoch=epoch_lengths(dataset))
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=Collator(pad_id), num_workers=num_workers,
                        generator=torch.Generator().manual_seed(seed))
    return loader, sampler
