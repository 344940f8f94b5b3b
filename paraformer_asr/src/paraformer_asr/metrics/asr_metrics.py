"""Edit-distance based recognition metrics (CER, WER) and token/sequence/length accuracy.

CER and WER are corpus-level: Levenshtein distances summed over the set divided by the summed
reference lengths (characters / whitespace-separated words).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


def edit_distance(reference: Sequence, hypothesis: Sequence) -> int:
    """Levenshtein distance (substitutions, insertions, deletions all cost 1), one row at a time."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref_item in enumerate(reference, start=1):
        current = [i] + [0] * len(hypothesis)
        for j, hyp_item in enumerate(hypothesis, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref_item != hyp_item))
        previous = current
    return previous[-1]


def matched_pairs(reference: Sequence, hypothesis: Sequence) -> list[tuple[int, int]]:
    """Index pairs (i, j) with reference[i] == hypothesis[j] on one minimum-edit-distance alignment (the
    correctly recognised items), in order. Ties prefer a match, then a substitution, deletion, insertion."""
    rows, cols = len(reference), len(hypothesis)
    cost = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows + 1):
        for j in range(cols + 1):
            if i == 0 or j == 0:
                cost[i][j] = i + j
            else:
                cost[i][j] = min(cost[i - 1][j] + 1, cost[i][j - 1] + 1,
                                 cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]))
    pairs = []
    i, j = rows, cols
    while i > 0 and j > 0:
        same = reference[i - 1] == hypothesis[j - 1]
        if cost[i][j] == cost[i - 1][j - 1] + (not same):
            if same:
                pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif cost[i][j] == cost[i - 1][j] + 1:
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
    num_utterances: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def score_transcripts(references: Sequence[Sequence[int]], hypotheses: Sequence[Sequence[int]],
                      ref_texts: Sequence[str], hyp_texts: Sequence[str]) -> RecognitionScores:
    """Scores over a set.

    references / hypotheses: token-id sequences (no specials); ref_texts / hyp_texts: decoded
    text. token_accuracy = position-wise matching tokens / reference tokens (positions past the
    shorter sequence count as errors); sequence_accuracy = exact token matches / utterances;
    length_accuracy = utterances whose predicted token count equals the reference count.
    """
    count = len(references)
    if count == 0:
        return RecognitionScores(0.0, 0.0, 0.0, 0.0, 0.0, 0)
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
        num_utterances=count,
    )
