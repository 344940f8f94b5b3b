"""Reading a recording window by window: each window's samples at the model's rate, equal to those of the whole
recording resampled at once, with only the window (and the resampler's reach) decoded from the file."""

from __future__ import annotations

import torch

from paraformer_asr.data.audio import read_frames, to_mono
from paraformer_asr.data.resample import rate_ratio, resample_reach
from paraformer_asr.errors import DataError


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
