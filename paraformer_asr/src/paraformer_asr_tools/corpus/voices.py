"""The speech synthesisers that read the synthetic corpora (scripts/make_speech_corpus.py --engines): espeak-ng,
flite and festival, their installed English voices, and how each is told to read a text at a rate and pitch.

One prosody scale serves every engine: a rate in words a minute (espeak-ng's own ``-s``) and a pitch on espeak-ng's
0-99 scale (``-p``, 50 the voice's own). flite and festival take the rate as a duration factor relative to
espeak-ng's default pace (:func:`duration_factor`) and the pitch as an F0 factor (:func:`f0_factor`, measured on
espeak-ng: its F0 at pitch 25 / 75 is 0.80 / 1.28 times that at 50). Where a voice has no pitch control (flite's rms,
festival's HTS voices) the pitch is left as the voice has it.

espeak-ng and flite read one text per process (:func:`espeak_command`, :func:`flite_command`); festival reads a
batch per process, one voice at a time (:func:`festival_script`, :func:`read_with_festival`), since loading a voice
costs more than reading a sentence with it.

A voice stands for a speaker: espeak-ng's variants (m1, f3, klatt, ...) are speakers of their own, while flite's and
festival's voices are built from recordings of people (kal, slt, awb, ...), some of them in both engines (flite's
kal and kal16 and festival's kal_diphone are one man). :func:`split_speakers` keeps each person's voices, of every
engine, in one split, so that a test voice is never heard in training.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paraformer_asr.errors import UserError

ENGINES = ("espeak", "flite", "festival")
SPLITS = ("train", "val", "test")
ESPEAK_OWN_RATE_WPM = 175  # espeak-ng's default -s: the pace that duration_factor maps to 1
PITCH_OCTAVE = 70  # espeak-ng pitch steps per octave of F0 (measured: pitch 25 / 50 / 75 -> F0 x 0.80 / 1 / 1.28)
FLITE_LIMITED_DOMAIN = re.compile(r"_time$")  # flite's voices that only say the time (awb_time)
FLITE_ACCENTS = {"awb": "en-gb-scotland"}  # flite's English voices are CMU's US speakers but for awb
FESTIVAL_DIALECTS = {"american": "en-us", "british": "en-gb", "scottish": "en-gb-scotland"}
FESTIVAL_BATCH = 250  # utterances read by one festival process (bounds the raw files waiting in the scratch folder)
INSTALL = {
    "espeak": "apt-get install espeak-ng",
    "flite": "apt-get install flite",
    "festival": "apt-get install festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts",
}
_FESTIVAL_LIST_VOICES = """
(define (voice_field name field)
  (cadr (assoc field (cadr (voice.description name)))))
(mapcar
  (lambda (name)
    (format t "voice %s %s %s\\n" name (voice_field name 'language) (voice_field name 'dialect)))
  (voice.list))
"""
# Per utterance: festival's duration stretch, the F0 targets of the linear-regression intonation (diphone voices)
# and the HTS engine's speed (-r: HTS voices ignore the duration stretch) are set from the voice's own values.
_FESTIVAL_PREAMBLE = """
(set! own_duration_stretch (Parameter.get 'Duration_Stretch))
(set! own_int_lr_params (if (boundp 'int_lr_params) int_lr_params nil))
(set! own_hts_engine_params (if (boundp 'hts_engine_params) hts_engine_params nil))
(define (scaled_f0_targets params factor)
  (mapcar
    (lambda (param)
      (if (member (car param) '(target_f0_mean target_f0_std))
          (list (car param) (* factor (cadr param)))
          param))
    params))
(define (read_aloud text file stretch f0)
  (Parameter.set 'Duration_Stretch (* own_duration_stretch stretch))
  (if own_int_lr_params (set! int_lr_params (scaled_f0_targets own_int_lr_params f0)))
  (if (string-equal (Parameter.get 'Synth_Method) "HTS")
      (set! hts_engine_params (cons (list "-r" (/ 1.0 stretch)) own_hts_engine_params)))
  (utt.save.wave (utt.synth (eval (list 'Utterance 'Text text))) file 'riff))
"""


@dataclass(frozen=True)
class Voice:
    """One voice of one engine. ``name`` is what the engine is given (an espeak-ng variant, flite's ``-voice``,
    festival's ``voice_<name>``); ``speaker`` who it sounds like (the variant, or the person recorded for it);
    ``accent`` the espeak-ng style accent of that person ("" for espeak-ng variants: their accent is drawn per
    utterance)."""

    engine: str
    name: str
    speaker: str
    accent: str = ""


@dataclass(frozen=True)
class Reading:
    """One text to read into ``path`` (a WAV at the engine's own rate), at ``rate_wpm`` and ``pitch``
    (espeak-ng's scales, the module docstring)."""

    text: str
    path: Path
    rate_wpm: int
    pitch: int


def parse_engines(text: str) -> list[str]:
    """'espeak,flite' -> ['espeak', 'flite'] in the order given; UserError naming an unknown or repeated engine."""
    engines = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in engines if name not in ENGINES]
    if not engines or unknown:
        raise UserError(f"--engines: unknown engine(s) {', '.join(unknown) or repr(text)} (known: "
                        f"{', '.join(ENGINES)})")
    if len(set(engines)) != len(engines):
        raise UserError(f"--engines names an engine twice: {text!r}")
    return engines


def check_installed(engine: str) -> None:
    """UserError naming the package to install when ``engine``'s program is missing."""
    program = "espeak-ng" if engine == "espeak" else engine
    if shutil.which(program) is None:
        raise UserError(f"{program} is not installed (on Debian/Ubuntu: {INSTALL[engine]})")


def speaker_of(name: str) -> str:
    """The person behind a flite or festival voice name: the organisation and language prefix, a trailing 16 (kHz)
    and the method suffix dropped: cmu_us_slt_arctic_hts -> slt, kal_diphone -> kal, kal16 -> kal."""
    match = re.fullmatch(r"(?:[a-z]+_[a-z]{2}_)?([a-z0-9]+?)(?:16)?(?:_.*)?", name)
    return match.group(1) if match else name


def duration_factor(rate_wpm: int) -> float:
    """A rate in words a minute -> the duration factor that slows espeak-ng's default pace to it (> 1: slower)."""
    return ESPEAK_OWN_RATE_WPM / rate_wpm


def f0_factor(pitch: int) -> float:
    """An espeak-ng pitch (0-99, 50 the voice's own) -> the factor it puts on the voice's F0."""
    return 2.0 ** ((pitch - 50) / PITCH_OCTAVE)


def espeak_command(voice: str, reading: Reading, word_gap: int) -> list[str]:
    """espeak-ng reads ``reading`` with ``voice`` (accent+variant) and a gap of ``word_gap`` x 10 ms between words."""
    return ["espeak-ng", "-v", voice, "-s", str(reading.rate_wpm), "-p", str(reading.pitch), "-g", str(word_gap),
            "-w", str(reading.path), reading.text]


def flite_command(voice: str, reading: Reading) -> list[str]:
    """flite reads ``reading`` with ``voice``: its duration stretch and F0 shift set from the rate and pitch."""
    return ["flite", "-voice", voice, "--setf", f"duration_stretch={duration_factor(reading.rate_wpm):.4f}",
            "--setf", f"f0_shift={f0_factor(reading.pitch):.4f}", "-t", reading.text, "-o", str(reading.path)]


def run_engine(command: list[str]) -> None:
    """Run one synthesis command; UserError with the command and the engine's message when it fails."""
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise UserError(f"{command[0]} failed ({' '.join(command)}): {result.stderr.strip()}")


def flite_voices() -> list[Voice]:
    """flite's built-in voices (``flite -lv``) but those of a limited domain, in flite's order."""
    check_installed("flite")
    listing = subprocess.run(["flite", "-lv"], capture_output=True, text=True, check=False).stdout
    names = listing.split(":", 1)[-1].split()
    return [Voice("flite", name, speaker_of(name), FLITE_ACCENTS.get(speaker_of(name), "en-us"))
            for name in names if not FLITE_LIMITED_DOMAIN.search(name)]


def festival_voices() -> list[Voice]:
    """festival's installed English voices (diphone, HTS, ...), as festival itself lists and describes them."""
    check_installed("festival")
    result = subprocess.run(["festival", "--pipe"], input=_FESTIVAL_LIST_VOICES, capture_output=True, text=True,
                            check=False)
    voices = []
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[0] == "voice" and fields[2] == "english":
            name, dialect = fields[1], fields[3]
            voices.append(Voice("festival", name, speaker_of(name), FESTIVAL_DIALECTS.get(dialect, "en")))
    if not voices:
        raise UserError(f"festival lists no English voice (on Debian/Ubuntu: {INSTALL['festival']}); it said: "
                        f"{(result.stdout + result.stderr).strip()[:500]!r}")
    return voices


def installed_voices(engine: str) -> list[Voice]:
    """The voices of flite or festival that make_speech_corpus.py reads with."""
    return {"flite": flite_voices, "festival": festival_voices}[engine]()


def scheme_string(text: str) -> str:
    """``text`` as a Scheme string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def festival_script(voice: str, readings: Sequence[Reading]) -> str:
    """The Scheme program one festival process runs: select ``voice``, then read every one of ``readings`` into
    its file, each with its own rate and pitch."""
    lines = [f"(voice_{voice})", _FESTIVAL_PREAMBLE.strip()]
    for reading in readings:
        lines.append(f"(read_aloud {scheme_string(reading.text)} {scheme_string(str(reading.path))} "
                     f"{duration_factor(reading.rate_wpm):.4f} {f0_factor(reading.pitch):.4f})")
    return "\n".join(lines) + "\n"


def read_with_festival(voice: str, readings: Sequence[Reading], script_path: Path) -> None:
    """One festival process reads every one of ``readings`` with ``voice`` (its program written to
    ``script_path``); UserError naming the voice and the first file it did not write."""
    script_path.write_text(festival_script(voice, readings), encoding="utf-8")
    result = subprocess.run(["festival", "--batch", str(script_path)], capture_output=True, text=True, check=False)
    missing = [reading for reading in readings if not reading.path.is_file()]
    if result.returncode != 0 or missing:
        said = (result.stdout + result.stderr).strip()[-500:]
        raise UserError(f"festival with voice {voice} failed (exit {result.returncode}; {len(missing)} of "
                        f"{len(readings)} files unwritten{f', first {missing[0].text!r}' if missing else ''}): {said}")


def split_speakers(voices: Sequence[Voice], seed: int, val_fraction: float,
                   test_fraction: float) -> dict[str, list[Voice]]:
    """flite's and festival's voices split between train, val and test by the person they are built from (every
    voice of a person, in any engine, in one split): a seeded shuffle of the people, ``test_fraction`` of them (at
    least one) for test, ``val_fraction`` (at least one) for val, the rest for training. UserError below 3 people."""
    speakers = sorted({voice.speaker for voice in voices})
    if len(speakers) < 3:
        raise UserError(f"need flite / festival voices of at least 3 speakers to split them by voice, found "
                        f"{', '.join(f'{v.engine}:{v.name}' for v in voices) or 'none'} (install more voices: "
                        f"{INSTALL['festival']}; or leave those engines out of --engines)")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 13]))
    shuffled = [speakers[i] for i in rng.permutation(len(speakers))]
    num_test = max(1, round(test_fraction * len(speakers)))
    num_val = max(1, round(val_fraction * len(speakers)))
    split_of = {speaker: "test" for speaker in shuffled[:num_test]}
    split_of.update({speaker: "val" for speaker in shuffled[num_test:num_test + num_val]})
    return {split: [voice for voice in voices if split_of.get(voice.speaker, "train") == split] for split in SPLITS}
