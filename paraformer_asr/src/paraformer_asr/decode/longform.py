"""Long recordings in bounded memory: read window by window, decoded in batches, stitched by the CIF word times.

Self-attention costs grow with the square of the input, so a recording of minutes or hours is never encoded whole:

    recording (any length, any format soundfile reads; or a segment of it)
      │  pass 1, energy_profile: read in 30 s windows, log energy of every 10 ms frame  -> profile [F] (1.4 MB/hour)
      ▼
    plan_recording (segment):
      │  'pauses':  speech_runs = frames > local noise floor + speech_threshold_db (local_noise_floor: the louder of
      │             the quietest points 2 s before and 2 s after, digital silence left out), joined across
      │             pauses shorter than min_pause_ms; each run +
      │             margin_ms of silence, less any digital silence at its edges, is one window (a run longer
      │             than chunk_seconds is cut into overlapping windows as below)
      │  'windows': plan_windows = windows of chunk_seconds overlapping by overlap_seconds, the last one ending
      │             at the recording's end
      │  window starts on a grid of whole front-end hops (and resampler periods); overlapping windows meet at a
      │  cut (stitched_windows: the middle of the overlap, or its quietest 100 ms) -> Window(start, end, keep range)
      ▼
    pass 2, WindowReader.read(window): seek + read of the window's input frames plus the resampler's reach on each
      │  side, mono, resample, trim: exactly the samples the whole recording would have there
      ▼
    front end + normaliser -> features [T, F] (frames on the whole recording's frame grid)
      ▼
    batch_windows windows (of similar length; at most batch_windows x 5 s padded) -> one padded batch -> one
      │  batched decode (greedy or beam; CIF token times; a score per token)
      ▼
    judge_pauses (a Paraformer, 'pauses', judged_pauses_ms = (low, high)): the plan cuts at every pause of low ms
      │  or more; the neighbours across each pause shorter than high are decoded together too, in rounds, and
      │  stay together where the joint decode scores better per token than the two apart
      ▼
    units with absolute times: words (a word's tokens and the separators before it), or single tokens when the
      │  vocabulary has no word separator (e.g. compact digit strings)
      ▼
    stitch: each window keeps the units whose centre lies in its keep range  ─► text, words, tokens

Memory is bounded by one batch of windows (their samples, features and activations); what grows with the recording
is the profile (one float per 10 ms) and the transcript (every decoded window's units, while pauses are judged).

**Why pauses by default.** Models trained on single utterances are hurt by what they never saw in training: long
silences and several utterances in one input (docs/history.md, "Long recordings"). Speech segments cut at pauses and
trimmed to a short margin of silence look like training utterances; neighbouring segments do not overlap (each keeps
what lies between the middles of the pauses around it), so nothing needs stitching but inside speech runs longer
than chunk_seconds.

**Judged pauses.** No length of pause tells a pause inside a sentence from one between sentences: utterances joined
back to back are parted by their own edges (250-480 ms on the commands corpus), while a spoken command can hold a
pause of 360 ms. A model trained on single phrases reads a fragment of a phrase badly (the LM and the length
candidates turn 'to twenty percent' into a whole command) and two phrases in one window worse still. So where the
model scores its hypotheses (the Paraformer: decoder log-prob per token, plus the LM's), the pause is judged by
that score: a phrase cut at an inner pause reads better whole, two phrases read better apart. The price is decoding
most of a recording more than once: about three times the time (docs/history.md, "Pauses judged by the decoder").

**Digital silence** (exact zeros, as between clips joined by an editor) is never part of a window's edges, and never
sets the noise floor. Its log-mel features (the front end's floor, far below any recorded silence) are unlike
anything in training: a segment of a test utterance with 100-150 ms of them around it was read with one more
letter at a word start ('staopb' for 'stop') and 0.6 more CIF weight than the same utterance alone, and a floor
taken from zeros made every noisy pause count as speech (docs/history.md, "Gaps of digital silence, of noise,
and none"). A segment's window therefore shrinks to its frames above DIGITAL_SILENCE_DB, and the noise floor is
taken over those frames only.

**A local noise floor.** Pauses between utterances recorded apart carry each one's own noise, 20 dB apart or more.
A floor taken over 30 s (the quietest tenth of its frames) was the quietest utterance's, so a pause filled with a
louder one's noise counted as speech: windows began up to 0.8 s early, and the model read a command into that
noise ('set a timer for twop' for 'turn on the bathroom lamp'). Each frame's floor is now the louder of the
quietest points within FLOOR_REACH_SECONDS before and after it: in a pause it is that pause's own noise, in speech
the noise of the pause on its louder side (docs/history.md, "A local noise floor").

**The stitching rule** (overlapping windows). Each cut lies in the middle half of its overlap, so at least a quarter
of the overlap separates it from either window's edge. A unit cut by window i's end edge has its centre within half a
unit of that edge, hence past the cut (when units are shorter than half the overlap): window i drops it and window
i + 1, which holds it whole, keeps it; a unit cut by window i + 1's start edge is symmetric. A unit inside both
windows is kept once whenever the two windows' estimates of its centre fall on the same side of the cut; a quiet cut
lies in a pause, far from every unit's centre. When the two estimates of a unit near the cut fall on either side
of it, the unit would be kept twice or not at all: ``stitch_by_times`` recognises the pair (their spans overlap by
at least half of the shorter one) and keeps it once, from the window its mean centre falls in. Where the last kept
unit of one window and the first of the next still overlap in time, both are clipped to meet in the middle
(``append_in_order``), so times always increase. A window's tokens end at its first ``<eos>``, as
``tokenizer.decode`` reads them.

**The autoregressive baseline** has no CIF, so its words carry no times. Non-overlapping windows are joined as they
are; overlapping ones are stitched by their text (:func:`text_overlap_cut`): the words expected in an overlap (the
overlap's share of each window's words, widened) are aligned by edit distance and the transcript switches from
window i to window i + 1 at the middle matched word; where nothing matches, at the middle of the expected overlap
words. Only the text comes out (no word or token times).

Contracts:
    LongFormOptions(segment, chunk_seconds, overlap_seconds, cut, batch_windows, speech_threshold_db,
                    min_pause_ms, margin_ms, judged_pauses_ms)             checked on construction (ConfigError)
    plan_windows(num_samples, window_samples, overlap_samples, align)     -> [(start, end)] sample spans
    WindowReader(handle, name, target_rate, first_frame=0, num_frames=-1).read(start, end) -> samples [end - start]
    energy_profile(reader, hop, block_samples)                            -> dB per hop [ceil(num_samples / hop)]
    local_noise_floor(profile [F], reach_frames)                          -> dB [F]: the louder of the quietest
                                                                             points within reach before and after
    speech_runs(profile [F], threshold_db, reach_frames, min_pause_frames, min_speech_frames) -> [(first, end)]
    audible_span(profile [F], first_frame, end_frame)                     -> the frames in it above digital silence
    quiet_point(profile [F], first_frame, end_frame, span_frames)         -> frame index
    stitched_windows(spans, cut, profile | None, hop, sample_rate, keep_from_ms, keep_to_ms)
                                                                          -> [(start, end, keep_start_ms, keep_end_ms)]
    plan_recording(num_samples, options, hop, align, sample_rate, profile | None) -> list[Window]
    joined_window(windows, (first, last))                                 -> Window spanning windows[first..last]
    pooled_score((score, tokens), (score, tokens))                        -> token-weighted mean score per token
    judge_pauses(windows, judged_ms, longest_samples, score(spans) -> [(score, tokens)]) -> [(first, last)]
    padded_batches(lengths shortest first, batch_windows, budget_samples) -> batch sizes
    window_units(pieces, token_times | None, offset_ms, by_words)        -> list[TimedUnit]
    keep_between(units, start_ms, end_ms)                                  -> units whose centre is in [start, end)
    same_unit(first, second)                                               -> spans overlap by >= half the shorter
    stitch_by_times(stitched, previous_units, units, window)              -> stitched + the window's kept units
    append_in_order(stitched, units)                                       -> stitched + units, junction ordered
    text_overlap_cut(previous [n], current [m], previous_tail, current_head) -> (keep from previous, resume in current)
    stitch_by_text(stitched, previous_count, previous, units, window)     -> (stitched, units of window at its end)
    transcribe_long(loaded, source, device, options, ...)                 -> LongTranscript
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

import torch

from paraformer_asr.data.audio import open_audio, read_frames, segment_frames, to_mono
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.resample import rate_ratio, resample_reach
from paraformer_asr.data.setup import make_frontend
from paraformer_asr.data.tokenizer import WORD_START, Tokenizer
from paraformer_asr.decode.hotwords import HotwordTrie
from paraformer_asr.decode.lexicon import LexiconAutomaton
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.decode.timestamps import frame_clock, group_words, token_entries, word_times
from paraformer_asr.errors import ConfigError, DataError
from paraformer_asr.loaded_model import LoadedModel, features_from_waveform
from paraformer_asr.metrics.asr_metrics import matched_pairs

SEGMENTATIONS = ("pauses", "windows")
CUT_RULES = ("middle", "quiet")
MIN_CHUNK_SECONDS = 1.0
DEFAULT_OVERLAP_SHARE = 0.2  # the command lines' overlap when none is given: a fifth of the window
QUIET_SPAN_MS = 100.0  # the quiet cut is the centre of the lowest-energy stretch of this length
PROFILE_BLOCK_SECONDS = 30.0  # the energy pass reads the recording in windows of this length
FLOOR_REACH_SECONDS = 2.0  # a frame's noise floor: the quietest point within this reach on either side ...
FLOOR_SMOOTH_FRAMES = 3  # ... of the profile smoothed over this many frames (docs/history.md, "A local noise floor")
MIN_SPEECH_MS = 50.0  # shorter speech runs between pauses are taken for clicks and dropped
BATCH_SECONDS_PER_WINDOW = 5.0  # a batch holds at most batch_windows x this much padded audio
MIN_WINDOW_SECONDS = 0.2  # a speech segment is given at least this much audio (the encoder needs 85 ms)
TEXT_SEARCH_WIDENING = 1.5  # text stitching: words searched in an overlap, relative to the expected count
_POWER_FLOOR = 1e-12  # before the log of a frame's power (digital silence: -120 dB)
DIGITAL_SILENCE_DB = -80.0  # 10 ms frames at or below this (RMS 1e-4, about 3 steps of 16-bit PCM) are digital silence


@dataclass(frozen=True)
class LongFormOptions:
    """How a long recording is cut and decoded.

    segment: 'pauses' (speech segments between pauses, found by frame energy) or 'windows' (fixed windows);
    chunk_seconds: the longest window (a longer speech segment is cut into overlapping windows);
    overlap_seconds: overlap of neighbouring windows (0 .. chunk_seconds / 2);
    cut: where stitching passes from one overlapping window to the next: 'middle' of the overlap or its 'quiet'est
    stretch (in the overlap's middle half);
    batch_windows: windows decoded together (memory grows with it, not with the recording);
    speech_threshold_db: a 10 ms frame is speech when its energy exceeds the local noise floor by this much;
    min_pause_ms: shorter pauses do not end a speech segment (where pauses are not judged);
    margin_ms: (before, after) silence kept around each speech segment (never past the middle of a pause; within
    the 10-90 % range of the training utterances' own edges on the synthetic commands corpus, 30-180 ms before
    and 270-520 ms after the speech; docs/history.md, "Gaps of digital silence, of noise, and none");
    judged_pauses_ms: (low, high): with a model that scores its hypotheses (the Paraformer), pauses shorter than low
    never end a segment, pauses of high or more always do, and a pause in between is judged by decoding
    (:func:`judge_pauses`); min_pause_ms then does not apply. None: not judged."""

    segment: str = "pauses"
    chunk_seconds: float = 20.0
    overlap_seconds: float = 4.0
    cut: str = "quiet"
    batch_windows: int = 8
    speech_threshold_db: float = 12.0
    min_pause_ms: float = 300.0
    margin_ms: tuple[float, float] = (150.0, 300.0)
    judged_pauses_ms: tuple[float, float] | None = (200.0, 1000.0)

    def __post_init__(self) -> None:
        if self.segment not in SEGMENTATIONS:
            raise ConfigError(f"--segment must be one of {', '.join(SEGMENTATIONS)}, got {self.segment!r}")
        if not _finite(self.chunk_seconds) or self.chunk_seconds < MIN_CHUNK_SECONDS:
            raise ConfigError(f"--chunk-seconds must be a number >= {MIN_CHUNK_SECONDS:g}, got {self.chunk_seconds!r}")
        if not _finite(self.overlap_seconds) or not 0.0 <= self.overlap_seconds <= self.chunk_seconds / 2:
            raise ConfigError(f"--chunk-overlap must be between 0 and half of --chunk-seconds "
                              f"({self.chunk_seconds / 2:g} s), got {self.overlap_seconds!r}")
        if self.cut not in CUT_RULES:
            raise ConfigError(f"--chunk-cut must be one of {', '.join(CUT_RULES)}, got {self.cut!r}")
        if isinstance(self.batch_windows, bool) or not isinstance(self.batch_windows, int) or self.batch_windows < 1:
            raise ConfigError(f"--chunk-batch must be an integer >= 1, got {self.batch_windows!r}")
        if not _finite(self.speech_threshold_db) or self.speech_threshold_db <= 0:
            raise ConfigError(f"--speech-threshold-db must be > 0, got {self.speech_threshold_db!r}")
        if not _finite(self.min_pause_ms) or self.min_pause_ms < 0:
            raise ConfigError(f"--min-pause-ms must be >= 0, got {self.min_pause_ms!r}")
        if len(self.margin_ms) != 2 or not all(_finite(m) and m >= 0 for m in self.margin_ms):
            raise ConfigError(f"speech margins must be two numbers of ms >= 0, got {self.margin_ms!r}")
        if self.judged_pauses_ms is not None and not (
                len(self.judged_pauses_ms) == 2 and all(_finite(m) for m in self.judged_pauses_ms)
                and 0 <= self.judged_pauses_ms[0] <= self.judged_pauses_ms[1]):
            raise ConfigError(f"--judged-pauses-ms must be two numbers of ms, 0 <= LOW <= HIGH, got "
                              f"{self.judged_pauses_ms!r}")


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Window:
    """Samples [start, end) of the recording at the model's sample rate; the units (words) whose centre lies in
    [keep_start_ms, keep_end_ms) are its part of the transcript; pause_after_ms: the pause between its speech and
    the next window's when a pause parts them (segmentation at pauses), else 0."""

    index: int
    start: int
    end: int
    keep_start_ms: float = -math.inf
    keep_end_ms: float = math.inf
    pause_after_ms: float = 0.0


def plan_windows(num_samples: int, window_samples: int, overlap_samples: int, align: int) -> list[tuple[int, int]]:
    """(start, end) of windows covering [0, num_samples): one window when the recording fits in one; otherwise
    starts every ``window - overlap`` samples rounded down to a multiple of ``align`` (at least ``align``), and a
    last window that ends at ``num_samples``, starting at the first multiple of ``align`` that keeps it within
    ``window_samples`` (its overlap with the previous window is then at least ``overlap_samples``)."""
    if num_samples < 1 or window_samples < 1 or align < 1 or not 0 <= overlap_samples < window_samples:
        raise ValueError(f"cannot plan windows: {num_samples} samples, windows of {window_samples}, overlap "
                         f"{overlap_samples}, alignment {align}")
    if num_samples <= window_samples:
        return [(0, num_samples)]
    step = max(align, (window_samples - overlap_samples) // align * align)
    starts = range(0, num_samples - window_samples, step)  # every start whose window ends before the end
    last_start = -(-(num_samples - window_samples) // align) * align
    return [(start, start + window_samples) for start in starts] + [(last_start, num_samples)]


class WindowReader:
    """Reads windows of an open recording (or of its frames [first_frame, first_frame + num_frames)) at
    ``target_rate``.

    ``read(start, end)`` decodes only the input frames under [start, end) plus the resampler's reach on each side
    (reads are seeks within the file), mixes them to mono and resamples them: the result equals samples
    [start, end) of the whole recording (or segment) loaded and resampled at once. ``start`` must be a multiple of
    ``up`` (the reduced output/input rate ratio), which puts the window on the whole recording's output grid.
    ``num_samples`` is the recording's length at ``target_rate``.
    """

    def __init__(self, handle, name: str, target_rate: int, first_frame: int = 0, num_frames: int = -1):
        self.handle = handle
        self.name = name
        self.input_rate = handle.samplerate
        self.first_frame = first_frame
        self.input_frames = handle.frames - first_frame if num_frames < 0 else num_frames
        self.target_rate = target_rate
        self.up, self.down = rate_ratio(self.input_rate, target_rate)
        self.reach = -(-resample_reach(self.input_rate, target_rate) // self.down) * self.down  # whole periods
        self.num_samples = -(-self.input_frames * self.up // self.down)  # the resampler's ceil(N * up / down)

    def read(self, start: int, end: int) -> torch.Tensor:
        """Samples [start, end) at ``target_rate`` -> [end - start] float32."""
        if start % self.up or not 0 <= start < end <= self.num_samples:
            raise ValueError(f"window [{start}, {end}) must lie in [0, {self.num_samples}) and start on a multiple "
                             f"of {self.up}")
        first = max(0, start // self.up * self.down - self.reach)  # a multiple of down: on the output grid
        last = min(self.input_frames, -(-end * self.down // self.up) + self.reach)
        samples = read_frames(self.handle, self.name, self.first_frame + first, last - first)  # [C, n]
        if samples.shape[1] < last - first:
            raise DataError(f"{self.name}: the audio ends early (frame {self.first_frame + first + samples.shape[1]} "
                            f"of {self.first_frame + self.input_frames} the header announced)")
        offset = first * self.up // self.down  # output index of the first frame read
        return to_mono(samples, self.input_rate, self.target_rate)[start - offset:end - offset]


def energy_profile(reader: WindowReader, hop: int, block_samples: int) -> torch.Tensor:
    """Log energy of every ``hop`` samples of the recording at the model's rate (the last frame may be shorter),
    read in windows of about ``block_samples`` -> [ceil(num_samples / hop)] float32 dB (10 log10 of the mean
    power). One float per 10 ms frame: 1.4 MB for an hour."""
    block = max(hop, block_samples // math.lcm(hop, reader.up) * math.lcm(hop, reader.up))
    frames = []
    for start in range(0, reader.num_samples, block):
        samples = reader.read(start, min(start + block, reader.num_samples)).double()  # [n]
        full = samples.numel() // hop * hop
        power = samples[:full].view(-1, hop).square().mean(dim=1)  # [n // hop]
        if full < samples.numel():
            power = torch.cat([power, samples[full:].square().mean().view(1)])
        frames.append(10.0 * torch.log10(power + _POWER_FLOOR))
    return torch.cat(frames).float()


def local_noise_floor(profile_db: torch.Tensor, reach_frames: int) -> torch.Tensor:
    """The local noise floor of every frame of the profile [F] -> [F] dB: the louder of the quietest point within
    ``reach_frames`` before the frame (itself included) and the quietest within ``reach_frames`` after it, on the
    profile smoothed over FLOOR_SMOOTH_FRAMES; frames of digital silence are left out (+inf where a reach has
    nothing else). Taking the louder side follows a floor that steps at a pause: a pause filled with the next
    utterance's louder noise gets that noise's level as its floor, not the quieter one of the utterance before it.
    Speech needs a quiet point (a closure, a breath) within the reach on both sides, or its own level becomes the
    floor: recorded speech has them (an espeak-ng sentence of 9 s is one run, as with a 30 s reach), a level tone
    longer than the reach does not."""
    audible = profile_db > DIGITAL_SILENCE_DB  # [F]
    values = torch.where(audible, profile_db.double(), 0.0).view(1, 1, -1)
    pad = FLOOR_SMOOTH_FRAMES // 2
    total = torch.nn.functional.avg_pool1d(values, FLOOR_SMOOTH_FRAMES, 1, pad)  # [1, 1, F]: sums / width
    share = torch.nn.functional.avg_pool1d(audible.double().view(1, 1, -1), FLOOR_SMOOTH_FRAMES, 1, pad)
    smoothed = torch.where(share > 0, total / share.clamp_min(1e-9), math.inf).view(-1)  # [F] mean of audible frames
    rest = torch.full((reach_frames - 1,), math.inf, dtype=smoothed.dtype)
    quietest_before = -torch.nn.functional.max_pool1d(-torch.cat([rest, smoothed]).view(1, 1, -1), reach_frames, 1)
    quietest_after = -torch.nn.functional.max_pool1d(-torch.cat([smoothed, rest]).view(1, 1, -1), reach_frames, 1)
    return torch.maximum(quietest_before, quietest_after).view(-1)


def speech_runs(profile_db: torch.Tensor, threshold_db: float, reach_frames: int,
                min_pause_frames: int, min_speech_frames: int) -> list[tuple[int, int]]:
    """Frames of speech as runs [first, end) of the profile [F]: a frame is speech when it is not digital silence
    and exceeds its local noise floor (:func:`local_noise_floor` with ``reach_frames``) by ``threshold_db``; runs
    separated by fewer than ``min_pause_frames`` are joined; joined runs shorter than ``min_speech_frames`` are
    dropped."""
    if profile_db.numel() == 0:
        return []
    floor = local_noise_floor(profile_db, reach_frames)  # [F]
    speech = (profile_db > DIGITAL_SILENCE_DB) & (profile_db.double() > floor + threshold_db)  # [F]
    edges = torch.diff(torch.nn.functional.pad(speech.to(torch.int8), (1, 1)))  # +1 at run starts, -1 at ends
    starts, ends = (edges == 1).nonzero().view(-1), (edges == -1).nonzero().view(-1)  # [R] each
    if starts.numel() == 0:
        return []
    separate = (starts[1:] - ends[:-1]) >= min_pause_frames  # [R - 1]: a pause long enough between runs
    starts = starts[torch.cat([torch.tensor([True]), separate])]
    ends = ends[torch.cat([separate, torch.tensor([True])])]
    long_enough = (ends - starts) >= min_speech_frames
    return list(zip(starts[long_enough].tolist(), ends[long_enough].tolist()))


def audible_span(profile_db: torch.Tensor, first_frame: int, end_frame: int) -> tuple[int, int]:
    """Frames [first_frame, end_frame) of the profile [F] less the digital silence at either end: (first, end) of
    its frames above DIGITAL_SILENCE_DB, or the span itself when it has none."""
    audible = (profile_db[first_frame:end_frame] > DIGITAL_SILENCE_DB).nonzero().view(-1)  # [A]
    if audible.numel() == 0:
        return first_frame, end_frame
    return first_frame + int(audible[0]), first_frame + int(audible[-1]) + 1


def quiet_point(profile_db: torch.Tensor, first_frame: int, end_frame: int, span_frames: int) -> int:
    """The frame at the centre of the lowest-energy stretch of ``span_frames`` (moving mean of the dB profile)
    in [first_frame, end_frame), the one nearest the middle among equally quiet ones."""
    region = profile_db[first_frame:end_frame].double().view(1, 1, -1)
    smoothed = torch.nn.functional.avg_pool1d(region, span_frames, stride=1, padding=span_frames // 2,
                                              count_include_pad=False).view(-1)[:end_frame - first_frame]
    quietest = smoothed <= smoothed.min() + 1e-6
    frames = torch.arange(first_frame, end_frame, dtype=torch.float64)
    middle = (first_frame + end_frame - 1) / 2.0
    distance = torch.where(quietest, (frames - middle).abs(), torch.full_like(frames, math.inf))
    return first_frame + int(distance.argmin())


def stitched_windows(spans: list[tuple[int, int]], cut: str, profile_db: torch.Tensor | None, hop: int,
                     sample_rate: int, keep_from_ms: float = -math.inf,
                     keep_to_ms: float = math.inf) -> list[tuple[int, int, float, float]]:
    """Overlapping (start, end) sample spans in order -> (start, end, keep_start_ms, keep_end_ms): the keep ranges
    run from ``keep_from_ms`` to ``keep_to_ms`` and meet at one cut per overlap, its middle or (``cut`` 'quiet',
    with a profile) the centre of its quietest QUIET_SPAN_MS inside the overlap's middle half."""
    to_ms = 1000.0 / sample_rate
    cuts = []
    for (_, end), (next_start, _) in zip(spans, spans[1:]):
        middle = (next_start + end) / 2.0
        quarter = (end - next_start) // 4
        if cut == "quiet" and profile_db is not None and quarter >= hop:
            first, last = -(-(next_start + quarter) // hop), (end - quarter) // hop
            span = max(1, round(QUIET_SPAN_MS / 1000.0 * sample_rate / hop))
            middle = (quiet_point(profile_db, first, max(last, first + 1), span) + 0.5) * hop
        cuts.append(middle * to_ms)
    keep_from = [keep_from_ms] + cuts
    keep_to = cuts + [keep_to_ms]
    return [(start, end, low, high) for (start, end), low, high in zip(spans, keep_from, keep_to)]


def plan_recording(num_samples: int, options: LongFormOptions, hop: int, align: int, sample_rate: int,
                   profile_db: torch.Tensor | None) -> list[Window]:
    """The windows a recording is decoded in (module docstring). 'windows': fixed windows over the whole recording.
    'pauses': each speech run (``speech_runs`` on the profile) with ``margin_ms`` around it (never past the middle
    of the pause to the next run, which also bounds what it keeps), less the digital silence at its edges
    (``audible_span``), starts rounded down and ends up to the ``align`` grid, at least MIN_WINDOW_SECONDS long; a
    run longer than ``chunk_seconds`` is cut into overlapping windows; the last window of a segment records the
    pause to the next segment's speech (``pause_after_ms``). A recording without speech gets no window."""
    window_samples = round(options.chunk_seconds * sample_rate)
    overlap_samples = round(options.overlap_seconds * sample_rate)
    if options.segment == "windows":
        spans = plan_windows(num_samples, window_samples, overlap_samples, align)
        return [Window(index, *entry) for index, entry in enumerate(stitched_windows(spans, options.cut, profile_db,
                                                                                     hop, sample_rate))]
    frame_ms = 1000.0 * hop / sample_rate
    runs = speech_runs(profile_db, options.speech_threshold_db, round(FLOOR_REACH_SECONDS * 1000 / frame_ms),
                       round(options.min_pause_ms / frame_ms), max(1, round(MIN_SPEECH_MS / frame_ms)))
    before, after = (round(margin * sample_rate / 1000.0) for margin in options.margin_ms)
    shortest = round(MIN_WINDOW_SECONDS * sample_rate)
    to_ms = 1000.0 / sample_rate
    planned = []
    for index, (first, end) in enumerate(runs):
        low = 0 if index == 0 else (runs[index - 1][1] + first) * hop // 2  # middle of the pause before
        high = num_samples if index + 1 == len(runs) else (end + runs[index + 1][0]) * hop // 2
        start = max(low, first * hop - before)
        stop = min(high, num_samples, end * hop + after)
        audible_first, audible_end = audible_span(profile_db, start // hop, -(-stop // hop))
        start = max(start, audible_first * hop) // align * align
        stop = min(stop, -(-(audible_end * hop) // align) * align)
        stop = max(stop, min(num_samples, start + shortest))
        spans = [(start + a, start + b) for a, b in plan_windows(stop - start, window_samples, overlap_samples,
                                                                 align)]
        segment = stitched_windows(spans, options.cut, profile_db, hop, sample_rate,
                                   -math.inf if index == 0 else low * to_ms,
                                   math.inf if index + 1 == len(runs) else high * to_ms)
        pause_ms = 0.0 if index + 1 == len(runs) else (runs[index + 1][0] - end) * frame_ms
        planned += [entry + (0.0,) for entry in segment[:-1]] + [segment[-1] + (pause_ms,)]
    return [Window(index, *entry) for index, entry in enumerate(planned)]


Span = tuple[int, int]  # windows [first, last] of a plan decoded as one


def joined_window(windows: list[Window], span: Span) -> Window:
    """Windows [first, last] (neighbours of one plan) as one window: from the first's start to the last's end,
    keeping from the first's keep start to the last's keep end."""
    first, last = windows[span[0]], windows[span[1]]
    return Window(first.index, first.start, last.end, first.keep_start_ms, last.keep_end_ms, last.pause_after_ms)


def pooled_score(first: tuple[float, int], second: tuple[float, int]) -> float:
    """Two decodes' scores per token, (score, tokens) each, as one score per token: their token-weighted mean."""
    return (first[0] * first[1] + second[0] * second[1]) / max(1, first[1] + second[1])


def judge_pauses(windows: list[Window], judged_ms: tuple[float, float], longest_samples: int,
                 score: Callable[[list[Span]], list[tuple[float, int]]]) -> list[Span]:
    """Which judged pauses part segments: the plan's windows grouped into the spans that are decoded.

    A pause is judged when the window before it ends a segment and ``judged_ms[0] <= pause_after_ms <
    judged_ms[1]``. ``score(spans)`` decodes each span as one window -> (score per token, tokens) each. Rounds of
    agglomeration: every two neighbouring groups parted by a judged pause (and together at most
    ``longest_samples`` long) are decoded together; the gain of joining them is the joint score less the two
    groups' pooled score (:func:`pooled_score`); the pairs whose gain is positive and larger than both
    neighbouring pairs' (ties to the left) are joined, and the next round judges the new neighbours; until no
    join gains. A phrase cut at an inner pause reads better whole, two phrases read better apart: the model's own
    confidence tells a pause inside a sentence from one between sentences, which no threshold on its length can
    (docs/history.md, "Long recordings: pauses judged by the decoder").
    -> spans [(first, last)] covering every window once, in order."""
    low, high = judged_ms
    judged = [low <= window.pause_after_ms < high for window in windows]
    groups: list[Span] = [(index, index) for index in range(len(windows))]
    known = dict(zip(groups, score(groups)))
    while True:
        pairs = [k for k in range(len(groups) - 1) if judged[groups[k][1]]
                 and windows[groups[k + 1][1]].end - windows[groups[k][0]].start <= longest_samples]
        spans = [(groups[k][0], groups[k + 1][1]) for k in pairs]
        unknown = [span for span in spans if span not in known]
        known.update(zip(unknown, score(unknown)))
        gains = {k: known[span][0] - pooled_score(known[groups[k]], known[groups[k + 1]])
                 for k, span in zip(pairs, spans)}
        joins = {k for k, gain in gains.items()
                 if gain > 0 and gain >= gains.get(k - 1, -math.inf) and gain > gains.get(k + 1, -math.inf)}
        if not joins:
            return groups
        merged, k = [], 0
        while k < len(groups):
            merged.append((groups[k][0], groups[k + 1][1]) if k in joins else groups[k])
            k += 2 if k in joins else 1
        groups = merged


@dataclass(frozen=True)
class TimedUnit:
    """A stitching unit: a word (or a single token) with absolute times in ms (None without a CIF) and its
    tokens as (piece, start_ms, end_ms), the word separators before it in its window included."""

    text: str
    start_ms: float | None
    end_ms: float | None
    tokens: tuple[tuple[str, float, float], ...] = ()

    @property
    def centre_ms(self) -> float:
        return (self.start_ms + self.end_ms) / 2.0


def window_units(pieces: list[str], token_times: list[tuple[float, float]] | None, offset_ms: float,
                 by_words: bool) -> list[TimedUnit]:
    """A window's decoded pieces (and their times in ms from the window's start, or None) -> its units with times
    shifted by ``offset_ms``: words (``group_words``), each owning the tokens from after the previous word to its
    last one, or, with ``by_words`` False, every token with a surface form."""
    if token_times is not None and len(token_times) != len(pieces):
        raise ValueError(f"{len(pieces)} pieces but {len(token_times)} token times")
    times = [(start + offset_ms, end + offset_ms) for start, end in token_times] if token_times is not None else None

    def unit(text: str, first: int, last: int, owned_from: int) -> TimedUnit:
        if times is None:
            return TimedUnit(text, None, None)
        tokens = tuple((pieces[i], *times[i]) for i in range(owned_from, last + 1))
        return TimedUnit(text, times[first][0], times[last][1], tokens)

    if not by_words:
        return [unit(piece, index, index, index) for index, piece in enumerate(pieces) if piece]
    units, owned_from = [], 0
    for text, first, last in group_words(pieces):
        units.append(unit(text, first, last, owned_from))
        owned_from = last + 1
    return units


def keep_between(units: list[TimedUnit], start_ms: float, end_ms: float) -> list[TimedUnit]:
    """The units whose centre lies in [start_ms, end_ms)."""
    return [unit for unit in units if start_ms <= unit.centre_ms < end_ms]


def text_overlap_cut(previous: list[str], current: list[str], previous_tail: int,
                     current_head: int) -> tuple[int, int]:
    """Where text-only stitching passes from one window's words to the next's.

    ``previous_tail`` / ``current_head``: how many words at the end of ``previous`` / the start of ``current`` to
    search for the overlap. They are aligned by edit distance; at the middle matched pair (i, j) the transcript
    keeps previous[:i] and resumes with current[j:] (the matched word comes from ``current``). Without a match:
    half of each searched stretch. -> (words of ``previous`` to keep, index in ``current`` to resume at)."""
    previous_tail = min(previous_tail, len(previous))
    current_head = min(current_head, len(current))
    tail_start = len(previous) - previous_tail
    pairs = matched_pairs(previous[tail_start:], current[:current_head])
    if not pairs:
        return len(previous) - previous_tail // 2, current_head // 2
    i, j = pairs[len(pairs) // 2]
    return tail_start + i, j


@dataclass
class LongTranscript:
    """A recording's transcript. words / tokens: [{"word" | "token", "start_ms", "end_ms"}] in whole ms from the
    recording's start (None for a model without a CIF); seconds: wall time of reading, features and decoding;
    decode_seconds: the model's share."""

    text: str
    words: list[dict] | None
    tokens: list[dict] | None
    duration_s: float
    num_windows: int
    seconds: float
    decode_seconds: float
    units: list[TimedUnit] = field(repr=False, default_factory=list)


def has_word_separators(tokenizer: Tokenizer) -> bool:
    """Whether the vocabulary can write a word boundary: a whitespace piece or a ``▁``-marked one."""
    pieces = tokenizer.pieces(range(tokenizer.vocab_size))
    return any(piece and (piece.startswith(WORD_START) or not piece.replace(WORD_START, "").strip())
               for piece in pieces)


def transcribe_long(loaded: LoadedModel, source: str | Path | BinaryIO, device: torch.device,
                    options: LongFormOptions = LongFormOptions(), *, name: str | None = None,
                    start_s: float | None = None, end_s: float | None = None, method: str = "greedy",
                    beam_size: int = 4, lm=None, lm_weight: float = 0.0, length_candidates: int = 0,
                    count_prior: float = 0.0, ctc_score_weight: float = 0.0, hotwords: HotwordTrie | None = None,
                    lexicon: LexiconAutomaton | None = None, progress: Callable[[int, int], None] | None = None,
                    pause: Callable[[], None] | None = None) -> LongTranscript:
    """Transcribe an audio file or file object (or its segment [start_s, end_s)) window by window.

    A first pass reads the recording window by window for its energy profile (segmentation at pauses, quiet cuts);
    the second reads, featurises and decodes the planned windows, ``options.batch_windows`` at a time; with judged
    pauses (a model with scores, ``options.judged_pauses_ms``) the segments on either side of each judged pause are
    decoded together too, in rounds, and kept together where that scores better (:func:`judge_pauses`).
    ``progress(done, total)`` is called after each batch: windows decoded, and the decodes planned so far plus one
    for the stitching (the last call, after it, has done == total); ``pause()`` before each batch (the service's
    long-recording lane yields there to short requests). The search options (``method`` .. ``lexicon``) are
    :func:`transcribe_batches`'.
    """
    started = time.perf_counter()
    name = str(source) if name is None else name
    if loaded.cfg.data.kind != "manifest":
        raise DataError(f"{name}: this checkpoint was trained on toy features, not audio")
    rate = loaded.cfg.data.sample_rate
    hop = make_frontend(loaded.cfg).hop_length
    timed = bool(loaded.model.gives_timestamps)
    judged = timed and options.segment == "pauses" and options.judged_pauses_ms is not None
    by_words = has_word_separators(loaded.tokenizer)
    clock = frame_clock(loaded.cfg) if timed else None
    collate = Collator(loaded.tokenizer.pad_id)
    decoded: dict[Span, DecodedWindow] = {}
    decode_seconds = 0.0
    with open_audio(source, name) as handle, torch.no_grad():
        first_frame, count = segment_frames(handle.samplerate, handle.frames, start_s, end_s, name)
        reader = WindowReader(handle, name, rate, first_frame, count)
        align = math.lcm(hop, reader.up)
        profile = None
        if options.segment == "pauses" or options.cut == "quiet":
            profile = energy_profile(reader, hop, round(PROFILE_BLOCK_SECONDS * rate))
        plan_options = replace(options, min_pause_ms=options.judged_pauses_ms[0]) if judged else options
        windows = plan_recording(reader.num_samples, plan_options, hop, align, rate, profile)

        def span_samples(span: Span) -> int:
            return windows[span[1]].end - windows[span[0]].start

        def decode(spans: list[Span]) -> list[DecodedWindow]:
            """Decode the spans not decoded yet, ``options.batch_windows`` windows a batch, batched by length (less
            padding) -> every span's decode."""
            nonlocal decode_seconds
            missing = sorted((span for span in dict.fromkeys(spans) if span not in decoded), key=span_samples)
            lengths = [span_samples(span) for span in missing]  # shortest first
            done = 0
            for batch_size in padded_batches(lengths, options.batch_windows,
                                             round(options.batch_windows * BATCH_SECONDS_PER_WINDOW * rate)):
                if pause is not None:
                    pause()
                spans_now = missing[done:done + batch_size]
                done += batch_size
                batch = [joined_window(windows, span) for span in spans_now]
                items = []
                for window in batch:
                    waveform = reader.read(window.start, window.end)  # [N]
                    items.append({"id": str(window.index), "features": features_from_waveform(waveform, loaded),
                                  "tokens": torch.zeros(0, dtype=torch.long), "text": "",
                                  "duration_s": waveform.numel() / rate})
                transcripts, seconds = transcribe_batches(loaded.model, [collate(items)], device, method, beam_size,
                                                          lm, lm_weight, clock, length_candidates, count_prior,
                                                          ctc_score_weight, hotwords, lexicon)
                decode_seconds += seconds
                for span, window, transcript in zip(spans_now, batch, transcripts):
                    decoded[span] = decoded_window(window, transcript, loaded.tokenizer, rate, by_words)
                if progress is not None:  # the last step, stitching, is reported at the end
                    progress(len(decoded), len(decoded) + len(missing) - done + 1)
            return [decoded[span] for span in spans]

        if judged:
            groups = judge_pauses(windows, options.judged_pauses_ms, round(options.chunk_seconds * rate),
                                  lambda spans: [(d.score, len(d.tokens)) for d in decode(spans)])
        else:
            groups = [(index, index) for index in range(len(windows))]
        stitched: list[TimedUnit] = []
        previous: DecodedWindow | None = None
        previous_count = 0  # units at the end of ``stitched`` that come from the previous window (text stitching)
        for current in decode(groups):
            if timed:
                stitched = stitch_by_times(stitched, [] if previous is None else previous.units, current.units,
                                           current.window)
            else:
                stitched, previous_count = stitch_by_text(stitched, previous_count,
                                                          None if previous is None else previous.window,
                                                          current.units, current.window)
            previous = current
        if progress is not None:
            progress(len(decoded) + 1, len(decoded) + 1)
    return _assemble(stitched, by_words, timed, reader.num_samples / rate, len(groups),
                     time.perf_counter() - started, decode_seconds)


@dataclass(frozen=True)
class DecodedWindow:
    """A decoded window: its units with absolute times (TimedUnit), its tokens (until <eos>) and the score per
    token of its hypothesis (None for a model that gives none)."""

    window: Window
    units: list[TimedUnit]
    tokens: list[int]
    score: float | None


def decoded_window(window: Window, transcript, tokenizer: Tokenizer, rate: int, by_words: bool) -> DecodedWindow:
    """A window's Transcript (decode/search.py) -> its DecodedWindow: the tokens until <eos>, as tokenizer.decode
    reads them, as units shifted to the window's start."""
    tokens = tokenizer.until_eos(transcript.hyp_tokens)
    times = None if transcript.token_times is None else transcript.token_times[:len(tokens)]
    units = window_units(tokenizer.pieces(tokens), times, window.start * 1000.0 / rate, by_words)
    return DecodedWindow(window, units, tokens, transcript.score)


def padded_batches(lengths: list[int], batch_windows: int, budget_samples: int) -> list[int]:
    """Window lengths in samples, shortest first -> the sizes of consecutive batches: at most ``batch_windows``
    windows, and at most ``budget_samples`` of padded audio (windows x the longest of them), a longer window alone.
    Activations grow with a batch's padded size, so joined windows of up to chunk_seconds cost no more memory
    than ``batch_windows`` windows of BATCH_SECONDS_PER_WINDOW."""
    sizes, start = [], 0
    while start < len(lengths):
        size = 1
        while (size < batch_windows and start + size < len(lengths)
               and (size + 1) * lengths[start + size] <= budget_samples):
            size += 1
        sizes.append(size)
        start += size
    return sizes


def same_unit(first: TimedUnit, second: TimedUnit) -> bool:
    """Two windows' estimates of one unit: their spans overlap by at least half of the shorter one."""
    overlap = min(first.end_ms, second.end_ms) - max(first.start_ms, second.start_ms)
    shorter = min(first.end_ms - first.start_ms, second.end_ms - second.start_ms)
    return overlap > 0 and overlap >= 0.5 * shorter


def stitch_by_times(stitched: list[TimedUnit], previous_units: list[TimedUnit], units: list[TimedUnit],
                    window: Window) -> list[TimedUnit]:
    """Append the units of ``window`` whose centre lies in its keep range to ``stitched`` (which ends with the
    previous window's kept units; ``previous_units`` are all of that window's units).

    At a cut shared with the previous window, one unit the two windows both heard may have its two centre
    estimates on either side of the cut: kept by both (the previous window's last kept unit and this window's
    first are :func:`same_unit`) or by neither (the previous window's first unit past the cut and this window's
    last unit before it). Such a pair is one unit, kept once: from the previous window when the mean of the two
    centres lies before the cut, else from this window. The junction is then made ordered (``append_in_order``)."""
    cut = window.keep_start_ms
    kept = keep_between(units, cut, window.keep_end_ms)
    if previous_units and math.isfinite(cut):
        past_cut = [unit for unit in previous_units if unit.centre_ms >= cut]  # left to this window
        before_cut = [unit for unit in units if unit.centre_ms < cut]  # left to the previous window
        if stitched and kept and same_unit(stitched[-1], kept[0]):  # kept twice
            if (stitched[-1].centre_ms + kept[0].centre_ms) / 2 < cut:
                kept = kept[1:]
            else:
                stitched = stitched[:-1]
        elif past_cut and before_cut and same_unit(past_cut[0], before_cut[-1]):  # kept by neither
            if (past_cut[0].centre_ms + before_cut[-1].centre_ms) / 2 < cut:
                stitched = append_in_order(stitched, past_cut[:1])
            else:
                kept = before_cut[-1:] + kept
    return append_in_order(stitched, kept)


def append_in_order(stitched: list[TimedUnit], units: list[TimedUnit]) -> list[TimedUnit]:
    """``stitched`` + ``units`` (centres in order), with the junction's times made ordered: when the first new
    unit starts before the last stitched one ends (two windows' estimates), both meet at the middle of the
    overlap, clipped to [last start, first end], and their tokens are clipped to it."""
    if not stitched or not units or units[0].start_ms >= stitched[-1].end_ms:
        return stitched + units
    last, first = stitched[-1], units[0]
    meet = min(max((last.end_ms + first.start_ms) / 2.0, last.start_ms), first.end_ms)
    last = replace(last, end_ms=meet, tokens=tuple((p, min(a, meet), min(b, meet)) for p, a, b in last.tokens))
    first = replace(first, start_ms=meet, tokens=tuple((p, max(a, meet), max(b, meet)) for p, a, b in first.tokens))
    return stitched[:-1] + [last, first] + units[1:]


def stitch_by_text(stitched: list[TimedUnit], previous_count: int, previous: Window | None, units: list[TimedUnit],
                   window: Window) -> tuple[list[TimedUnit], int]:
    """Text-only stitching (models without a CIF). ``stitched`` ends with ``previous_count`` units of the
    ``previous`` window. A window that does not overlap it is appended; otherwise :func:`text_overlap_cut` finds
    the cut among the words expected in the overlap (the overlap's share of each window's words, widened), the
    previous window's words after it are dropped and the window's words from it on appended.
    -> (stitched, units of ``window`` at its end)."""
    if previous is None or window.start >= previous.end:
        return stitched + units, len(units)
    tail = stitched[len(stitched) - previous_count:]
    overlap = previous.end - window.start
    expected_previous = previous_count * overlap / (previous.end - previous.start)
    expected_current = len(units) * overlap / (window.end - window.start)
    keep, resume = text_overlap_cut([u.text for u in tail], [u.text for u in units],
                                    math.ceil(expected_previous * TEXT_SEARCH_WIDENING) + 1,
                                    math.ceil(expected_current * TEXT_SEARCH_WIDENING) + 1)
    return stitched[:len(stitched) - previous_count + keep] + units[resume:], len(units) - resume


def _assemble(units: list[TimedUnit], by_words: bool, timed: bool, duration_s: float,
              num_windows: int, seconds: float, decode_seconds: float) -> LongTranscript:
    """Stitched units -> text (words joined by single spaces, or tokens joined without separator), words and
    tokens with whole-ms times."""
    text = (" " if by_words else "").join(unit.text for unit in units)
    words = tokens = None
    if timed:
        token_list = [token for unit in units for token in unit.tokens]
        pieces = [piece for piece, _, _ in token_list]
        token_times = [(start, end) for _, start, end in token_list]
        tokens = token_entries(pieces, token_times)
        words = ([{"word": unit.text, "start_ms": round(unit.start_ms), "end_ms": round(unit.end_ms)}
                  for unit in units] if by_words else word_times(pieces, token_times))
    return LongTranscript(text, words, tokens, duration_s, num_windows, seconds, decode_seconds, units)
