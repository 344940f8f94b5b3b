"""Hotword recall and precision: how often the listed rare words (names, terms) are recognised where they are
spoken, and how often a hotword is emitted where it was not.

Phrases are counted as runs of whole words (whitespace-separated, as spelled; a phrase of several words must appear
with its words in a row), non-overlapping, left to right.

    recall     = hits / references: over every utterance, the occurrences in its reference of its own hotwords (the
                 manifest's ``hotwords`` field), each recognised when the hypothesis has it as often (min of the two
                 counts per phrase)
    precision  = (emitted - false alarms) / emitted: over the scored phrases (every utterance's hotwords, plus the
                 decoding list's phrases when given), the occurrences in the hypotheses; an occurrence beyond the
                 reference's count of that phrase is a false alarm (e.g. the rare word written where its sound-alike
                 was spoken)

Each rate is None when its denominator is 0 (no hotword spoken; none emitted).
"""

from __future__ import annotations

from typing import Sequence


def phrase_count(text: str, phrase: str) -> int:
    """Non-overlapping occurrences of ``phrase``'s words as consecutive words of ``text``, left to right."""
    words, target = text.split(), phrase.split()
    if not target:
        raise ValueError("a hotword phrase needs at least one word")
    count, index, width = 0, 0, len(target)
    while index + width <= len(words):
        if words[index:index + width] == target:
            count += 1
            index += width
        else:
            index += 1
    return count


def hotword_scores(references: Sequence[str], hypotheses: Sequence[str], spoken: Sequence[Sequence[str]],
                   listed: Sequence[str] = ()) -> dict:
    """references, hypotheses: texts; spoken[i]: the hotwords of utterance i (its manifest ``hotwords``); listed: the
    phrases of the decoding's hotword list (may be empty). -> hotword_recall, hotword_precision (module docstring;
    None when undefined), hotword_references, hotword_hits, hotword_emitted, hotword_false_alarms (counts)."""
    if not len(references) == len(hypotheses) == len(spoken):
        raise ValueError(f"need one reference, hypothesis and hotword list per utterance, got {len(references)}, "
                         f"{len(hypotheses)} and {len(spoken)}")
    scored = dict.fromkeys([phrase for phrases in spoken for phrase in phrases] + list(listed))
    if any(not phrase.split() for phrase in scored):
        raise ValueError("a hotword phrase needs at least one word")
    references_total = hits = emitted = false_alarms = 0
    for reference, hypothesis, own in zip(references, hypotheses, spoken):
        for phrase in dict.fromkeys(own):
            in_reference = phrase_count(reference, phrase)
            references_total += in_reference
            hits += min(in_reference, phrase_count(hypothesis, phrase))
        hypothesis_words = set(hypothesis.split())
        for phrase in scored:
            if phrase.split()[0] not in hypothesis_words:  # most listed phrases: not emitted at all
                continue
            in_hypothesis = phrase_count(hypothesis, phrase)
            emitted += in_hypothesis
            false_alarms += max(in_hypothesis - phrase_count(reference, phrase), 0)
    return {"hotword_recall": hits / references_total if references_total else None,
            "hotword_precision": (emitted - false_alarms) / emitted if emitted else None,
            "hotword_references": references_total, "hotword_hits": hits, "hotword_emitted": emitted,
            "hotword_false_alarms": false_alarms}
