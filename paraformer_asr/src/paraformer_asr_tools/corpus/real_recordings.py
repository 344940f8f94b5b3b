"""A small test set of real people's speech from Debian packages (scripts/make_real_testset.py).

Three packages hold recordings whose words are known:

- ``pocketsphinx-testdata`` (/usr/share/pocketsphinx/test/data): read sentences of a LibriVox book and card names
  (``librivox/``, ``cards/``: WAVs with a Sphinx transcription file, ``<s> words </s> (utterance id)`` a line),
  ``goforward.raw`` ("go forward ten meters", the sentence pocketsphinx's own tests decode from it) and TIDIGITS
  digit strings (``tidigits/*.raw``, the digits in the name: ``dhd.2934z`` is "two nine three four zero", ``z``
  zero, ``o`` oh), headerless 16-bit 16 kHz PCM. Its ``numbers.raw`` and ``something.raw`` come with no transcript
  and are left out.
- ``saytime`` (/usr/share/saytime): one man saying numbers and time words, a word a file, headerless 8 kHz mu-law
  ``.au``; the name says the word (``14.au`` "fourteen", ``the_time_is.au``, ``am.au`` "a m", ``oclock.au``).
- ``klettres-data`` (/usr/share/klettres): letters and short words for children, OGG; the English ones are ``en/``
  and ``en_GB/`` (two speakers), a letter a file in ``alpha/``, a word a file in ``syllab/``, named by it (en_GB's
  ``sounds.xml`` leaves its letters out, so the names are read, not the list). The syllables that hold no vowel
  letter (the ``ch`` and ``th`` sounds) are not words and are left out.

Each clip becomes a 16 kHz mono WAV and a manifest line ``{"audio", "text", "id", "source", "speaker"}`` with the
transcript as lower-case words (:func:`~paraformer_asr_tools.corpus.speech_corpus.normalise_transcript`). Part of the
clips is set aside for choosing models (:func:`split_selection`), the rest is the test set.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import torch

from paraformer_asr.data.audio import to_mono, write_audio
from paraformer_asr.errors import DataError
from paraformer_asr_tools.corpus.speech_corpus import normalise_transcript

SAMPLE_RATE = 16000
SOURCES = ("pocketsphinx-testdata", "saytime", "klettres-data")
FOLDERS = {  # where each package puts its recordings, under the file system's root
    "pocketsphinx-testdata": Path("usr/share/pocketsphinx/test/data"),
    "saytime": Path("usr/share/saytime"),
    "klettres-data": Path("usr/share/klettres"),
}
KLETTRES_ENGLISH = ("en", "en_GB")
POCKETSPHINX_SENTENCES = {"goforward.raw": "go forward ten meters"}
_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty", 7: "seventy", 8: "eighty", 9: "ninety"}
SAYTIME_WORDS = {"am": "a m", "pm": "p m", "oclock": "o'clock"}  # the rest: the name, "_" read as a space
TIDIGITS_LETTERS = {"z": "zero", "o": "oh"}
SPLITS = ("selection", "test")


@dataclass(frozen=True)
class Clip:
    """One recording and its words. ``raw`` is (subtype, sample rate) for a headerless file, None when soundfile
    reads the header."""

    source: str
    speaker: str
    name: str  # unique within the source
    text: str
    path: Path
    raw: tuple[str, int] | None = None

    @property
    def id(self) -> str:
        return f"{self.source}-{self.name}"

    @property
    def relative_path(self) -> str:
        return f"wavs/{self.source}/{self.name}.wav"


def number_words(number: int) -> str:
    """0..99 in words: 14 -> "fourteen", 42 -> "forty two"."""
    if not 0 <= number <= 99:
        raise ValueError(f"number_words handles 0..99, got {number}")
    if number < 20:
        return _ONES[number]
    tens, ones = divmod(number, 10)
    return _TENS[tens] + (f" {_ONES[ones]}" if ones else "")


def saytime_words(stem: str) -> str:
    """The word a saytime file speaks, from its name: "14" -> "fourteen", "the_time_is" -> "the time is"."""
    if stem.isdigit():
        return number_words(int(stem))
    return SAYTIME_WORDS.get(stem, stem.replace("_", " "))


def tidigits_words(name: str) -> str:
    """The digits a TIDIGITS file name spells (the part after the speaker, before an optional take letter a / b):
    "dhd.2934z" -> "two nine three four zero", "man.ah.o789a" -> "oh seven eight nine"."""
    digits = re.sub(r"[ab]$", "", name.split(".")[-1])
    if not digits or not all(c.isdigit() or c in TIDIGITS_LETTERS for c in digits):
        raise DataError(f"TIDIGITS file name {name!r} does not spell digits (0-9, z, o)")
    return " ".join(TIDIGITS_LETTERS[c] if c in TIDIGITS_LETTERS else _ONES[int(c)] for c in digits)


def sphinx_transcripts(path: Path) -> dict[str, str]:
    """A Sphinx transcription file (``<s> words </s> (utterance id)`` a line) -> {utterance id: words}."""
    transcripts = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        match = re.fullmatch(r"\s*(.*?)\s*\((\S+)\)\s*", line)
        if match is None:
            raise DataError(f"{path}, line {number}: expected '<s> words </s> (utterance id)', got {line!r}")
        words = match.group(1).replace("<s>", " ").replace("</s>", " ")
        transcripts[match.group(2)] = normalise_transcript(words)
    return transcripts


def pocketsphinx_clips(folder: Path) -> list[Clip]:
    """The transcribed recordings of pocketsphinx-testdata (the module docstring); one speaker per collection."""
    source = "pocketsphinx-testdata"
    clips = []
    for transcription in sorted([*folder.glob("*/*.transcription"), *folder.glob("*/transcription")]):
        collection = transcription.parent
        for utterance, text in sphinx_transcripts(transcription).items():
            path = collection / f"{utterance}.wav"
            if not path.is_file():
                raise DataError(f"{transcription} names utterance {utterance}, but {path} is missing")
            clips.append(Clip(source, f"pocketsphinx-{collection.name}", f"{collection.name}-{utterance}", text,
                              path))
    for name, text in POCKETSPHINX_SENTENCES.items():
        if (folder / name).is_file():
            clips.append(Clip(source, f"pocketsphinx-{Path(name).stem}", Path(name).stem, normalise_transcript(text),
                              folder / name, ("PCM_16", 16000)))
    for path in sorted(folder.glob("tidigits/*.raw")):
        speaker = path.stem.split(".")[0]
        clips.append(Clip(source, f"tidigits-{speaker}", f"tidigits-{path.stem}", tidigits_words(path.stem), path,
                          ("PCM_16", 16000)))
    return clips


def saytime_clips(folder: Path) -> list[Clip]:
    """saytime's words, one speaker."""
    return [Clip("saytime", "saytime", path.stem, saytime_words(path.stem), path, ("ULAW", 8000))
            for path in sorted(folder.glob("*.au"))]


def klettres_clips(folder: Path) -> list[Clip]:
    """klettres-data's English letters (alpha/) and words (syllab/) of en/ and en_GB/, the text in the file name,
    one speaker per folder."""
    clips = []
    for language in KLETTRES_ENGLISH:
        for kind in ("alpha", "syllab"):
            for path in sorted((folder / language / kind).glob("*.ogg")):
                text = normalise_transcript(path.stem)
                if kind == "syllab" and not re.search(r"[aeiouy]", text):  # a sound (ch, th), not a word
                    continue
                clips.append(Clip("klettres-data", f"klettres-{language}", f"{language}-{kind}-{text}", text, path))
    return clips


def find_clips(root: Path, sources: Sequence[str]) -> list[Clip]:
    """Every transcribed clip of ``sources`` installed under ``root`` ("/" on a real system). DataError naming
    each package that is missing (or holds no English clip) and how to install it."""
    readers = {"pocketsphinx-testdata": pocketsphinx_clips, "saytime": saytime_clips, "klettres-data": klettres_clips}
    clips, missing = [], []
    for source in sources:
        folder = root / FOLDERS[source]
        found = readers[source](folder) if folder.is_dir() else []
        if not found:
            missing.append(f"{source} (no recordings in {folder})")
        clips += found
    if missing:
        packages = " ".join(source for source in sources if any(line.startswith(source) for line in missing))
        raise DataError(f"not installed: {'; '.join(missing)}. On Debian/Ubuntu: apt-get install {packages}; or "
                        f"name the installed ones with --sources")
    return clips


def load_clip(clip: Clip) -> torch.Tensor:
    """The clip as a mono waveform [N] float32 at 16 kHz."""
    options = {} if clip.raw is None else {"format": "RAW", "subtype": clip.raw[0], "samplerate": clip.raw[1],
                                           "channels": 1, "endian": "LITTLE"}
    try:
        samples, rate = soundfile.read(str(clip.path), dtype="float32", always_2d=True, **options)  # [N, C]
    except RuntimeError as err:  # soundfile's errors
        raise DataError(f"cannot read {clip.path}: {err}") from None
    if samples.shape[0] == 0:
        raise DataError(f"{clip.path} holds no samples")
    return to_mono(torch.from_numpy(np.ascontiguousarray(samples.T)), rate, SAMPLE_RATE)  # [N]


def split_selection(clips: Sequence[Clip], fraction: float, seed: int) -> dict[str, str]:
    """{clip id: "selection" or "test"}, source by source. A source of several speakers gives whole speakers to the
    selection set, in a seeded order, until it holds ``fraction`` of the source's clips, always keeping one speaker
    for test; a source of one speaker gives a seeded ``fraction`` of its clips (at least one, never all)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 17]))
    split = {}
    for source in sorted({clip.source for clip in clips}):
        own = [clip for clip in clips if clip.source == source]
        speakers = sorted({clip.speaker for clip in own})
        target = fraction * len(own)
        if len(speakers) > 1:
            counts = Counter(clip.speaker for clip in own)
            chosen, held = set(), 0
            for index in rng.permutation(len(speakers))[:-1]:  # the last one in the order stays for test
                if held >= target:
                    break
                chosen.add(speakers[index])
                held += counts[speakers[index]]
            split.update({clip.id: "selection" if clip.speaker in chosen else "test" for clip in own})
        else:
            count = min(max(1, round(target)), len(own) - 1)
            chosen_ids = {own[index].id for index in rng.permutation(len(own))[:count]}
            split.update({clip.id: "selection" if clip.id in chosen_ids else "test" for clip in own})
    return split


def write_testset(out: Path, clips: Sequence[Clip], split: dict[str, str]) -> dict:
    """Convert every clip to a 16 kHz WAV under ``out``/wavs and write all.jsonl, selection.jsonl, test.jsonl,
    texts.txt (the distinct transcripts, sorted) and testset.json (clips and minutes per source and split)."""
    records, seconds = [], {}
    for clip in clips:
        waveform = load_clip(clip)  # [N]
        target = out / clip.relative_path
        target.parent.mkdir(parents=True, exist_ok=True)
        write_audio(target, waveform, SAMPLE_RATE)
        seconds[clip.id] = waveform.numel() / SAMPLE_RATE
        records.append({"audio": clip.relative_path, "text": clip.text, "id": clip.id, "source": clip.source,
                        "speaker": clip.speaker})
    _write_jsonl(out / "all.jsonl", records)
    for name in SPLITS:
        _write_jsonl(out / f"{name}.jsonl", [record for record in records if split[record["id"]] == name])
    texts = sorted({clip.text for clip in clips})
    (out / "texts.txt").write_text("".join(f"{text}\n" for text in texts), encoding="utf-8")
    summary = {"sample_rate": SAMPLE_RATE, "clips": len(clips), "minutes": round(sum(seconds.values()) / 60, 2),
               "distinct_texts": len(texts), "sources": {}}
    for source in sorted({clip.source for clip in clips}):
        own = [clip for clip in clips if clip.source == source]
        summary["sources"][source] = {
            "clips": len(own),
            "minutes": round(sum(seconds[clip.id] for clip in own) / 60, 2),
            "speakers": sorted({clip.speaker for clip in own}),
            **{name: {"clips": sum(split[clip.id] == name for clip in own),
                      "speakers": sorted({clip.speaker for clip in own if split[clip.id] == name})}
               for name in SPLITS},
        }
    (out / "testset.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
