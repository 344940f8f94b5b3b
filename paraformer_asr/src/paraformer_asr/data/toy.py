"""ToySeq2SeqDataset: a synthetic 'speech-like' sequence task with known token boundaries.

Every character of an alphabet has a fixed random feature prototype (shared by all splits,
drawn from ``prototype_seed``). An utterance is a random character string (no character twice in
a row, so every boundary is visible in the features); each character's prototype is held for a
random number of frames, a moving average over ``2 * transition_frames + 1`` frames makes the
transitions smooth, Gaussian noise is added and the result is clipped to [-2, 2]. One frame
stands for 10 ms. ``dataset[i]`` is a pure function of ``(seed, i)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from paraformer_asr.data.tokenizer import Tokenizer

FRAME_SECONDS = 0.01
SPLIT_SALT = {"train": 0, "val": 1, "test": 2}


class ToySeq2SeqDataset(Dataset):
    """Items: ``{"id", "features" [T,F] float32 in [-2,2], "tokens" [S] long (no bos/eos), "text",
    "duration_s" (= T * 0.01), "boundaries" [S] long}`` where ``boundaries[k]`` is the index of
    the last frame of token k (so ``boundaries[-1] == T - 1``)."""

    def __init__(self, num_items: int, seed: int, prototype_seed: int, alphabet: str, feature_dim: int,
                 min_tokens: int, max_tokens: int, min_frames_per_token: int, max_frames_per_token: int,
                 transition_frames: int, noise_std: float, tokenizer: Tokenizer | None = None,
                 name: str = "toy"):
        self.num_items = num_items
        self.seed = seed
        self.alphabet = alphabet
        self.feature_dim = feature_dim
        self.min_tokens, self.max_tokens = min_tokens, max_tokens
        self.min_frames, self.max_frames = min_frames_per_token, max_frames_per_token
        self.transition_frames = transition_frames
        self.noise_std = noise_std
        self.tokenizer = tokenizer
        self.name = name
        proto_gen = torch.Generator().manual_seed(prototype_seed)
        self.prototypes = torch.rand(len(alphabet), feature_dim, generator=proto_gen) * 3.0 - 1.5  # [A, F]

    @classmethod
    def from_config(cls, toy_cfg, split: str, tokenizer: Tokenizer | None = None) -> "ToySeq2SeqDataset":
        """Build the 'train', 'val' or 'test' split described by a ``ToyDataConfig``."""
        num_items = {"train": toy_cfg.num_train, "val": toy_cfg.num_val, "test": toy_cfg.num_test}[split]
        return cls(num_items=num_items, seed=toy_cfg.seed * 7919 + SPLIT_SALT[split],
                   prototype_seed=toy_cfg.seed, alphabet=toy_cfg.alphabet, feature_dim=toy_cfg.feature_dim,
                   min_tokens=toy_cfg.min_tokens, max_tokens=toy_cfg.max_tokens,
                   min_frames_per_token=toy_cfg.min_frames_per_token,
                   max_frames_per_token=toy_cfg.max_frames_per_token,
                   transition_frames=toy_cfg.transition_frames, noise_std=toy_cfg.noise_std,
                   tokenizer=tokenizer, name=f"toy-{split}")

    def __len__(self) -> int:
        return self.num_items

    def _generator(self, index: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + index)

    def _sample_sequence(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """-> symbols [S] (alphabet indices, no immediate repeats), durations [S] (frames)."""
        num = int(torch.randint(self.min_tokens, self.max_tokens + 1, (1,), generator=gen))
        steps = torch.randint(1, len(self.alphabet), (num,), generator=gen)
        steps[0] = torch.randint(0, len(self.alphabet), (1,), generator=gen)
        symbols = torch.cumsum(steps, 0) % len(self.alphabet)  # consecutive symbols always differ
        durations = torch.randint(self.min_frames, self.max_frames + 1, (num,), generator=gen)
        return symbols, durations

    def text(self, index: int) -> str:
        symbols, _ = self._sample_sequence(self._generator(index))
        return "".join(self.alphabet[s] for s in symbols.tolist())

    def texts(self) -> list[str]:
        return [self.text(i) for i in range(self.num_items)]

    def frame_counts(self, epoch: int | None = None) -> list[int]:
        """Number of frames of every item (cheap: no features are made); the same in every epoch."""
        return [int(self._sample_sequence(self._generator(i))[1].sum()) for i in range(self.num_items)]

    def set_epoch(self, epoch: int) -> None:
        """Items do not change between epochs (the dataset interface ManifestDataset also offers)."""

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.num_items:
            raise IndexError(f"{self.name}: index {index} out of range [0, {self.num_items})")
        if self.tokenizer is None:
            raise ValueError(f"{self.name}: a tokenizer is needed to make items")
        gen = self._generator(index)
        symbols, durations = self._sample_sequence(gen)
        frames = self.prototypes[symbols].repeat_interleave(durations, dim=0)  # [T, F]
        features = self._smooth(frames)
        features = features + self.noise_std * torch.randn(features.shape, generator=gen)
        features = features.clamp(-2.0, 2.0)
        text = "".join(self.alphabet[s] for s in symbols.tolist())
        return {
            "id": f"{self.name}-{index:06d}",
            "features": features,
            "tokens": torch.tensor(self.tokenizer.encode(text), dtype=torch.long),
            "text": text,
            "duration_s": features.shape[0] * FRAME_SECONDS,
            "boundaries": torch.cumsum(durations, 0) - 1,
        }

    def _smooth(self, frames: torch.Tensor) -> torch.Tensor:
        """Moving average over time (edges replicated): [T, F] -> [T, F]."""
        width = self.transition_frames
        if width == 0:
            return frames
        x = frames.t().unsqueeze(0)  # [1, F, T]
        x = F.pad(x, (width, width), mode="replicate")
        kernel = torch.full((self.feature_dim, 1, 2 * width + 1), 1.0 / (2 * width + 1))
        return F.conv1d(x, kernel, groups=self.feature_dim)[0].t().contiguous()
