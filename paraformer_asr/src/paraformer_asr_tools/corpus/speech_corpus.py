"""What the synthetic speech corpus says and in which accents (scripts/make_speech_corpus.py).

Phrases: ``--phrases commands`` reads the built-in set of short voice-assistant commands made by a small template
grammar (:func:`command_phrases`: rooms, devices, numbers, cities, people, actions; lowercase words, no
punctuation); ``--phrases FILE`` reads one phrase per line (:func:`load_phrases`). Each utterance speaks one phrase
drawn uniformly, and its transcript is the phrase. ``--text FILE`` reads any text, one phrase per line, as words
(:func:`load_text`, :func:`normalise_transcript`: lower case, no punctuation).

Words: ``--words keywords`` draws every utterance as 1..K words, with replacement and in any order, from a built-in
list of 30 short words (:data:`KEYWORDS`: colours, animals, directions, yes / no, digits); ``--words FILE`` from one
word per line (:func:`load_words`). The transcript is the words joined by spaces: no phrase list an LM could learn.

Held-out sentences: ``--test-phrases K`` (:func:`hold_out_phrases`) keeps K distinct phrases out of training and
validation, each made only of words that the remaining phrases also speak; the test split speaks only those, so its
sentences are unheard while every word of them is known (:func:`unheard_words` checks the drawn training utterances).

Rare words (the hotword test set): ``--rare-words names`` speaks carrier sentences (:data:`RARE_CARRIERS`) with one
slot, filled in training and validation with common words (:data:`COMMON_FILLERS`) and in the test split with rare
words, 8 surnames and 8 technical terms (:data:`RARE_WORDS`), each paired with a common word that sounds alike (its
distractor, heard often in training); ``--rare-words FILE`` reads ``rare<TAB>distractor`` lines instead. Half of the
rare words (drawn from the seed) are spoken ``--rare-train-count`` times in training, the others never
(:func:`rare_word_set`). Every manifest line lists the rare words it speaks in a field ``hotwords`` (eval.py's hotword
recall and precision).

Accents: an espeak-ng voice is an accent plus a speaker variant. Speaker variants are always split between train,
val and test; accents are shared unless some are held out (:func:`split_accents`): an accent given for val or test
is spoken only in that split, never in training, so a model is chosen and tested on accents it has not heard.
``--train-accents`` narrows training (and the splits that hold none out) to the accents it names.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paraformer_asr.errors import DataError

BUILT_IN_PHRASES = "commands"
BUILT_IN_WORDS = "keywords"
KEYWORDS = [
    "red", "green", "blue", "yellow", "black", "white",  # colours
    "cat", "dog", "bird", "fish", "horse", "cow",  # animals
    "up", "down", "left", "right", "north", "south",  # directions
    "yes", "no",
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",  # digits
]

_ROOMS = ["kitchen", "bedroom", "living room", "bathroom", "office", "hallway", "garage"]
_SWITCHABLE = ["lights", "lamp", "fan", "heater", "radio", "television"]
_OPENABLE = ["front door", "back door", "garage door", "windows", "blinds"]
_NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "fifteen",
            "twenty", "thirty", "forty", "sixty"]
_TIME_UNITS = ["seconds", "minutes", "hours"]
_WHEN = ["today", "tomorrow", "tonight", "this weekend"]
_CITIES = ["paris", "london", "berlin", "tokyo", "madrid", "rome", "boston", "chicago", "toronto", "sydney", "dublin",
           "oslo"]
_PEOPLE = ["mom", "dad", "alice", "bob", "emma", "james", "sarah", "david", "olivia", "the doctor"]
_GENRES = ["jazz", "rock music", "classical music", "the news"]
_TASKS = ["buy milk", "water the plants", "take out the trash", "feed the cat"]
_ITEMS = ["milk", "eggs", "bread", "apples", "coffee", "rice", "cheese"]
_SHORT = ["stop", "pause the music", "resume the music", "turn up the volume", "turn down the volume",
          "mute the television", "what time is it", "cancel the timer", "good night", "play the next song",
          "how long is left on the timer"]


def _expand(template: str, **slots: list[str]) -> list[str]:
    """Every filling of ``template``'s ``{slot}`` fields with the given values, in order."""
    names = sorted(slots)
    return [template.format(**dict(zip(names, values))) for values in itertools.product(*(slots[n] for n in names))]


def command_phrases() -> list[str]:
    """The built-in command phrases: distinct, sorted, lowercase words separated by single spaces."""
    phrases = [
        *_expand("turn {state} the {room} {device}", state=["on", "off"], room=_ROOMS, device=_SWITCHABLE[:3]),
        *_expand("switch {state} the {device} in the {room}", state=["on", "off"], device=_SWITCHABLE[3:],
                 room=_ROOMS[:4]),
        *_expand("{action} the {thing}", action=["open", "close"], thing=_OPENABLE),
        *_expand("{action} the {door}", action=["lock", "unlock"], door=_OPENABLE[:3]),
        *_expand("set a timer for {number} {unit}", number=_NUMBERS, unit=_TIME_UNITS),
        *_expand("what is the weather {when} in {city}", when=_WHEN, city=_CITIES),
        *_expand("set the {room} temperature to {number} degrees", room=_ROOMS[:4], number=_NUMBERS[-6:-1]),
        *_expand("dim the {room} lights to {number} percent", room=_ROOMS[:4], number=_NUMBERS[-4:]),
        *_expand("{verb} {person}", verb=["call", "send a message to"], person=_PEOPLE),
        *_expand("play {genre} in the {room}", genre=_GENRES, room=_ROOMS[:3]),
        *_expand("remind me to {task} {when}", task=_TASKS, when=_WHEN[:3]),
        *_expand("add {item} to the shopping list", item=_ITEMS),
        *_expand("how long does it take to drive to {city}", city=_CITIES[:8]),
        *_expand("what time is it in {city}", city=_CITIES),
        *_SHORT,
    ]
    return sorted(set(phrases))


def normalise_phrase(text: str) -> str:
    """Runs of whitespace -> one space, no leading or trailing space."""
    return " ".join(text.split())


def load_phrases(spec: str) -> list[str]:
    """``commands`` -> :func:`command_phrases`; otherwise ``spec`` is a UTF-8 text file with one phrase per line
    (blank lines skipped, spacing normalised, duplicates kept: they weight the draw). DataError names the file."""
    if spec == BUILT_IN_PHRASES:
        return command_phrases()
    path = Path(spec)
    lines = _text_lines(path, "phrase", BUILT_IN_PHRASES)
    phrases = [normalise_phrase(line) for line in lines if line.strip()]
    if not phrases:
        raise DataError(f"phrase file {path} holds no phrase (one phrase per line)")
    return phrases


def normalise_transcript(text: str) -> str:
    """Any text -> its lower-case words joined by single spaces: accents dropped (café -> cafe), punctuation and
    symbols between words dropped, apostrophes kept inside words ("It's 5 o'clock." -> "it's 5 o'clock")."""
    decomposed = unicodedata.normalize("NFKD", text.lower().replace("\u2019", "'"))
    plain = "".join(char for char in decomposed if not unicodedata.combining(char))
    return " ".join(re.findall(r"[a-z0-9]+(?:'[a-z0-9]+)*", plain))


def load_text(path: Path) -> list[str]:
    """``--text FILE``: one phrase per line, each normalised (:func:`normalise_transcript`); lines left empty are
    skipped, duplicates kept (they weight the draw). DataError names the file."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read text file {path}: {err} (give a UTF-8 text file with one phrase per "
                        f"line)") from None
    phrases = [phrase for phrase in map(normalise_transcript, lines) if phrase]
    if not phrases:
        raise DataError(f"text file {path} holds no words (one phrase per line)")
    return phrases


def _text_lines(path: Path, kind: str, built_in: str) -> list[str]:
    """The lines of a UTF-8 text file of one `kind` (phrase, word) per line; DataError names the file."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read {kind} file {path}: {err} (give a text file with one {kind} per line, or "
                        f"'{built_in}' for the built-in {kind}s)") from None


def load_words(spec: str) -> list[str]:
    """``keywords`` -> :data:`KEYWORDS`; otherwise ``spec`` is a UTF-8 text file with one word per line (blank lines
    skipped, surrounding spaces stripped, duplicates dropped, first-seen order). DataError names the file, or the
    line that holds more than one word."""
    if spec == BUILT_IN_WORDS:
        return list(KEYWORDS)
    path = Path(spec)
    lines = _text_lines(path, "word", BUILT_IN_WORDS)
    words = []
    for number, line in enumerate(lines, start=1):
        if len(line.split()) > 1:
            raise DataError(f"word file {path}, line {number}: one word per line, got {line.strip()!r}")
        if line.strip() and line.strip() not in words:
            words.append(line.strip())
    if not words:
        raise DataError(f"word file {path} holds no word (one word per line)")
    return words


def parse_accent_list(text: str | None, option: str, known: list[str]) -> list[str]:
    """'en-029,en-gb-scotland' -> ['en-029', 'en-gb-scotland'], each checked against ``known``; None -> []."""
    if text is None:
        return []
    accents = [name.strip() for name in text.split(",") if name.strip()]
    if not accents:
        raise DataError(f"{option} needs at least one accent, got {text!r}")
    unknown = [name for name in accents if name not in known]
    if unknown:
        raise DataError(f"{option}: unknown accent(s) {', '.join(unknown)} (known: {', '.join(known)})")
    if len(set(accents)) != len(accents):
        raise DataError(f"{option} names an accent twice: {text!r}")
    return accents


def split_accents(accents: list[str], val_accents: list[str], test_accents: list[str],
                  train_accents: list[str] | None = None) -> dict[str, list[str]]:
    """The accents each split draws from. Held-out val / test accents are spoken only in their split; the others
    (or only ``train_accents`` where given) are spoken in training and, where a split holds none out, in that split
    too. Keeps ``accents``' order."""
    overlap = sorted(set(val_accents) & set(test_accents))
    if overlap:
        raise DataError(f"an accent cannot be held out for both val and test: {', '.join(overlap)}")
    held_out = set(val_accents) | set(test_accents)
    overlap = sorted(set(train_accents or []) & held_out)
    if overlap:
        raise DataError(f"an accent cannot be both trained on and held out: {', '.join(overlap)}")
    train = [name for name in accents if name not in held_out and (not train_accents or name in train_accents)]
    if not train:
        raise DataError("every accent is held out for val or test: training needs at least one")
    return {
        "train": train,
        "val": [name for name in accents if name in val_accents] if val_accents else train,
        "test": [name for name in accents if name in test_accents] if test_accents else train,
    }


def hold_out_phrases(phrases: list[str], count: int, seed: int) -> tuple[list[str], list[str]]:
    """``phrases`` -> (the phrases training and validation draw from, the ``count`` distinct phrases only the test
    split speaks). Candidates are taken in an order drawn from ``seed``; one is held out when every word of it is
    still spoken by a phrase left for training. DataError when fewer than ``count`` can be held out that way."""
    distinct = sorted(set(phrases))
    if not 1 <= count < len(distinct):
        raise DataError(f"--test-phrases must be between 1 and {len(distinct) - 1} (the distinct phrases but one), "
                        f"got {count}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 11]))
    speakers = Counter(word for phrase in distinct for word in set(phrase.split()))  # word -> phrases speaking it
    held_out = []
    for index in rng.permutation(len(distinct)):
        phrase = distinct[index]
        words = set(phrase.split())
        if all(speakers[word] > 1 for word in words):
            held_out.append(phrase)
            speakers.subtract(words)
            if len(held_out) == count:
                break
    if len(held_out) < count:
        raise DataError(f"--test-phrases {count}: only {len(held_out)} phrases can be held out with every word of "
                        f"them still spoken in training")
    unheard = set(held_out)
    return [phrase for phrase in phrases if phrase not in unheard], sorted(held_out)


def unheard_words(training_texts: list[str], test_texts: list[str]) -> list[str]:
    """The words of ``test_texts`` that no text of ``training_texts`` speaks, sorted."""
    return sorted(set(phrase_vocabulary(test_texts)) - set(phrase_vocabulary(training_texts)))


def phrase_vocabulary(phrases: list[str]) -> list[str]:
    """The distinct words of ``phrases``, sorted."""
    return sorted({word for phrase in phrases for word in phrase.split()})


BUILT_IN_RARE_WORDS = "names"
RARE_WORDS = [  # (rare word, a common word that sounds like it: its distractor)
    ("brenner", "banner"), ("marlowe", "marrow"), ("kessler", "wrestler"), ("nolan", "nylon"),  # surnames
    ("hadley", "badly"), ("bryce", "price"), ("fenwick", "fennel"), ("linden", "linen"),
    ("lidar", "later"), ("quasar", "laser"), ("statin", "station"), ("zephyr", "shepherd"),  # technical terms
    ("argon", "organ"), ("helix", "relics"), ("kiwano", "piano"), ("ferrite", "ferret"),
]
RARE_CARRIERS = [  # one slot each; together they speak every letter of the alphabet
    "please call {} tomorrow morning", "i wrote {} on the board", "did you hear {} just now",
    "we talked about {} at lunch", "send the file to {} today", "ask {} about the quiz",
    "the jazz band played near {}", "my notes mention {} twice", "fix the box next to {}",
    "give {} a very quick answer",
]
COMMON_FILLERS = [  # what fills the slot outside the test split (the distractors are added to them)
    "the doctor", "my sister", "the printer", "the budget", "the weather", "coffee", "the garden", "the museum",
    "paris", "london", "the teacher", "the report", "dinner", "the market", "your brother", "the library",
]
DISTRACTOR_SHARE = 4  # every 4th round of the test split over the rare words speaks their distractors


def load_rare_words(spec: str) -> list[tuple[str, str | None]]:
    """``names`` -> :data:`RARE_WORDS`; otherwise a UTF-8 file of ``rare<TAB>distractor`` lines (or ``rare`` alone,
    no distractor; blank lines skipped; spacing normalised). DataError naming the file, or the line that holds more
    than one tab, an empty word or a rare word twice."""
    if spec == BUILT_IN_RARE_WORDS:
        return list(RARE_WORDS)
    path = Path(spec)
    pairs: list[tuple[str, str | None]] = []
    for number, line in enumerate(_text_lines(path, "rare-word", BUILT_IN_RARE_WORDS), start=1):
        if not line.strip():
            continue
        fields = [normalise_phrase(field) for field in line.split("\t")]
        if len(fields) > 2 or not all(fields):
            raise DataError(f"rare-word file {path}, line {number}: give 'rare word<TAB>distractor' or 'rare word', "
                            f"got {line.strip()!r}")
        if fields[0] in (rare for rare, _ in pairs):
            raise DataError(f"rare-word file {path}, line {number}: {fields[0]!r} is listed twice")
        pairs.append((fields[0], fields[1] if len(fields) == 2 else None))
    if not pairs:
        raise DataError(f"rare-word file {path} holds no rare word (one 'rare word<TAB>distractor' per line)")
    return pairs


@dataclass
class RareWordSet:
    """The sentences of a rare-word corpus. sentences / hotwords: per split, per utterance index, the transcript and
    the rare words it speaks; heard: every rare word's count of training utterances (0: never heard);
    distractors: rare word -> its sound-alike (or None)."""

    sentences: dict[str, list[str]]
    hotwords: dict[str, list[list[str]]]
    heard: dict[str, int]
    distractors: dict[str, str | None]


def rare_word_set(pairs: list[tuple[str, str | None]], counts: dict[str, int], train_count: int,
                  seed: int) -> RareWordSet:
    """The sentences of every split (``counts``: utterances per split), a pure function of ``seed``. Each sentence is
    a carrier of :data:`RARE_CARRIERS` (drawn per utterance) with its slot filled. Training and validation fill it
    with common words (:data:`COMMON_FILLERS` and the distractors); in training, half of the rare words (the first
    half of an order drawn from the seed, rounded up) fill it ``train_count`` times each, at drawn places, and the
    others never. The test split goes round the rare words in order: three rounds speak the rare words, every
    :data:`DISTRACTOR_SHARE`-th their distractors (a rare word without one is spoken instead). DataError when
    training is too small to hold the rare words' utterances or when a test sentence has a character no training
    sentence has (a character model could not write it)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 13]))
    rare = [word for word, _ in pairs]
    chosen = {rare[int(i)] for i in rng.permutation(len(rare))[:(len(rare) + 1) // 2]}  # heard in training
    heard = {word: train_count if word in chosen else 0 for word in rare}
    placed = [word for word in rare for _ in range(heard[word])]
    if len(placed) > counts["train"]:
        raise DataError(f"--rare-train-count {train_count}: the rare words heard in training need {len(placed)} "
                        f"training utterances; --num-train is {counts['train']}")
    common = COMMON_FILLERS + sorted({distractor for _, distractor in pairs if distractor is not None})
    slots = {"train": [common[int(i)] for i in rng.integers(0, len(common), size=counts["train"])],
             "val": [common[int(i)] for i in rng.integers(0, len(common), size=counts["val"])]}
    for index, word in zip(rng.choice(counts["train"], size=len(placed), replace=False), placed):
        slots["train"][int(index)] = word
    slots["test"] = []
    for index in range(counts["test"]):
        word, distractor = pairs[index % len(pairs)]
        distracting = (index // len(pairs)) % DISTRACTOR_SHARE == DISTRACTOR_SHARE - 1 and distractor is not None
        slots["test"].append(distractor if distracting else word)
    sentences = {split: [RARE_CARRIERS[int(rng.integers(0, len(RARE_CARRIERS)))].format(filler) for filler in fillers]
                 for split, fillers in slots.items()}
    hotwords = {split: [[filler] if filler in heard else [] for filler in fillers] for split, fillers in slots.items()}
    written = {char for text in sentences["train"] for char in text}
    unwritable = sorted({char for text in sentences["test"] for char in text} - written)
    if unwritable and counts["train"] > 0:
        raise DataError(f"the rare-word test sentences use characters no training sentence has: "
                        f"{' '.join(map(repr, unwritable))} (raise --num-train)")
    return RareWordSet(sentences, hotwords, heard, dict(pairs))
