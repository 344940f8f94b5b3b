"""Voice activity: the energy profile of a recording (one dB value per 10 ms frame), the local noise floor, the runs
of speech above it, and the quiet points where overlapping windows are cut (the package docstring: "A local noise
floor", "Digital silence")."""

from __future__ import annotations

import math

import torch

from paraformer_asr.decode.longform.reader import WindowReader

FLOOR_REACH_SECONDS = 2.0  # a frame's noise floor: the quietest point within this reach on either side ...
FLOOR_SMOOTH_FRAMES = 3  # ... of the profile smoothed over this many frames (docs/history.md, "A local noise floor")
MIN_SPEECH_MS = 50.0  # shorter speech runs between pauses are taken for clicks and dropped
_POWER_FLOOR = 1e-12  # before the log of a frame's power (digital silence: -120 dB)
DIGITAL_SILENCE_DB = -80.0  # 10 ms frames at or below this (RMS 1e-4, about 3 steps of 16-bit PCM) are digital silence


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
