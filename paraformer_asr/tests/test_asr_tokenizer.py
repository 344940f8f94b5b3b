"""Tokenizers: characters and sentencepiece subwords behind one interface; round trips, special ids, deterministic
training, a soft vocabulary limit, unknown characters, plain-data storage, and the word rule of pieces() (decode/timestamps.py group_words)."""

import io
import json
import logging

import pytest
import torch

from paraformer_asr.data.setup import check_vocabulary
from paraformer_asr.data.tokenizer import (WORD_START, CharTokenizer, SentencePieceTokenizer, begins_word,
                                           build_tokenizer, tokenizer_from_dict)
from paraformer_asr.decode.timestamps import group_words
from paraformer_asr.errors import CheckpointError, DataError

from asr_helpers import PackageLog

CORPUS = [
    "turn the kitchen lights on", "turn the lights off, please", "what's the weather like today?",
    "set a timer for ten minutes", "play some music in the kitchen", "stop the music!",
    "call mum on her mobile", "is it going to rain tomorrow?", "turn the volume up", "turn the volume down",
]
SUBWORD_KINDS = ["bpe", "unigram"]


def subword(kind, vocab_size=60, with_blank=False, texts=CORPUS):
    return build_tokenizer(kind, texts, vocab_size, with_blank=with_blank)


def test_char_round_trip_and_specials():
    tok = CharTokenizer.build(["hello world", "abc"])
    assert tok.symbols[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and tok.blank_id is None
    for text in ["hello", "a b c", "world hello"]:
        ids = tok.encode(text)
        assert len(ids) == len(text) and all(i >= tok.num_special for i in ids)
        assert tok.decode(ids) == text
    assert tok.encode("ab", add_bos=True, add_eos=True)[0] == tok.bos_id
    assert tok.decode(tok.encode("ab", add_bos=True, add_eos=True) + tok.encode("c")) == "ab"  # stops at eos
    assert tok.encode("z") == [tok.unk_id] and tok.decode([tok.unk_id, tok.pad_id]) == ""


def test_char_blank_and_serialisation():
    tok = CharTokenizer.build(["ba"], with_blank=True)
    assert tok.blank_id == 4 and tok.symbols[4] == "<blank>" and tok.vocab_size == 7
    again = tokenizer_from_dict(tok.to_dict())
    assert isinstance(again, CharTokenizer) and again.symbols == tok.symbols and again.blank_id == 4


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
@pytest.mark.parametrize("with_blank", [False, True])
def test_subword_round_trip_specials_and_fewer_tokens_than_characters(kind, with_blank):
    tok = subword(kind, with_blank=with_blank)
    assert tok.kind == kind and (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.blank_id == (4 if with_blank else None) and tok.num_special == (5 if with_blank else 4)
    assert tok.pieces(range(tok.num_special)) == [""] * tok.num_special  # no surface form, as decode drops them
    for text in CORPUS + ["the music, please!", "what's on today?"]:
        ids = tok.encode(text)
        assert all(tok.num_special <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == text
        assert tok.decode([tok.bos_id, *ids, tok.eos_id, *tok.encode("stop")]) == text  # specials dropped, stops at eos
    assert sum(len(tok.encode(t)) for t in CORPUS) < sum(len(t) for t in CORPUS)


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
def test_subword_training_is_deterministic(kind):
    first, second = subword(kind), subword(kind)
    assert first.model_proto == second.model_proto
    assert first.to_dict() == second.to_dict()
    assert subword(kind, vocab_size=40).model_proto != first.model_proto


@pytest.mark.parametrize("kind", ["char", *SUBWORD_KINDS])
def test_stored_as_plain_data_in_a_weights_only_checkpoint_and_json(kind):
    tok = build_tokenizer(kind, CORPUS, 60, with_blank=True)
    buffer = io.BytesIO()
    torch.save({"tokenizer": tok.to_dict()}, buffer)
    buffer.seek(0)
    stored = torch.load(buffer, weights_only=True)["tokenizer"]
    for data in (stored, json.loads(json.dumps(tok.to_dict()))):
        again = tokenizer_from_dict(data)
        assert type(again) is type(tok) and again.kind == kind and again.vocab_size == tok.vocab_size
        assert again.blank_id == 4
        for text in CORPUS:
            assert again.encode(text) == tok.encode(text) and again.decode(tok.encode(text)) == text


def test_invalid_stored_tokenizers_raise_checkpoint_error():
    good = subword("bpe").to_dict()
    for bad in ({"type": "word"}, {"type": "bpe", "with_blank": False}, {**good, "model": "not base64!"},
                {**good, "model": "AAAA"}, {**good, "with_blank": True}, {"type": "char", "symbols": ["a"]}):
        with pytest.raises(CheckpointError, match="stored tokenizer is invalid"):
            tokenizer_from_dict(bad)


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
def test_vocab_size_is_a_soft_limit_both_ways(kind):
    small_corpus = ["one two", "two one", "three"]
    with PackageLog(logging.INFO) as log:
        tok = subword(kind, vocab_size=5000, texts=small_corpus)
    assert tok.vocab_size < 5000 and f"{tok.vocab_size} tokens (data.vocab_size 5000; the transcripts allow no more)" \
        in log.text
    assert all(tok.decode(tok.encode(t)) == t for t in small_corpus)
    with PackageLog(logging.INFO) as log:
        tiny = subword(kind, vocab_size=6, texts=small_corpus, with_blank=True)
    characters = len(set("onetwothree")) + 1  # + '▁'
    assert tiny.vocab_size == 5 + characters == 13 and "is smaller than the 8 characters" in log.text
    assert all(tiny.decode(tiny.encode(t)) == t for t in small_corpus)


@pytest.mark.parametrize("kind", ["char", *SUBWORD_KINDS])
def test_unknown_characters_map_to_unk_and_are_reported(kind):
    tok = build_tokenizer(kind, CORPUS, 60)
    ids = tok.encode("turn the lights on ЖЖ")
    assert tok.unk_id in ids and tok.decode(ids).startswith("turn the lights on")
    assert tok.unknown_characters(["the music", "Ж music", "volume 9"]) == ["9", "Ж"]
    check_vocabulary(CORPUS, tok, "train.jsonl")
    with pytest.raises(DataError, match=r"test.jsonl: transcripts use characters missing from the model's "
                                        r"vocabulary: '9Ж'"):
        check_vocabulary(["volume 9", "Ж"], tok, "test.jsonl")


@pytest.mark.parametrize("kind", ["char", *SUBWORD_KINDS])
def test_pieces_give_the_words_of_the_text(kind):
    tok = build_tokenizer(kind, CORPUS, 60)
    for text in CORPUS + ["the kitchen, please!"]:
        ids = tok.encode(text)
        pieces = tok.pieces(ids)
        assert len(pieces) == len(ids) and all(isinstance(p, str) and p for p in pieces)
        assert [word for word, _, _ in group_words(pieces)] == text.split()
        assert tok.pieces(torch.tensor(ids)) == pieces
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.pieces([tok.vocab_size])


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
def test_digits_are_always_pieces_of_their_own(kind):
    """Digit strings are spoken digit by digit: however frequent a digit pair, it never becomes one piece."""
    strings = ["407", "4040", "12", "121212", "40", "999"] * 30
    tok = build_tokenizer(kind, strings + ["set a timer for 10 minutes"] * 30, 64)
    for text in ("4040", "121212", "set a timer for 10 minutes"):
        digits = [piece for piece in tok.pieces(tok.encode(text)) if any(c.isdigit() for c in piece)]
        assert all(len(piece.replace(WORD_START, "")) == 1 for piece in digits)
        assert len(digits) == sum(c.isdigit() for c in text) and tok.decode(tok.encode(text)) == text


def test_subword_pieces_carry_the_word_start_marker():
    tok = subword("bpe")
    pieces = tok.pieces(tok.encode("turn the music"))
    assert pieces[0].startswith(WORD_START) and sum(p.startswith(WORD_START) for p in pieces) == 3


def test_empty_transcripts_cannot_build_a_tokenizer():
    for kind in ("char", *SUBWORD_KINDS):
        with pytest.raises(DataError, match="training transcripts are empty"):
            build_tokenizer(kind, ["", "  "] if kind != "char" else [""], 50)


def test_sentencepiece_tokenizer_checks_its_special_pieces():
    plain = subword("bpe")
    with pytest.raises(ValueError, match="first pieces must be"):
        SentencePieceTokenizer(plain.model_proto, "bpe", with_blank=True)


def test_begins_word_follows_the_word_rule():
    """A ▁ piece starts a word, a whitespace or ▁-only piece separates words, the empty piece of a special id and a
    piece inside a word do neither."""
    assert [begins_word(piece) for piece in ["\u2581stat", "\u2581", " ", "in", "", "k"]] == \
        [True, True, True, False, False, False]


def test_a_vocabulary_of_few_words_becomes_whole_word_units_and_a_larger_one_keeps_its_bpe():
    texts = ["red fish left", "blue horse", "left red seven", "yellow fish blue", "seven horse yellow"] * 4
    words = sorted({word for text in texts for word in text.split()})
    whole = build_tokenizer("bpe", texts, 16, with_blank=True, word_units_max=len(words))
    assert all(len(whole.encode(word)) == 1 for word in words)
    assert [len(whole.encode(text)) for text in texts] == [len(text.split()) for text in texts]
    assert whole.decode(whole.encode("yellow horse left")) == "yellow horse left"
    plain = build_tokenizer("bpe", texts, 16, with_blank=True)
    over = build_tokenizer("bpe", texts, 16, with_blank=True, word_units_max=len(words) - 1)
    assert over.model_proto == plain.model_proto  # one word too many: the plain BPE of vocab_size
    assert any(len(plain.encode(word)) > 1 for word in words)
