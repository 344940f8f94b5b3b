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

Contracts, module by module (in the order a recording passes through them):

options.py   (what the command lines and the service set)
    LongFormOptions(segment, chunk_seconds, overlap_seconds, cut, batch_windows, speech_threshold_db,
                    min_pause_ms, margin_ms, judged_pauses_ms)             checked on construction (ConfigError)
reader.py    (audio reading)
    WindowReader(handle, name, target_rate, first_frame=0, num_frames=-1).read(start, end) -> samples [end - start]
vad.py       (voice activity: the energy profile and the speech in it)
    energy_profile(reader, hop, block_samples)                            -> dB per hop [ceil(num_samples / hop)]
    local_noise_floor(profile [F], reach_frames)                          -> dB [F]: the louder of the quietest
                                                                             points within reach before and after
    speech_runs(profile [F], threshold_db, reach_frames, min_pause_frames, min_speech_frames) -> [(first, end)]
    audible_span(profile [F], first_frame, end_frame)                     -> the frames in it above digital silence
    quiet_point(profile [F], first_frame, end_frame, span_frames)         -> frame index
plan.py      (window planning)
    plan_windows(num_samples, window_samples, overlap_samples, align)     -> [(start, end)] sample spans
    stitched_windows(spans, cut, profile | None, hop, sample_rate, keep_from_ms, keep_to_ms)
                                                                          -> [(start, end, keep_start_ms, keep_end_ms)]
    plan_recording(num_samples, options, hop, align, sample_rate, profile | None) -> list[Window]
pauses.py    (judged pauses)
    joined_window(windows, (first, last))                                 -> Window spanning windows[first..last]
    pooled_score((score, tokens), (score, tokens))                        -> token-weighted mean score per token
    judge_pauses(windows, judged_ms, longest_samples, score(spans) -> [(score, tokens)]) -> [(first, last)]
stitch.py    (stitching)
    window_units(pieces, token_times | None, offset_ms, by_words)        -> list[TimedUnit]
    keep_between(units, start_ms, end_ms)                                  -> units whose centre is in [start, end)
    same_unit(first, second)                                               -> spans overlap by >= half the shorter
    stitch_by_times(stitched, previous_units, units, window)              -> stitched + the window's kept units
    append_in_order(stitched, units)                                       -> stitched + units, junction ordered
    text_overlap_cut(previous [n], current [m], previous_tail, current_head) -> (keep from previous, resume in current)
    stitch_by_text(stitched, previous_count, previous, units, window)     -> (stitched, units of window at its end)
transcribe.py (the two passes over a recording, batched decoding)
    padded_batches(lengths shortest first, batch_windows, budget_samples) -> batch sizes
    transcribe_long(loaded, source, device, options, ...)                 -> LongTranscript

The package itself offers what its callers use: the options and ``transcribe_long``.
"""

from paraformer_asr.decode.longform.options import (CUT_RULES, DEFAULT_OVERLAP_SHARE, SEGMENTATIONS,
                                                    LongFormOptions)
from paraformer_asr.decode.longform.transcribe import LongTranscript, transcribe_long

__all__ = ["CUT_RULES", "DEFAULT_OVERLAP_SHARE", "SEGMENTATIONS", "LongFormOptions", "LongTranscript",
           "transcribe_long"]
