from paraformer_asr.metrics import edit_distance, score_transcripts


def test_edit_distance():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "") == 3 and edit_distance("abc", "abc") == 0
    assert edit_distance(["a", "b"], ["b"]) == 1


def test_scores_are_corpus_level():
    refs, hyps = ["abcd", "ef"], ["abed", "e"]
    ids = lambda texts: [[ord(c) for c in t] for t in texts]  # noqa: E731
    s = score_transcripts(ids(refs), ids(hyps), refs, hyps)
    assert s.cer == 2 / 6  # (1 + 1) / (4 + 2), not the mean of per-utterance rates
    assert s.wer == 1.0 and s.sequence_accuracy == 0.0
    assert s.token_accuracy == 4 / 6 and s.length_accuracy == 0.5 and s.num_utterances == 2


def test_matched_pairs_follow_a_minimum_edit_alignment():
    from paraformer_asr.metrics import matched_pairs

    assert matched_pairs("abcd", "abcd") == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert matched_pairs("abcd", "axcd") == [(0, 0), (2, 2), (3, 3)]  # b -> x substituted
    assert matched_pairs("abcd", "acd") == [(0, 0), (2, 1), (3, 2)]  # b deleted
    assert matched_pairs("acd", "abcd") == [(0, 0), (1, 2), (2, 3)]  # b inserted
    assert matched_pairs([], ["a"]) == [] and matched_pairs(["a"], []) == []


def test_word_boundary_errors_count_starts_and_ends_of_correct_words_only():
    from paraformer_asr.metrics import word_boundary_errors

    def timed(*entries):
        return [{"word": w, "start_ms": s, "end_ms": e} for w, s, e in entries]

    ref = timed(("four", 100, 400), ("zero", 600, 900), ("seven", 1100, 1500))
    hyp = timed(("four", 120, 380), ("two", 600, 900), ("seven", 1050, 1500))
    assert word_boundary_errors(ref, hyp) == [20, 20, 50, 0]  # 'zero' was misrecognised: not counted
    hyp = timed(("four", 100, 400), ("seven", 1110, 1490))  # 'zero' dropped
    assert word_boundary_errors(ref, hyp) == [0, 0, 10, 10]


def test_vectorised_edit_distance_and_alignment_equal_the_cell_by_cell_table():
    import random

    from paraformer_asr.metrics import matched_pairs

    from asr_reference import loop_edit_table, loop_matched_pairs

    rng = random.Random(0)
    for _ in range(60):
        ref = [rng.choice("abcd") for _ in range(rng.randint(0, 25))]
        hyp = [rng.choice("abcde") for _ in range(rng.randint(0, 25))]
        assert edit_distance(ref, hyp) == loop_edit_table(ref, hyp)[-1][-1]
        assert matched_pairs(ref, hyp) == loop_matched_pairs(ref, hyp)
    words = ["one", "two", 3, (4,)]  # any hashable items
    assert edit_distance(words, words[::-1]) == loop_edit_table(words, words[::-1])[-1][-1]
