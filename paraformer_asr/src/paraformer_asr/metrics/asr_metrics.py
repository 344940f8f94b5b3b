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
