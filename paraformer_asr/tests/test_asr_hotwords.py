"""Hotword biasing (decode/hotwords.py): the list format, the trie's dense tensors, the scorer against a plain walk over
the phrases, both models' searches against exhaustive enumeration, an empty list changing nothing, the options and
eval.py's CLI, the service's ``hotwords`` field, and the recall / precision helper (metrics/hotwords.py)."""

import http.client
import itertools
import json
import math
import random
import uuid
from types import SimpleNamespace

import pytest
import torch

from paraformer_asr.data.audio import write_audio
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.tokenizer import CharTokenizer, build_tokenizer
from paraformer_asr.decode.ar_search import ar_beam_search
from paraformer_asr.decode.beam import factorized_beam_search
from paraformer_asr.decode.hotwords import (Hotword, HotwordScorer, HotwordTrie, merge_hotwords, parse_hotwords,
                                            read_hotwords)
from paraformer_asr.decode.lm_fusion import fused_posterior_beam_search
from paraformer_asr.decode.ngram_lm import TokenNgramLM
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.errors import ConfigError
from paraformer_asr.metrics.hotwords import hotword_scores, phrase_count

from asr_helpers import SPEECH_RATE, call_script, speech_like, tiny_model, untrained_audio_model
from asr_reference import exhaustive_ar_search
from test_asr_ar_search import EOS, A, B, PrefixScriptedModel, ScriptedModel, scripted_inputs

CPU = torch.device("cpu")


def reference_walk(sequence, phrases, boundary=None, gated=None):
    """The biasing of one unit sequence, walked over the phrases themselves (no trie): phrases [(units, weight)],
    ``boundary`` the set of units that keep a completed phrase before them (None: every unit). A unit that keeps the
    current match a prefix of some phrase earns the largest weight of those phrases; one that does not gives back
    what was earned since the last kept phrase and starts again from that unit. A completed phrase is kept (banked)
    when a boundary unit follows it or the sequence ends. ``gated`` (a bool per unit; None: none): a gated unit (one
    the model found implausible) earns nothing, breaks the match and starts none. -> (the total after each unit, the
    total once the sequence ends and an unfinished match is given back)."""
    phrases = [(tuple(units), weight) for units, weight in phrases]

    def weights_through(match):
        return [weight for units, weight in phrases if units[:len(match)] == match]

    match, completed, banked, pending, totals = (), False, 0.0, 0.0, []
    for index, unit in enumerate(sequence):
        if completed and (boundary is None or unit in boundary):
            banked, pending = banked + pending, 0.0
        if gated is not None and gated[index]:
            match, completed, pending = (), False, 0.0
            totals.append(banked)
            continue
        if weights_through(match + (unit,)):
            match = match + (unit,)
        else:
            pending = 0.0
            match = (unit,) if weights_through((unit,)) else ()
        if match:
            pending += max(weights_through(match))
        completed = any(units == match for units, _ in phrases)
        totals.append(banked + pending)
    return totals, banked + (pending if completed else 0.0)


def random_phrases(rng, units, count, longest=4):
    return [([rng.choice(units) for _ in range(rng.randint(1, longest))], rng.choice([0.5, 1.0, 1.5, 2.5]))
            for _ in range(count)]


def bonus_of_extensions(prefix, phrases, vocab, eos=None, boundary=None, gated_prefix=None, gated_next=None):
    """[V]: what each next unit adds to the prefix's running total under :func:`reference_walk` (eos: what ending
    there adds, the unfinished match given back). ``gated_prefix``: the prefix's gated units; ``gated_next`` [V]: the
    next units that are gated (None: none)."""
    gated_prefix = gated_prefix or [False] * len(prefix)
    before = reference_walk(prefix, phrases, boundary, gated_prefix)[0][-1] if prefix else 0.0
    next_gated = [bool(gated_next[unit]) if gated_next is not None else False for unit in range(vocab)]
    out = torch.tensor([reference_walk(prefix + [unit], phrases, boundary, gated_prefix + [next_gated[unit]])[0][-1]
                        - before for unit in range(vocab)])
    if eos is not None:
        out[eos] = reference_walk(prefix, phrases, boundary, gated_prefix)[1] - before
    return out


# ----------------------------------------------------------------------------- the list format


def test_a_list_reads_phrases_weights_comments_and_blank_lines():
    lines = ["# names", "", "Kessler", "new   york\t3.5", "  lidar  ", "#\tnot a phrase", "kessler\t0.25"]
    entries = parse_hotwords(lines, 1.5, "list.txt")
    assert [(e.phrase, e.weight) for e in entries] == [("Kessler", 1.5), ("new york", 3.5), ("lidar", 1.5),
                                                       ("kessler", 0.25)]
    assert entries[1].where == "list.txt, line 4"
    assert merge_hotwords(entries[:2], [Hotword("Kessler", 9.0)]) == (Hotword("Kessler", 9.0),
                                                                    Hotword("new york", 3.5))
    assert parse_hotwords(["# only a comment", "   "], 1.0, "x") == ()


@pytest.mark.parametrize("line, problem", [("kessler\tmany", "must be a number, got 'many'"),
                                           ("kessler\t-1", "must be a finite number > 0, got -1.0"),
                                           ("kessler\tnan", "must be a finite number > 0"),
                                           ("kessler\t0", "must be a finite number > 0"),
                                           ("\t2.0", "no phrase before the tab")])
def test_a_bad_line_is_an_error_naming_the_file_and_line(tmp_path, line, problem):
    path = tmp_path / "names.txt"
    path.write_text(f"lidar\n{line}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"hotword file {path}, line 2: .*{problem}"):
        read_hotwords(path, 2.0)
    with pytest.raises(ConfigError, match=f"cannot read the hotword file {tmp_path / 'missing.txt'}"):
        read_hotwords(tmp_path / "missing.txt", 2.0)
    with pytest.raises(ConfigError, match="default hotword weight must be a finite number > 0"):
        parse_hotwords(["lidar"], 0.0, "x")


# ----------------------------------------------------------------------------- the trie


def test_the_trie_tensors_of_a_small_list():
    """Phrases 4 5 (weight 2), 4 5 6 (weight 1), 6 4 (weight 3) over 8 ids: node 1 = '4' (2, the larger weight of
    the phrases through it), 2 = '4 5' (an end with a child: its 4 kept by the next unit, every unit a boundary
    here), 3 = '4 5 6' (a leaf end: the root's row; 1 pending since '4 5' was kept), 4 = '6', 5 = '6 4'."""
    trie = HotwordTrie.from_units([([4, 5], 2.0), ([4, 5, 6], 1.0), ([6, 4], 3.0)], vocab_size=8)
    root_row = [0, 0, 0, 0, 1, 0, 4, 0]
    assert trie.next_node.tolist() == [root_row, [0, 0, 0, 0, 1, 2, 4, 0], [0, 0, 0, 0, 1, 0, 3, 0], root_row,
                                       [0, 0, 0, 0, 5, 0, 4, 0], root_row]
    assert trie.parent.tolist() == [-1, 0, 1, 2, 0, 4]
    assert trie.unit_bonus.tolist() == [0.0, 2.0, 2.0, 1.0, 3.0, 3.0]
    assert trie.pending.tolist() == [0.0, 2.0, 4.0, 1.0, 3.0, 6.0]
    within_words = HotwordTrie.from_units([([4, 5], 2.0), ([4, 5, 6], 1.0)], 8, boundary=torch.arange(8) != 6)
    assert within_words.pending.tolist() == [0.0, 2.0, 4.0, 5.0]  # '6' goes on in the word of '4 5': nothing kept
    assert trie.is_end.tolist() == [False, False, True, True, False, True]
    assert trie.num_phrases == 3 and trie.max_unit_bonus == 3.0 and not trie.is_empty
    empty = HotwordTrie.from_units([], vocab_size=8)
    assert empty.is_empty and empty.num_phrases == 0 and empty.next_node.shape == (1, 8)
    assert torch.equal(empty.step_bonus(empty.initial_state(3)), torch.zeros(3, 8))
    with pytest.raises(ValueError, match="at least one unit"):
        HotwordTrie.from_units([([], 1.0)], vocab_size=8)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        HotwordTrie.from_units([([9], 1.0)], vocab_size=8)


def test_phrases_are_split_into_the_checkpoints_own_units():
    chars = CharTokenizer.build(["kessler and lidar", "new york"])
    entries = parse_hotwords(["kessler", "new york\t3"], 1.0, "list")
    trie = HotwordTrie.build(entries, chars)
    assert trie.num_phrases == 2 and trie.num_nodes == 1 + len("kessler") + len("new york")
    assert trie.entries == entries and trie.vocab_size == chars.vocab_size
    node = trie.initial_state(1)
    for unit in chars.encode("new york"):
        node = trie.advance(node, torch.tensor([unit]))
    assert bool(trie.is_end[node])
    texts = ["turn the lights on", "turn the lights off", "call kessler now", "play the music"] * 3
    pieces = build_tokenizer("bpe", texts, 40)
    units = pieces.encode("kessler")
    trie = HotwordTrie.build(parse_hotwords(["kessler"], 1.0, "list"), pieces)
    assert trie.num_nodes == 1 + len(units) and trie.vocab_size == pieces.vocab_size
    with pytest.raises(ConfigError, match=r"list, line 2: 'zürich' has characters the model's units cannot write: "
                                          r"'c' 'h' 'z' 'ü'"):
        HotwordTrie.build(parse_hotwords(["kessler", "zürich"], 1.0, "list"), chars)


@pytest.mark.parametrize("seed", range(6))
def test_the_scorer_equals_a_walk_over_the_phrases_for_every_next_unit(seed):
    """Random tiny vocabularies and lists; every prefix of random sequences, batched as rows: the bonus the trie
    gives each of the V next units (and, at a row's end, with the unfinished match given back) is the change of the
    plain walk's total."""
    rng = random.Random(seed)
    vocab = rng.randint(3, 6)
    phrases = random_phrases(rng, list(range(vocab)), rng.randint(1, 5))
    boundary = {unit for unit in range(vocab) if rng.random() < 0.5}  # the others go on within a word
    trie = HotwordTrie.from_units(phrases, vocab, torch.tensor([unit in boundary for unit in range(vocab)]))
    sequences = torch.tensor([[rng.randrange(vocab) for _ in range(7)] for _ in range(12)])  # [R, 7]
    gates = torch.rand(12, 7, vocab, generator=torch.Generator().manual_seed(seed)) < 0.3  # implausible units
    gates[:4] = False  # rows without a gate: what a trie without a margin gives
    state = trie.initial_state(sequences.shape[0])
    for position in range(sequences.shape[1]):
        prefixes = sequences[:, :position].tolist()
        ending = torch.arange(sequences.shape[0]) % 2 == 0  # half of the rows end here
        bonus = trie.step_bonus(state, ending, plausible=~gates[:, position])  # [R, V]
        for row, prefix in enumerate(prefixes):
            gated_prefix = [bool(gates[row, i, unit]) for i, unit in enumerate(prefix)]
            gated_next = gates[row, position]
            expected = bonus_of_extensions(prefix, phrases, vocab, boundary=boundary, gated_prefix=gated_prefix,
                                           gated_next=gated_next)
            if ending[row]:
                expected = torch.tensor([reference_walk(prefix + [u], phrases, boundary,
                                                        gated_prefix + [bool(gated_next[u])])[1] for u in range(vocab)])
                expected -= reference_walk(prefix, phrases, boundary, gated_prefix)[0][-1] if prefix else 0.0
            assert torch.allclose(bonus[row], expected, atol=1e-6), (phrases, boundary, prefix)
        chosen = sequences[:, position]
        state = trie.advance(state, chosen, ~gates[:, position].gather(1, chosen.unsqueeze(1)).squeeze(1))


def test_partial_matches_are_given_back_and_completed_ones_kept():
    trie = HotwordTrie.from_units([([4, 5, 6], 1.0)], vocab_size=8)
    state, total = trie.initial_state(1), 0.0
    for unit in [4, 5, 7, 4, 5, 6, 4]:  # '4 5' broken by 7, then '4 5 6' completed, then '4' pending
        total += float(trie.step_bonus(state)[0, unit])
        state = trie.advance(state, torch.tensor([unit]))
    assert total == 4.0  # 3 kept + 1 pending
    assert float(trie.step_bonus(state)[0, EOS]) == -1.0  # ending gives the pending unit back: 3 in all


def test_a_listed_word_inside_a_longer_word_is_given_back():
    """BPE pieces: 'statin' is kept before a new word or the end, given back when its word goes on ('statinon'),
    and the special ids (eos) are boundaries."""
    texts = ["we talked about statin at lunch", "the station was on time", "on and on"] * 4
    pieces = build_tokenizer("bpe", texts, 40)
    trie = HotwordTrie.build(parse_hotwords(["statin\t2"], 1.0, "list"), pieces)
    word = pieces.encode("statin")
    boundary = trie.boundary.tolist()
    assert boundary[pieces.eos_id] and boundary[pieces.encode("at")[0]] and not any(boundary[unit] for unit in word[1:])

    def total(units, ending=True):
        state, earned = trie.initial_state(1), 0.0
        for index, unit in enumerate(units):
            last = torch.tensor([ending and index == len(units) - 1])
            earned += float(trie.step_bonus(state, last)[0, unit])
            state = trie.advance(state, torch.tensor([unit]))
        return earned

    assert total(word) == 2.0 * len(word)  # ends the hypothesis: kept
    assert total(word + pieces.encode("at")) == 2.0 * len(word)  # a new word follows: kept
    assert total(word + [pieces.eos_id], ending=False) == 2.0 * len(word)  # the autoregressive model's eos: kept
    continued = [unit for unit in pieces.encode("statinon")]
    assert continued[:len(word)] == word and total(continued) == 0.0  # the word goes on: given back


# ----------------------------------------------------------------------------- the Paraformer's search


@pytest.mark.parametrize("margin", [None, 1.0])
@pytest.mark.parametrize("seed", range(4))
def test_factorised_search_with_biasing_is_exhaustive_search_plus_the_reference_bonus(seed, margin):
    """V = 5, lengths 3 and 2, a beam of V ** 2 (no prefix is ever pruned): the k best sequences and their scores are
    those of all V ** N sequences scored by log-probs + the walk's final bonus; alone and fused with an LM; with a
    margin, the units whose log-prob is more than it below their position's best are gated in the walk."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    vocab = 5
    log_probs = torch.log_softmax(torch.randn(2, 3, vocab) * 1.5, dim=-1)
    token_mask = torch.tensor([[True, True, True], [True, True, False]])
    phrases = random_phrases(rng, list(range(1, vocab)), 3, longest=3)
    trie = HotwordTrie.from_units(phrases, vocab, margin=margin)
    lm = TokenNgramLM(2, vocab, bos_id=1, eos_id=2, pad_id=0).fit([[3, 4, 3], [4, 4], [3, 3, 4]])
    beam = vocab ** 2
    scorer = HotwordScorer(trie, token_mask.sum(dim=1).repeat_interleave(beam), log_probs)
    gated = torch.zeros_like(log_probs, dtype=torch.bool) if margin is None else \
        log_probs < log_probs.max(dim=-1, keepdim=True).values - margin  # [B, N, V]
    for lm_weight in (0.0, 0.7):
        if lm_weight:
            tokens, scores = fused_posterior_beam_search(log_probs, token_mask, beam, 0, lm, lm_weight, scorer)
        else:
            tokens, scores = factorized_beam_search(log_probs, token_mask, beam, 0, state_scorer=scorer)
        for b, length in enumerate((3, 2)):
            every = []
            for sequence in itertools.product(range(vocab), repeat=length):
                total = sum(float(log_probs[b, i, unit]) for i, unit in enumerate(sequence))
                total += reference_walk(list(sequence), phrases,
                                        gated=[bool(gated[b, i, unit]) for i, unit in enumerate(sequence)])[1]
                if lm_weight:  # the LM never predicts pad (0) or bos (1)
                    total += lm_weight * (lm.score_sequence(sequence, include_eos=True)
                                          if {0, 1}.isdisjoint(sequence) else float("-inf"))
                every.append((total, sequence))
            every.sort(key=lambda pair: -pair[0])
            assert [tuple(tokens[b, k, :length].tolist()) for k in range(5)] == [seq for _, seq in every[:5]]
            assert scores[b, :5].tolist() == pytest.approx([score for score, _ in every[:5]], abs=1e-4)
            assert bool((tokens[b, torch.isfinite(scores[b]), length:] == 0).all())  # the beams that exist


def test_a_biased_phrase_that_was_second_best_becomes_best_in_the_factorised_search():
    probs = torch.full((1, 2, 6), 1e-6)
    probs[0, 0, A], probs[0, 0, B], probs[0, 1, A], probs[0, 1, B] = 0.6, 0.4, 0.55, 0.45
    log_probs, token_mask = probs.log(), torch.ones(1, 2, dtype=torch.bool)
    plain, _ = factorized_beam_search(log_probs, token_mask, 2, 0)
    assert plain[0].tolist() == [[A, A], [A, B]]
    trie = HotwordTrie.from_units([([A, B], 0.5)], 6)
    for beam in (1, 2):  # beam 1 with biasing is what greedy decoding with hotwords runs
        biased, scores = factorized_beam_search(log_probs, token_mask, beam, 0,
                                                state_scorer=HotwordScorer(trie, torch.tensor([2] * beam)))
        assert biased[0, 0].tolist() == [A, B]
        assert float(scores[0, 0]) == pytest.approx(math.log(0.6) + math.log(0.45) + 1.0, abs=1e-5)


# ----------------------------------------------------------------------------- the autoregressive search


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("length_penalty,margin", [(0.0, None), (1.0, None), (1.0, 1.0)])
def test_a_wide_beam_with_biasing_finds_what_exhaustive_search_finds(seed, length_penalty, margin):
    """Random prefix tables, max lengths 3 and 2, a beam of 4 ** 3 with biasing toward random phrases over the
    emittable ids: the best hypothesis and its score are exhaustive search's over log-probs plus the walk's bonus
    (eos gives back an unfinished match), found although the bonus can make a longer hypothesis win (the stopping
    rule allows for the bonus still to come); with a margin, the walk gates the units the decoder found more than it
    below its step's best."""
    rng = random.Random(100 + seed)
    model = PrefixScriptedModel(seed)
    phrases = random_phrases(rng, [3, A, B], 3, longest=3)
    trie = HotwordTrie.from_units(phrases, 6, margin=margin)
    frames = [3, 2]
    encoder_out, enc_mask = scripted_inputs(frames)
    encoder_out[:, :, 0] = torch.arange(len(frames)).unsqueeze(1)
    tokens, scores, lengths = ar_beam_search(model, encoder_out, enc_mask, 64, length_penalty=length_penalty,
                                             hotwords=trie)
    for b, max_length in enumerate(frames):
        def gates(utterance, prefix):  # [V] bool: the units gated after ``prefix``
            step = model.next_log_probs(utterance, prefix)
            return torch.zeros(6, dtype=torch.bool) if margin is None else step < step.max() - margin

        def biased(prefix, utterance=b):
            gated_prefix = [bool(gates(utterance, prefix[:i])[unit]) for i, unit in enumerate(prefix)]
            return model.next_log_probs(utterance, prefix) + bonus_of_extensions(
                prefix, phrases, 6, EOS, gated_prefix=gated_prefix, gated_next=gates(utterance, prefix))

        brute = exhaustive_ar_search(biased, max_length, EOS, [3, A, B], length_penalty)
        assert tokens[b, 0, :lengths[b, 0]].tolist() == brute[0][1]
        assert float(scores[b, 0]) == pytest.approx(brute[0][0], abs=1e-5)
        by_tokens = {tuple(hypothesis): score for score, hypothesis in brute}
        found = [tuple(tokens[b, k, :lengths[b, k]].tolist()) for k in range(64) if math.isfinite(float(scores[b, k]))]
        assert scores[b, :len(found)].tolist() == pytest.approx([by_tokens[f] for f in found], abs=1e-5)


def test_the_bonus_still_to_come_keeps_the_ar_search_going():
    """Step 0: eos 0.9, b 0.1, then 'a' is likely and eos last. Unbiased, [] ends first and nothing can beat it; with
    'a a' worth 3 a unit, [b, a, a] wins (exhaustive search says so), although when [] ends the live [b] scores far
    below it: the stopping rule must count the bonus [b] can still earn."""
    table = [[0, 0, 0.9, 0, 0, 0.1], [0, 0, 0.05, 0, 0.9, 0.05], [0, 0, 0.05, 0, 0.9, 0.05], [0, 0, 0.9, 0, 0.05, 0.05]]
    model = ScriptedModel(table)
    phrases = [([A, A], 3.0)]
    encoder_out, enc_mask = scripted_inputs([3])
    plain, _, lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size=2)
    assert lengths[0, 0] == 0
    def biased(prefix):
        return model.table[len(prefix)] + bonus_of_extensions(prefix, phrases, 6, EOS)

    brute = exhaustive_ar_search(biased, 3, EOS, [3, A, B], 1.0)
    assert brute[0][1] == [B, A, A]
    tokens, scores, lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size=2,
                                             hotwords=HotwordTrie.from_units(phrases, 6))
    assert tokens[0, 0, :lengths[0, 0]].tolist() == [B, A, A]
    assert float(scores[0, 0]) == pytest.approx(brute[0][0], abs=1e-5)


def test_a_biased_phrase_that_was_second_best_becomes_best_in_the_ar_search():
    # step 0: a 0.58, b 0.40; then eos 0.9: [a] is best, [b] second
    model = ScriptedModel([[0, 0, 0.02, 0, 0.58, 0.40], [0, 0, 0.9, 0, 0.05, 0.05]])
    encoder_out, enc_mask = scripted_inputs([4])
    plain, _, _ = ar_beam_search(model, encoder_out, enc_mask, beam_size=2)
    assert plain[0, :, 0].tolist() == [A, B]
    for beam in (1, 2):
        biased, scores, lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size=beam,
                                                 hotwords=HotwordTrie.from_units([([B], 0.5)], 6))
        assert biased[0, 0, :lengths[0, 0]].tolist() == [B]
        assert float(scores[0, 0]) == pytest.approx((math.log(0.4) + 0.5 + math.log(0.9)) / 2, abs=1e-5)


# ----------------------------------------------------------------------------- both models, real networks


@pytest.fixture(scope="module", params=["paraformer", "transformer_ar"])
def model_and_batch(request):
    cfg, data, model = tiny_model(request.param)
    loaded = SimpleNamespace(cfg=cfg, model=model, tokenizer=data.tokenizer)  # what search_arguments reads
    return loaded, Collator(data.tokenizer.pad_id)([data.val[i] for i in range(4)])


def test_an_empty_list_changes_nothing(model_and_batch, tmp_path):
    """An empty trie handed to every search (beam, greedy, with length candidates) gives the same tokens and scores
    bit for bit; an empty (comments only) file gives no trie at all."""
    loaded, batch = model_and_batch
    model, tokenizer = loaded.model, loaded.tokenizer
    empty = HotwordTrie.from_units([], tokenizer.vocab_size)
    plain = model.beam_search(batch.features, batch.feat_mask, 3)
    for got, expected in zip(model.beam_search(batch.features, batch.feat_mask, 3, hotwords=empty), plain):
        assert torch.equal(got, expected)
    for method in ("greedy", "beam"):
        for candidates in ((0, 1) if model.cfg.type == "paraformer" else (0,)):
            arguments = dict(method=method, beam_size=3, length_candidates=candidates)
            expected, _ = transcribe_batches(model, [batch], CPU, **arguments)
            got, _ = transcribe_batches(model, [batch], CPU, **arguments, hotwords=empty)
            assert [(t.hyp_tokens, t.score) for t in got] == [(t.hyp_tokens, t.score) for t in expected]
    path = tmp_path / "empty.txt"
    path.write_text("# nothing listed yet\n\n", encoding="utf-8")
    options = DecodingOptions(hotwords=read_hotwords(path, 2.0))
    assert options.hotwords == () and options.search_arguments(loaded)["hotwords"] is None


def test_the_phrase_of_the_second_beam_becomes_the_paraformers_best_and_candidates_keep_its_bonus():
    """The tiny untrained Paraformer: listing its second beam's tokens (weight 5 a unit) makes them the best beam,
    in beam search and in greedy decoding (beam 1 with biasing). With length candidates, listing the chosen
    hypothesis keeps it and adds the weight to its score per token (w x N bonus over N tokens)."""
    _, data, model = tiny_model("paraformer")
    batch = Collator(data.tokenizer.pad_id)([data.val[i] for i in range(4)])
    beams, _, lengths = model.beam_search(batch.features, batch.feat_mask, 2)
    second = beams[0, 1, :lengths[0, 1]].tolist()
    trie = HotwordTrie.from_units([(second, 5.0)], data.tokenizer.vocab_size)
    biased, _, _ = model.beam_search(batch.features, batch.feat_mask, 2, hotwords=trie)
    assert biased[0, 0, :len(second)].tolist() == second
    greedy, _ = transcribe_batches(model, [batch], CPU, method="greedy", hotwords=trie)
    assert greedy[0].hyp_tokens == second
    plain, _ = transcribe_batches(model, [batch], CPU, method="greedy", length_candidates=1)
    chosen = HotwordTrie.from_units([(plain[0].hyp_tokens, 0.75)], data.tokenizer.vocab_size)
    again, _ = transcribe_batches(model, [batch], CPU, method="greedy", length_candidates=1, hotwords=chosen)
    assert again[0].hyp_tokens == plain[0].hyp_tokens
    assert again[0].score == pytest.approx(plain[0].score + 0.75, abs=1e-5)


# ----------------------------------------------------------------------------- options, eval.py


def test_bad_hotword_files_stop_eval_and_infer_with_exit_code_2_naming_the_file(tmp_path):
    """The list is read with the options, before any checkpoint is loaded."""
    bad = tmp_path / "names.txt"
    bad.write_text("kessler\nlidar\tlots\n", encoding="utf-8")
    for script in ("eval.py", "infer.py"):
        result = call_script(script, "--checkpoint", tmp_path / "none.pt", "--hotwords", bad, cwd=tmp_path,
                             check=False)
        assert result.returncode == 2
        assert f"error: hotword file {bad}, line 2: the weight after the tab must be a number" in result.stderr
    result = call_script("eval.py", "--checkpoint", tmp_path / "none.pt", "--hotwords", tmp_path / "gone.txt",
                         cwd=tmp_path, check=False)
    assert result.returncode == 2 and f"cannot read the hotword file {tmp_path / 'gone.txt'}" in result.stderr
    result = call_script("eval.py", "--checkpoint", tmp_path / "none.pt", "--hotword-weight", "-2", cwd=tmp_path,
                         check=False)
    assert result.returncode == 2 and "--hotword-weight must be a finite number > 0, got -2.0" in result.stderr


def test_eval_reports_hotword_recall_and_precision_on_a_manifest_with_the_field(tmp_path):
    """An untrained model (its texts arbitrary), a manifest whose lines list their hotwords: the scores carry the
    list's size and the helper's figures over the predictions."""
    from paraformer_asr.decode.longform import LongFormOptions
    from paraformer_asr.training.evaluation import evaluate_checkpoint

    loaded = untrained_audio_model()
    lines = []
    for index, (text, spoken) in enumerate([("12 345", ["345"]), ("678", []), ("9 345 0", ["345", "0"])]):
        write_audio(tmp_path / f"u{index}.wav", speech_like(0.8, index), SPEECH_RATE)
        lines.append(json.dumps({"audio": f"u{index}.wav", "text": text, "hotwords": spoken}))
    manifest = tmp_path / "rare.jsonl"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    listed = parse_hotwords(["345", "0\t1.0", "77"], 2.0, "list")
    result, predictions = evaluate_checkpoint(loaded, CPU, "test", str(manifest), LongFormOptions(),
                                              DecodingOptions(method="beam", beam_size=2, hotwords=listed))
    expected = hotword_scores([p["ref"] for p in predictions], [p["hyp"] for p in predictions],
                              [["345"], [], ["345", "0"]], ["345", "0", "77"])
    assert result["hotwords"] == 3 and result["hotword_references"] == 3
    assert {key: result[key] for key in expected} == expected
    plain, _ = evaluate_checkpoint(loaded, CPU, "test", str(manifest), LongFormOptions(), DecodingOptions())
    assert "hotword_recall" not in plain and "hotwords" not in plain


# ----------------------------------------------------------------------------- the service's field


@pytest.fixture(scope="module")
def service():
    pytest.importorskip("fastapi", reason="the ASR service needs the optional 'serve' extra")
    pytest.importorskip("uvicorn", reason="the ASR service needs the optional 'serve' extra")
    from paraformer_asr.serving.app import create_app
    from paraformer_asr.serving.settings import ServeSettings

    from asr_helpers import served

    loaded = untrained_audio_model()
    settings = ServeSettings(max_audio_seconds=10.0, max_wait_ms=5.0, max_hotword_bytes=64, max_hotwords=3)
    with served(create_app(loaded, settings)) as url:
        yield url, loaded, settings


def post_with_hotwords(url: str, audio: bytes, hotwords: str | None) -> tuple[int, dict]:
    from paraformer_asr_tools.benchmarks.service_load import loopback_address, request_json

    boundary = uuid.uuid4().hex
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            f"Content-Type: audio/wav\r\n\r\n").encode() + audio + b"\r\n"
    if hotwords is not None:
        body += (f'--{boundary}\r\nContent-Disposition: form-data; name="hotwords"\r\n\r\n{hotwords}\r\n').encode()
    body += f"--{boundary}--\r\n".encode()
    connection = http.client.HTTPConnection(*loopback_address(url), timeout=60)
    try:
        return request_json(connection, "POST", "/transcribe", body, f"multipart/form-data; boundary={boundary}")
    finally:
        connection.close()


def wav(seconds: float, seed: int) -> bytes:
    import io

    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, speech_like(seconds, seed).numpy(), SPEECH_RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def test_the_service_field_biases_the_request_and_bad_fields_get_400(service):
    url, loaded, settings = service
    audio = wav(1.0, 3)
    status, plain = post_with_hotwords(url, audio, None)
    assert status == 200 and plain["text"] != "" and set(plain["text"]) != {"0"}
    status, biased = post_with_hotwords(url, audio, "0\t50")  # '0' worth 50 a unit: every character but spaces
    assert status == 200 and set(biased["text"].replace(" ", "")) == {"0"}
    status, same = post_with_hotwords(url, audio, "# nothing\n")
    assert status == 200 and same["text"] == plain["text"]
    for field, problem in [("0\tlots", "the hotwords field, line 1: the weight after the tab must be a number, got "
                                      "'lots' (phrase<TAB>weight)"),
                           ("1\n2\n3\n4", "the hotwords field lists 4 phrases; the limit is 3"),
                           ("9" * 65, "the hotwords field holds 65 bytes; the limit is 64"),
                           ("12\nab", "the hotwords field, line 2: 'ab' has characters the model's units cannot "
                                      "write: 'a' 'b'")]:
        status, answer = post_with_hotwords(url, audio, field)
        assert status == 400 and answer["detail"] == problem, answer


def test_the_transcriber_decodes_each_list_apart_and_each_answer_is_its_own():
    """Four utterances, two with a list of their own (the same list, decoded together), two without: each gets what
    it gets decoded alone with its list."""
    from paraformer_asr.loaded_model import features_from_waveform
    from paraformer_asr.serving.batcher import GreedyTranscriber

    loaded = untrained_audio_model()
    transcriber = GreedyTranscriber(loaded, CPU)
    features = [features_from_waveform(speech_like(0.6 + 0.2 * i, i), loaded) for i in range(4)]
    trie = HotwordTrie.build(parse_hotwords(["0\t50"], 1.0, "x"), loaded.tokenizer)
    again = HotwordTrie.build(parse_hotwords(["0\t50"], 1.0, "y"), loaded.tokenizer)  # equal list, another object
    lists = [trie, None, again, None]
    together = transcriber([(f, 1.0, hotwords) for f, hotwords in zip(features, lists)])
    alone = [transcriber([(f, 1.0, hotwords)])[0] for f, hotwords in zip(features, lists)]
    assert [r.text for r in together] == [r.text for r in alone]
    assert set(together[0].text) == {"0"} and together[1].text == transcriber([(features[1], 1.0)])[0].text


# ----------------------------------------------------------------------------- recall and precision


def test_phrase_counts_are_whole_words_in_a_row_without_overlap():
    assert phrase_count("call kessler and kessler", "kessler") == 2
    assert phrase_count("kesslers kessler", "kessler") == 1  # whole words only
    assert phrase_count("new york new york", "new york") == 2 and phrase_count("new and york", "new york") == 0
    assert phrase_count("a a a", "a a") == 1 and phrase_count("", "a") == 0
    with pytest.raises(ValueError, match="at least one word"):
        phrase_count("a", " ")


def test_hotword_recall_and_precision_by_hand():
    references = ["call kessler now", "the banner is red", "kessler met brenner", "nothing here"]
    hypotheses = ["call kessler now", "the brenner is red", "kestrel met brenner", "kessler here"]
    spoken = [["kessler"], [], ["kessler", "brenner"], []]
    scores = hotword_scores(references, hypotheses, spoken)
    # spoken: kessler (u0), kessler, brenner (u2): 3, of which kessler (u0) and brenner (u2) are recognised
    # emitted (kessler, brenner): u0 kessler, u1 brenner (a false alarm: 'banner' was said), u2 brenner, u3 kessler
    assert scores == {"hotword_recall": 2 / 3, "hotword_precision": 2 / 4, "hotword_references": 3,
                      "hotword_hits": 2, "hotword_emitted": 4, "hotword_false_alarms": 2}
    listed = hotword_scores(references, hypotheses, spoken, ["kessler", "red"])
    assert listed["hotword_emitted"] == 5 and listed["hotword_false_alarms"] == 2  # 'red' was said where emitted
    nothing = hotword_scores(["a b"], ["a b"], [[]])
    assert nothing["hotword_recall"] is None and nothing["hotword_precision"] is None
    with pytest.raises(ValueError, match="one reference, hypothesis and hotword list per utterance"):
        hotword_scores(["a"], ["a", "b"], [[]])


def test_the_hotword_margin_option_reaches_the_trie_and_bad_values_are_refused():
    chars = CharTokenizer.build(["kessler"])
    options = DecodingOptions(hotword_margin=2.5)
    trie = options.hotword_trie(parse_hotwords(["kessler"], 1.0, "list"), chars)
    assert trie.margin == 2.5 and trie.to("cpu").margin == 2.5
    step = torch.tensor([[0.0, -2.0, -3.0]])
    assert trie.plausible(step).tolist() == [[True, True, False]]
    assert DecodingOptions().hotword_trie((), chars).plausible(step) is None  # no margin: every unit may earn
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="--hotword-margin must be a finite number >= 0"):
            DecodingOptions(hotword_margin=bad)
