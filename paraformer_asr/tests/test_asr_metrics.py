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
