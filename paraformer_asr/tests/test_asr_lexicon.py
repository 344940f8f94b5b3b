"""Lexicon-constrained decoding (decode/lexicon.py): the automaton against a plain reading of every short unit
sequence (characters and sentencepiece pieces), the constrained factorised search against exhaustive enumeration, the
unconstrained fallback, the hotword composition, the options (the autoregressive baseline refused) and eval.py."""

import itertools
import json
import math
from types import SimpleNamespace

import pytest
import torch

from paraformer_asr.data.batching import Collator
from paraformer_asr.data.setup import training_transcripts
from paraformer_asr.data.tokenizer import WORD_START, CharTokenizer, SentencePieceTokenizer
from paraformer_asr.decode.beam import factorized_beam_search
from paraformer_asr.decode.hotwords import HotwordTrie
from paraformer_asr.decode.lexicon import DEAD, START, LexiconAutomaton, LexiconScorer, lexicon_words
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.paraformer_search import ParaformerDecoding
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.errors import ConfigError

from asr_helpers import call_script, tiny_model

CPU = torch.device("cpu")
WORDS = ["ab", "ba", "a", "bab"]


def char_tokenizer():
    return CharTokenizer.build(["ab ba", "a bab"])


def spelled_sentence(tokenizer, units, lexicon) -> bool:
    """The reference: every unit has a surface string, and their text (``▁`` a space, one leading space allowed) is
    non-empty words of ``lexicon`` separated by single spaces."""
    pieces = tokenizer.pieces(units)
    if any(piece == "" for piece in pieces):
        return False
    text = "".join(pieces).replace(WORD_START, " ")
    text = text[1:] if text.startswith(" ") else text
    return all(word in lexicon for word in text.split(" "))  # "" (empty text, doubled or trailing space) is no word


def walk(next_state: list[list[int]], units) -> int:
    state = START
    for unit in units:
        state = next_state[state][unit]
    return state


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_the_automaton_accepts_exactly_the_sentences_of_known_words(kind):
    """Every unit sequence of 1..4 units over the tiny vocabulary (specials included): accepted exactly when its text
    is a sentence of lexicon words; an accepted sequence decodes to those words; DEAD stays DEAD."""
    if kind == "char":
        tokenizer = char_tokenizer()
    else:
        tokenizer = SentencePieceTokenizer.train(["cat dog", "dog cat", "cow", "cat cow dog", "go"], "bpe", 14)
    words = WORDS if kind == "char" else ["cat", "dog", "cow", "go", "cot"]
    automaton = LexiconAutomaton.build(words, tokenizer)
    assert automaton.next_state.shape == (automaton.num_states, tokenizer.vocab_size)
    assert automaton.next_state[DEAD].eq(DEAD).all()
    table, accepting = automaton.next_state.tolist(), automaton.accepting.tolist()
    accepted = 0
    for length in range(1, 5):
        for units in itertools.product(range(tokenizer.vocab_size), repeat=length):
            expected = spelled_sentence(tokenizer, units, set(words))
            assert accepting[walk(table, units)] == expected, (units, tokenizer.pieces(units))
            if expected:
                accepted += 1
                assert tokenizer.decode(list(units)).split() == "".join(tokenizer.pieces(units)).replace(
                    WORD_START, " ").split()
    assert accepted > 10  # the test saw sentences, not only dead ends
    sentence, misspelt = ("ba ab", "ba abb") if kind == "char" else ("cot dog", "cot dogg")
    assert automaton.accepts(tokenizer.encode(sentence)) and not automaton.accepts(tokenizer.encode(misspelt))
    assert not automaton.accepts([])


def test_the_lexicon_is_the_training_words_and_bad_words_are_refused():
    assert lexicon_words(["ab  ba", " a ab\n"]) == ["a", "ab", "ba"]
    with pytest.raises(ValueError, match="non-empty without whitespace"):
        LexiconAutomaton.build(["a b"], char_tokenizer())


def exhaustive_best(log_probs, length, accepts, top):
    """The ``top`` best (score, units) of exactly ``length`` units that ``accepts`` takes, by enumeration."""
    vocab = log_probs.shape[-1]
    found = [(float(sum(log_probs[i, u] for i, u in enumerate(units))), list(units))
             for units in itertools.product(range(vocab), repeat=length) if accepts(units)]
    return sorted(found, key=lambda item: -item[0])[:top]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_constrained_search_finds_the_best_sentences_of_exactly_n_units(seed):
    """Random log-probs, lengths 4, 3, 1: with a beam wide enough to keep every prefix, the constrained factorised
    search's beams are the best valid sequences of exactly N units, with their scores, by enumeration."""
    tokenizer = char_tokenizer()
    automaton = LexiconAutomaton.build(WORDS, tokenizer)
    generator = torch.Generator().manual_seed(seed)
    vocab, beam = tokenizer.vocab_size, 400
    log_probs = torch.log_softmax(torch.randn(3, 4, vocab, generator=generator), dim=-1)  # [B, N, V]
    lengths = torch.tensor([4, 3, 1])
    token_mask = torch.arange(4).unsqueeze(0) < lengths.unsqueeze(1)  # [B, N]
    scorer = LexiconScorer(automaton, lengths.repeat_interleave(beam))
    tokens, scores = factorized_beam_search(log_probs, token_mask, beam, tokenizer.pad_id, state_scorer=scorer)
    for row, length in enumerate(lengths.tolist()):
        expected = exhaustive_best(log_probs[row], length, automaton.accepts, 3)
        assert expected, "every length here has a sentence"
        for rank, (score, units) in enumerate(expected):
            assert tokens[row, rank, :length].tolist() == units
            assert float(scores[row, rank]) == pytest.approx(score, abs=1e-5)
        assert tokens[row, 0, length:].eq(tokenizer.pad_id).all()


class Decoding(ParaformerDecoding):
    pad_id = 0


def test_an_utterance_without_a_sentence_of_its_length_keeps_the_unconstrained_result():
    """Lexicon {ab}: one unit cannot spell it, so that utterance gets the plain search's beams; the other (two
    units) is held to 'ab' even where the posteriors prefer 'ba'. Counted as candidates of one utterance, the row that
    has a sentence keeps the utterance constrained, the other row -inf."""
    tokenizer = char_tokenizer()
    automaton = LexiconAutomaton.build(["ab"], tokenizer)
    a, b = tokenizer.encode("ab")
    log_probs = torch.full((2, 2, tokenizer.vocab_size), -9.0)
    log_probs[:, 0, b], log_probs[:, 1, a] = -0.1, -0.1  # 'ba' is the posteriors' choice
    log_probs[:, 0, a], log_probs[:, 1, b] = -2.0, -2.0
    num_tokens = torch.tensor([2, 1])
    extraction = SimpleNamespace(num_tokens=num_tokens, token_mask=torch.arange(2) < num_tokens.unsqueeze(1))
    decoding = Decoding()
    plain, plain_scores = decoding._search_posteriors(log_probs, extraction, 2, None, 0.0)
    beams, scores = decoding._search_posteriors(log_probs, extraction, 2, None, 0.0, lexicon=automaton)
    assert beams[0, 0].tolist() == [a, b] and float(scores[0, 0]) == pytest.approx(-4.0)
    assert torch.equal(beams[1], plain[1]) and torch.equal(scores[1], plain_scores[1])
    assert beams[1, 0, 0].item() == b
    grouped, grouped_scores = decoding._search_posteriors(log_probs, extraction, 2, None, 0.0, lexicon=automaton,
                                                          rows_per_utterance=2)
    assert grouped[0, 0].tolist() == [a, b] and grouped_scores[1, 0] == float("-inf")


def test_hotwords_and_a_lexicon_sum_their_terms():
    """A hotword bonus on 'ba' (weight 3 a unit) turns the constrained choice from 'ab' to 'ba', both lexicon words;
    the bonus is part of the score."""
    tokenizer = char_tokenizer()
    automaton = LexiconAutomaton.build(WORDS, tokenizer)
    a, b = tokenizer.encode("ab")
    log_probs = torch.full((1, 2, tokenizer.vocab_size), -9.0)
    log_probs[0, 0, a], log_probs[0, 1, b] = -0.1, -0.1
    log_probs[0, 0, b], log_probs[0, 1, a] = -2.0, -2.0
    extraction = SimpleNamespace(num_tokens=torch.tensor([2]), token_mask=torch.ones(1, 2, dtype=torch.bool))
    trie = HotwordTrie.build([SimpleNamespace(phrase="ba", weight=3.0, where="")], tokenizer)
    beams, scores = Decoding()._search_posteriors(log_probs, extraction, 1, None, 0.0, trie, automaton)
    assert beams[0, 0].tolist() == [b, a] and float(scores[0, 0]) == pytest.approx(-4.0 + 6.0)


def lengths_with_a_sentence(automaton, longest: int) -> set[int]:
    """The unit counts up to ``longest`` that some accepted sequence has (states reachable in exactly n units)."""
    table, accepting = automaton.next_state.tolist(), automaton.accepting.tolist()
    states, found = {START}, set()
    for length in range(1, longest + 1):
        states = {table[state][unit] for state in states for unit in range(automaton.vocab_size)} - {DEAD}
        if any(accepting[state] for state in states):
            found.add(length)
    return found


def test_the_paraformer_decodes_known_words_and_the_baseline_is_refused():
    """The tiny untrained Paraformer on toy data: greedy and beam decoding with the lexicon of its training
    transcripts give sentences of those words wherever the counted length has one (and the plain result elsewhere);
    the autoregressive baseline is refused by the options (ConfigError naming --lexicon) and by its search."""
    cfg, data, model = tiny_model("paraformer")
    batch = Collator(data.tokenizer.pad_id)([data.val[i] for i in range(8)])
    loaded = SimpleNamespace(cfg=cfg, model=model, tokenizer=data.tokenizer)
    search = DecodingOptions(method="beam", beam_size=3, lexicon=True).search_arguments(loaded)
    automaton = search["lexicon"]
    assert list(automaton.words) == lexicon_words(training_transcripts(cfg))
    possible = lengths_with_a_sentence(automaton, 12)
    plain, _ = transcribe_batches(model, [batch], CPU, method="greedy")
    for method in ("greedy", "beam"):
        transcripts, _ = transcribe_batches(model, [batch], CPU, **{**search, "method": method})
        for transcript, unconstrained in zip(transcripts, plain):
            length = len(transcript.hyp_tokens)
            assert length == len(unconstrained.hyp_tokens)  # one pass, the extractor's count
            assert automaton.accepts(transcript.hyp_tokens) == (length in possible)
            if method == "greedy" and length not in possible:
                assert transcript.hyp_tokens == unconstrained.hyp_tokens
    ar_cfg, ar_data, ar_model = tiny_model("transformer_ar")
    ar_loaded = SimpleNamespace(cfg=ar_cfg, model=ar_model, tokenizer=ar_data.tokenizer)
    with pytest.raises(ConfigError, match="--lexicon needs a Paraformer"):
        DecodingOptions(lexicon=True).search_arguments(ar_loaded)
    with pytest.raises(ValueError, match="lexicon"):
        ar_model.beam_search(batch.features, batch.feat_mask, 2, lexicon=automaton)


def test_eval_with_the_lexicon_writes_only_training_words(tone_checkpoint, tmp_path):
    """eval.py --lexicon on the tone Paraformer (training words 12 3 4 56 7 8 9 10: every count has a sentence, so
    no fallback): the scores say lexicon true and every predicted word is a training word."""
    manifest = tone_checkpoint.parents[3] / "train.jsonl"
    out = call_script("eval.py", "--checkpoint", tone_checkpoint, "--manifest", manifest, "--lexicon",
                      "--save-predictions", tmp_path / "predictions.jsonl", cwd=tmp_path)
    scores = json.loads(out.stdout)
    assert scores["lexicon"] is True and math.isfinite(scores["wer"])
    predictions = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 8
    known = {"12", "3", "4", "56", "7", "8", "9", "10"}
    assert all(set(p["hyp"].split()) <= known and p["hyp"].split() for p in predictions)
