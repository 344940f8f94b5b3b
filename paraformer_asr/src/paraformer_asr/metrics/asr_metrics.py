"""Edit-distance based recognition metrics (CER, WER) and token/sequence/length accuracy.

CER and WER are corpus-level: Levenshtein distances summed over the set divided by the summed
reference lengths (characters / whitespace-separated words).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def _codes(reference: Sequence, hypothesis: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Both sequences as integer arrays (equal items, equal codes)."""
    vocabulary: dict = {}
    ref = np.array([vocabulary.setdefault(item, len(vocabulary)) for item in reference], dtype=np.int32)
    hyp = np.array([vocabulary.setdefault(item, len(vocabulary)) for item in hypothesis], dtype=np.int32)
    return ref, hyp


def _next_row(previous: np.ndarray, ref_item: int, hyp: np.ndarray, i: int) -> np.ndarray:
    """Row i of the Levenshtein table from row i - 1, vectorised over the hypothesis [M + 1].

    cur[j] = min(prev[j] + 1, prev[j - 1] + (ref != hyp[j - 1]), cur[j - 1] + 1): with base[j] the first two
    terms (base[0] = i), cur[j] = min over k <= j of base[k] + (j - k), a running minimum of base[k] - k."""
    base = np.empty_like(previous)
    base[0] = i
    base[1:] = np.minimum(previous[1:] + 1, previous[:-1] + (hyp != ref_item))
    offsets = np.arange(previous.shape[0], dtype=np.int32)
    return np.minimum.accumulate(base - offsets) + offsets


def edit_distance(reference: Sequence, hypothesis: Sequence) -> int:
    """Levenshtein distance (substitutions, insertions, deletions all cost 1): the table row by row, each row
    vectorised (long transcripts of whole recordings stay fast; memory: two rows)."""
    ref, hyp = _codes(reference, hypothesis)
    row = np.arange(hyp.shape[0] + 1, dtype=np.int32)
    for i, ref_item in enumerate(ref, start=1):
        row = _next_row(row, ref_item, hyp, i)
    return int(row[-1])


def matched_pairs(reference: Sequence, hypothesis: Sequence) -> list[tuple[int, int]]:
    """Index pairs (i, j) with reference[i] == hypothesis[j] on one minimum-edit-distance alignment (the
    correctly recognised items), in order. Ties prefer a match, then a substitution, deletion, insertion.
    The table ([N + 1, M + 1] int32) is filled row by row as in :func:`edit_distance`."""
    ref, hyp = _codes(reference, hypothesis)
    rows, cols = ref.shape[0], hyp.shape[0]
    cost = np.empty((rows + 1, cols + 1), dtype=np.int32)
    cost[0] = np.arange(cols + 1)
    for i in range(1, rows + 1):
        cost[i] = _next_row(cost[i - 1], ref[i - 1], hyp, i)
    pairs = []
    i, j = rows, cols
    while i > 0 and j > 0:
        same = ref[i - 1] == hyp[j - 1]
        if cost[i, j] == cost[i - 1, j - 1] + (not same):
            if same:
                pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif cost[i, j] == cost[i - 1, j] + 1:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def word_boundary_errors(ref_words: Sequence[dict], hyp_words: Sequence[dict]) -> list[float]:
    """|start difference| and |end difference| in ms of every correctly recognised word (words aligned by edit
    distance on their text). Words: ``{"word", "start_ms", "end_ms"}``."""
    pairs = matched_pairs([w["word"] for w in ref_words], [w["word"] for w in hyp_words])
    errors = []
    for i, j in pairs:
        errors += [abs(hyp_words[j]["start_ms"] - ref_words[i]["start_ms"]),
                   abs(hyp_words[j]["end_ms"] - ref_words[i]["end_ms"])]
    return errors


@dataclass
class RecognitionScores:
    cer: float
    wer: float
    token_accuracy: float
    sequence_accuracy: float
    length_accuracy: float
    count_error_mean: float
    num_utterances: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def score_transcripts(references: Sequence[Sequence[int]], hypotheses: Sequence[Sequence[int]],
                      ref_texts: Sequence[str], hyp_texts: Sequence[str]) -> RecognitionScores:
    """Scores over a set.

    references / hypotheses: token-id sequences (no specials); ref_texts / hyp_texts: decoded
    text. token_accuracy = position-wise matching tokens / reference tokens (positions past the
    shorter sequence count as errors); sequence_accuracy = exact token matches / utterances;
    length_accuracy = utterances whose predicted token count equals the reference count; count_error_mean = the
    mean of (predicted - reference) token counts (signed: below 0, the model drops tokens).
    """
    count = len(references)
    if count == 0:
        return RecognitionScores(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    char_errors = sum(edit_distance(r, h) for r, h in zip(ref_texts, hyp_texts))
    char_total = sum(len(r) for r in ref_texts)
    word_errors = sum(edit_distance(r.split(), h.split()) for r, h in zip(ref_texts, hyp_texts))
    word_total = sum(len(r.split()) for r in ref_texts)
    matches = sum(sum(a == b for a, b in zip(r, h)) for r, h in zip(references, hypotheses))
    token_total = sum(len(r) for r in references)
    return RecognitionScores(
        cer=char_errors / max(char_total, 1),
        wer=word_errors / max(word_total, 1),
        token_accuracy=matches / max(token_total, 1),
        sequence_accuracy=sum(list(r) == list(h) for r, h in zip(references, hypotheses)) / count,
        length_accuracy=sum(len(r) == len(h) for r, h in zip(references, hypotheses)) / count,
        count_error_mean=sum(len(h) - len(r) for r, h in zip(references, hypotheses)) / count,
        num_utterances=count,
    )
