"""Character tokenizer with special tokens, built from training transcripts.

Ids: ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, ``<unk>``=3, then ``<blank>``=4 when built with
``with_blank=True`` (CTC), then the characters in sorted order. The vocabulary is stored as a
plain dict (``to_dict``) in every checkpoint and run folder.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

from paraformer_asr.errors import CheckpointError, DataError

PAD, BOS, EOS, UNK, BLANK = "<pad>", "<bos>", "<eos>", "<unk>", "<blank>"


class CharTokenizer:
    def __init__(self, symbols: Sequence[str], with_blank: bool = False):
        specials = [PAD, BOS, EOS, UNK] + ([BLANK] if with_blank else [])
        if list(symbols[: len(specials)]) != specials:
            raise ValueError(f"symbols must start with the special tokens {specials}")
        if len(set(symbols)) != len(symbols):
            raise ValueError("symbols must be unique")
        self.symbols = list(symbols)
        self.with_blank = with_blank
        self.index = {s: i for i, s in enumerate(self.symbols)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        self.blank_id = 4 if with_blank else None
        self.num_special = len(specials)

    @classmethod
    def build(cls, texts: Iterable[str], with_blank: bool = False) -> "CharTokenizer":
        """Vocabulary = every character seen in ``texts`` (sorted), after the special tokens."""
        chars = sorted({c for text in texts for c in text})
        if not chars:
            raise DataError("cannot build a tokenizer: the training transcripts are empty")
        specials = [PAD, BOS, EOS, UNK] + ([BLANK] if with_blank else [])
        return cls(specials + chars, with_blank=with_blank)

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def __len__(self) -> int:
        return len(self.symbols)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Text -> ids; unknown characters map to ``<unk>``; no bos/eos unless asked."""
        ids = [self.index.get(c, self.unk_id) for c in text]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """Ids -> text; special tokens are dropped, decoding stops at the first ``<eos>``."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if i == self.eos_id:
                break
            if self.num_special <= i < len(self.symbols):
                out.append(self.symbols[i])
        return "".join(out)

    def pieces(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """Ids -> one surface piece per id: the character, '' for a special token (as ``decode`` drops them).
        Word grouping (decode/timestamps.py) reads words from these: ' ' separates them."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return [self.symbols[i] if i >= self.num_special else "" for i in ids]

    def batch_encode(self, texts: Sequence[str], add_bos: bool = False,
                     add_eos: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """texts -> (tokens [B, S_max] long padded with pad_id, lengths [B] long)."""
        encoded = [self.encode(t, add_bos=add_bos, add_eos=add_eos) for t in texts]
        lengths = torch.tensor([len(e) for e in encoded], dtype=torch.long)
        tokens = torch.full((len(encoded), int(lengths.max()) if encoded else 0), self.pad_id, dtype=torch.long)
        for row, ids in enumerate(encoded):  # per item, not per frame: B small Python ints
            tokens[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return tokens, lengths

    def to_dict(self) -> dict:
        return {"type": "char", "symbols": list(self.symbols), "with_blank": self.with_blank}

    @classmethod
    def from_dict(cls, data: dict) -> "CharTokenizer":
        try:
            return cls(list(data["symbols"]), with_blank=bool(data["with_blank"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"stored tokenizer is invalid: {exc}") from exc
