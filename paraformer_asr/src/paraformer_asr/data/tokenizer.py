"""Tokenizers: characters, or subword units (BPE / unigram) learned with sentencepiece from training transcripts.

One interface for every kind (:class:`Tokenizer`). Ids: ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, ``<unk>``=3, then
``<blank>``=4 when built with ``with_blank=True`` (CTC), then the regular tokens: the characters in sorted order
(``char``), or the sentencepiece pieces (``bpe``, ``unigram``). ``to_dict()`` is plain data (the sentencepiece model
travels as a base64 string), stored in every checkpoint and in the run folder's ``tokenizer.json``;
:func:`tokenizer_from_dict` restores any kind from it alone.

``pieces(ids)`` gives the surface string of each id: the character for ``char``, the piece with its ``▁`` word-start
marker for sentencepiece, ``""`` for special ids (no surface form: ``decode`` drops them too). Words are read from
pieces with one rule for every kind (``decode/timestamps.py``, ``group_words``): an empty piece adds nothing; a piece
that is only whitespace or only ``▁`` separates words; a piece starting with ``▁`` starts a new word; a word's text is
the concatenation of its pieces with ``▁`` removed.

Subword training (:meth:`SentencePieceTokenizer.train`) is deterministic (one thread, every sentence, no sampling),
covers every character of the transcripts (``character_coverage`` 1.0, identity normalisation) and treats
``vocab_size`` (all ids, specials included) as a soft limit: a corpus with fewer possible pieces gets the vocabulary
it allows, and a size below the characters plus specials is raised to that minimum; both are logged. Characters never
seen in training encode to ``<unk>``. Digits are always pieces of their own (``split_digits``): a digit string is
spoken digit by digit, and pieces such as ``40`` would tie the token count to which digit pairs happen to be
frequent instead of to what is said.
"""

from __future__ import annotations

import base64
import io
import logging
from abc import ABC, abstractmethod
from typing import Iterable, Sequence

import sentencepiece
import torch

from paraformer_asr.errors import CheckpointError, DataError

PAD, BOS, EOS, UNK, BLANK = "<pad>", "<bos>", "<eos>", "<unk>", "<blank>"
WORD_START = "\u2581"  # '▁', sentencepiece's word-start marker
TOKENIZER_KINDS = ("char", "bpe", "unigram")

logger = logging.getLogger("paraformer_asr")


def begins_word(piece: str) -> bool:
    """Whether the text after a piece's start is a new word (the module docstring's rule): a piece that starts with
    ``▁``, or one that is only whitespace and/or ``▁`` (a separator). The empty piece of a special id is neither."""
    return bool(piece) and (piece.startswith(WORD_START) or not piece.replace(WORD_START, "").strip())


def special_symbols(with_blank: bool) -> list[str]:
    return [PAD, BOS, EOS, UNK] + ([BLANK] if with_blank else [])


class Tokenizer(ABC):
    """Text <-> token ids. Subclasses provide the regular tokens; specials and padding are handled here."""

    kind: str
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, with_blank: bool) -> None:
        self.with_blank = bool(with_blank)
        self.blank_id: int | None = 4 if with_blank else None
        self.num_special = len(special_symbols(with_blank))

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, specials included."""

    @abstractmethod
    def _encode_text(self, text: str) -> list[int]:
        """Text -> regular ids (``unk_id`` for what the vocabulary cannot express)."""

    @abstractmethod
    def _decode_regular(self, ids: list[int]) -> str:
        """Regular ids (all >= num_special) -> text."""

    @abstractmethod
    def _regular_piece(self, token_id: int) -> str:
        """Surface string of one regular id."""

    @abstractmethod
    def to_dict(self) -> dict:
        """Plain data (str, int, bool, lists) that :func:`tokenizer_from_dict` turns back into this tokenizer."""

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Text -> ids; no bos/eos unless asked."""
        return ([self.bos_id] if add_bos else []) + self._encode_text(text) + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """Ids -> text; special tokens (``<unk>`` included) are dropped, decoding stops at the first ``<eos>``."""
        return self._decode_regular([i for i in self.until_eos(ids) if self.num_special <= i < self.vocab_size])

    def until_eos(self, ids: Iterable[int] | torch.Tensor) -> list[int]:
        """The ids before the first ``<eos>`` (all of them without one): what :meth:`decode` reads."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return ids[:ids.index(self.eos_id)] if self.eos_id in ids else ids

    def pieces(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """The surface string of each id (see the module docstring for how words are read from them)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for token_id in ids:
            if not 0 <= token_id < self.vocab_size:
                raise ValueError(f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})")
            out.append("" if token_id < self.num_special else self._regular_piece(token_id))
        return out

    def unknown_characters(self, texts: Iterable[str]) -> list[str]:
        """The distinct characters of ``texts`` that encode to ``<unk>``, sorted."""
        return sorted(c for c in {c for text in texts for c in text} if self.unk_id in self._encode_text(c))


class CharTokenizer(Tokenizer):
    """One token per character; the vocabulary is every character of the training transcripts."""

    kind = "char"

    def __init__(self, symbols: Sequence[str], with_blank: bool = False):
        super().__init__(with_blank)
        specials = special_symbols(with_blank)
        if list(symbols[: len(specials)]) != specials:
            raise ValueError(f"symbols must start with the special tokens {specials}")
        if len(set(symbols)) != len(symbols):
            raise ValueError("symbols must be unique")
        self.symbols = list(symbols)
        self.index = {s: i for i, s in enumerate(self.symbols)}

    @classmethod
    def build(cls, texts: Iterable[str], with_blank: bool = False) -> CharTokenizer:
        """Vocabulary = every character seen in ``texts`` (sorted), after the special tokens."""
        chars = sorted({c for text in texts for c in text})
        if not chars:
            raise DataError("cannot build a tokenizer: the training transcripts are empty")
        return cls(special_symbols(with_blank) + chars, with_blank=with_blank)

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def _encode_text(self, text: str) -> list[int]:
        return [self.index.get(c, self.unk_id) for c in text]

    def _decode_regular(self, ids: list[int]) -> str:
        return "".join(self.symbols[i] for i in ids)

    def _regular_piece(self, token_id: int) -> str:
        return self.symbols[token_id]

    def to_dict(self) -> dict:
        return {"type": "char", "symbols": list(self.symbols), "with_blank": self.with_blank}

    @classmethod
    def from_dict(cls, data: dict) -> CharTokenizer:
        try:
            return cls(list(data["symbols"]), with_blank=bool(data["with_blank"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"stored tokenizer is invalid: {exc}") from exc


class SentencePieceTokenizer(Tokenizer):
    """Subword units (``bpe`` or ``unigram``) from a serialized sentencepiece model whose ids 0..3 (4) are the
    package's special tokens."""

    def __init__(self, model_proto: bytes, kind: str, with_blank: bool = False):
        super().__init__(with_blank)
        if kind not in ("bpe", "unigram"):
            raise ValueError(f"sentencepiece tokenizer kind must be 'bpe' or 'unigram', got {kind!r}")
        self.kind = kind
        self.model_proto = bytes(model_proto)
        self.processor = sentencepiece.SentencePieceProcessor(model_proto=self.model_proto)
        expected = ["<pad>", "<s>", "</s>", "<unk>"] + ([BLANK] if with_blank else [])
        found = [self.processor.id_to_piece(i) for i in range(min(len(expected), self.processor.get_piece_size()))]
        if found != expected:
            raise ValueError(f"the sentencepiece model's first pieces must be {expected}, got {found}")

    @classmethod
    def train(cls, texts: Sequence[str], kind: str, vocab_size: int,
              with_blank: bool = False) -> SentencePieceTokenizer:
        """Learn ``kind`` units from ``texts`` with at most ``vocab_size`` ids (soft limit, see the module doc)."""
        texts = [text for text in texts if text.strip()]
        if not texts:
            raise DataError("cannot build a tokenizer: the training transcripts are empty")
        specials = special_symbols(with_blank)
        characters = {c for text in texts for c in text if c != " "} | {WORD_START}
        minimum = len(specials) + len(characters)
        if vocab_size < minimum:
            logger.warning("data.vocab_size %d is smaller than the %d characters of the training transcripts plus "
                           "%d special tokens; using %d", vocab_size, len(characters), len(specials), minimum)
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=model, model_type=kind, vocab_size=max(vocab_size, minimum),
            hard_vocab_limit=False, character_coverage=1.0, normalization_rule_name="identity",
            pad_id=0, bos_id=1, eos_id=2, unk_id=3, control_symbols=[BLANK] if with_blank else [],
            num_threads=1, input_sentence_size=0, shuffle_input_sentence=False, byte_fallback=False, split_digits=True,
            max_sentence_length=max(len(text.encode("utf-8")) for text in texts) + 16, minloglevel=2,
        )
        tokenizer = cls(model.getvalue(), kind, with_blank)
        logger.info("%s tokenizer: %d tokens (data.vocab_size %d%s) from %d transcripts", kind, tokenizer.vocab_size,
                    vocab_size, "" if tokenizer.vocab_size == max(vocab_size, minimum)
                    else "; the transcripts allow no more", len(texts))
        return tokenizer

    @property
    def vocab_size(self) -> int:
        return self.processor.get_piece_size()

    def _encode_text(self, text: str) -> list[int]:
        return self.processor.encode(text)

    def _decode_regular(self, ids: list[int]) -> str:
        return self.processor.decode(ids)

    def _regular_piece(self, token_id: int) -> str:
        return self.processor.id_to_piece(token_id)

    def to_dict(self) -> dict:
        return {"type": self.kind, "model": base64.b64encode(self.model_proto).decode("ascii"),
                "with_blank": self.with_blank, "vocab_size": self.vocab_size}

    @classmethod
    def from_dict(cls, data: dict) -> SentencePieceTokenizer:
        try:
            return cls(base64.b64decode(data["model"], validate=True), data["type"], bool(data["with_blank"]))
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"stored tokenizer is invalid: {exc}") from exc


def build_tokenizer(kind: str, texts: Sequence[str], vocab_size: int, with_blank: bool = False,
                    word_units_max: int = 0) -> Tokenizer:
    """A ``kind`` tokenizer (char / bpe / unigram) learned from ``texts``; ``vocab_size`` only matters for subwords.
    When the texts hold at most ``word_units_max`` distinct words (0: never), subwords learn every merge the texts
    allow, so that each word becomes one unit: a CIF then counts words, not pieces of spellings."""
    if kind == "char":
        return CharTokenizer.build(texts, with_blank=with_blank)
    if kind in ("bpe", "unigram"):
        words = {word for text in texts for word in text.split()}
        if 0 < len(words) <= word_units_max:
            # the specials and every substring of every word with its word-start mark: more than BPE can merge
            whole = len(special_symbols(with_blank)) + sum((len(word) + 1) * (len(word) + 2) // 2 for word in words)
            logger.info("%d distinct words (data.word_units_max %d): each word one unit", len(words), word_units_max)
            vocab_size = max(vocab_size, whole)
        return SentencePieceTokenizer.train(texts, kind, vocab_size, with_blank=with_blank)
    raise ValueError(f"tokenizer kind must be one of {TOKENIZER_KINDS}, got {kind!r}")


def tokenizer_from_dict(data: dict) -> Tokenizer:
    """Any tokenizer from its ``to_dict()`` (as stored in checkpoints and ``tokenizer.json``)."""
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "char":
        return CharTokenizer.from_dict(data)
    if kind in ("bpe", "unigram"):
        return SentencePieceTokenizer.from_dict(data)
    raise CheckpointError(f"stored tokenizer is invalid: unknown type {kind!r} (expected one of {TOKENIZER_KINDS})")
