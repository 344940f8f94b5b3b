"""Band-limited resampling by windowed-sinc interpolation, in torch.

Output sample ``j`` of a signal resampled from rate ``orig`` to rate ``new`` sits at input position
``j * orig / new``. After dividing both rates by their gcd (``up = new / g``, ``down = orig / g``) that position is
``q + r / up`` with integer ``q`` and phase ``r`` in ``[0, up)``, so there are only ``up`` distinct interpolation
kernels. Each kernel is a low-pass sinc with cutoff ``rolloff * min(orig, new) / 2`` Hz, i.e. just under the lower
of the two Nyquist frequencies, truncated after ``zero_crossings`` zero crossings on each side and tapered by a Kaiser
(default) or Hann window. The sinc is scaled so that its DC gain is 1.

Vectorised, two equivalent paths (no loop over samples):
- polyphase (usual rates, e.g. 44100 -> 16000 is up=160, down=441): the ``up`` outputs of one period read a window
  of ``down - 1 + K`` inputs, so one ``conv1d`` with ``up`` output channels and stride ``down`` computes everything;
- gather (reduced rates too large for one conv1d weight, e.g. 16001 -> 16000): the padded input is viewed as
  overlapping frames with ``Tensor.unfold`` (no copy), each output's frame is gathered by index and multiplied with
  the kernel of its phase, in chunks of outputs that only bound memory.

Speed perturbation (Kaldi-style, as in ESPnet and WeNet recipes) reuses the resampler: to play a signal ``factor``
times faster, treat its samples as recorded at ``round(sample_rate * factor)`` Hz and resample them to
``sample_rate``. The result is about ``N / factor`` samples long and every frequency is multiplied by ``factor``
(tempo and pitch change together).

Resampling a long recording block by block (decode/longform/reader.py) gives the same samples as resampling it
whole when each block starts at an input sample that is a multiple of ``down`` (its outputs then fall on the whole
signal's output grid) and carries ``resample_reach`` extra input samples on each side (the kernel's reach).
:class:`StreamingResampler` does the same for a signal that arrives in pieces (the service's ``/stream``).

Contracts:
    resample(waveform [..., N], orig_sample_rate, new_sample_rate) -> [..., ceil(N * new / orig)]
    speed_perturb(waveform [..., N], sr, factor)                   -> [..., ceil(N * sr / round(sr * factor))]
    rate_ratio(orig_sample_rate, new_sample_rate)                  -> (up, down), the reduced new / orig
    resample_reach(orig_sample_rate, new_sample_rate)              -> input samples on each side of an output's
                                                                      position that weigh on it (0 for equal rates)
    StreamingResampler(orig_sample_rate, new_sample_rate).accept(samples [n]) -> the output samples [m] they
        complete; .finish() -> the rest; all outputs together equal resample(whole signal) (to float rounding)
"""

from __future__ import annotations

import math

import torch

_MAX_POLYPHASE_WEIGHTS = 1 << 22  # up x (down - 1 + K) conv1d weights; larger reduced ratios use the gather path
_MAX_GATHER_ELEMENTS = 1 << 22  # per chunk: outputs x taps x leading elements


def resample(
    waveform: torch.Tensor,
    orig_sample_rate: int,
    new_sample_rate: int,
    *,
    zero_crossings: int = 16,
    rolloff: float = 0.945,
    window: str = "kaiser",
    kaiser_beta: float = 8.0,
) -> torch.Tensor:
    """Resample ``waveform`` [..., N] from ``orig_sample_rate`` to ``new_sample_rate`` along the last axis.

    Returns [..., ceil(N * new / orig)] in the input's dtype; the input itself when the rates are equal.
    """
    _check_rate("orig_sample_rate", orig_sample_rate)
    _check_rate("new_sample_rate", new_sample_rate)
    if not 0.0 < rolloff <= 1.0:
        raise ValueError(f"rolloff must be in (0, 1], got {rolloff}")
    if zero_crossings < 1:
        raise ValueError(f"zero_crossings must be >= 1, got {zero_crossings}")
    if waveform.dim() < 1:
        raise ValueError("resample expects a waveform with a time axis [..., N]")
    if orig_sample_rate == new_sample_rate:
        return waveform
    up, down = rate_ratio(orig_sample_rate, new_sample_rate)
    kernels, half_width = sinc_kernels(up, down, zero_crossings, rolloff, window, kaiser_beta)  # [up, K]
    kernels = kernels.to(waveform.dtype)
    num_out = -(-waveform.shape[-1] * up // down)  # ceil(N * up / down)
    if up * (down + kernels.shape[1]) <= _MAX_POLYPHASE_WEIGHTS:
        return _resample_polyphase(waveform, up, down, kernels, half_width, num_out)
    return _resample_gather(waveform, up, down, kernels, half_width, num_out)


def rate_ratio(orig_sample_rate: int, new_sample_rate: int) -> tuple[int, int]:
    """(up, down) = new / orig reduced by their gcd: output j sits at input position j * down / up."""
    _check_rate("orig_sample_rate", orig_sample_rate)
    _check_rate("new_sample_rate", new_sample_rate)
    divisor = math.gcd(orig_sample_rate, new_sample_rate)
    return new_sample_rate // divisor, orig_sample_rate // divisor


def resample_reach(orig_sample_rate: int, new_sample_rate: int, zero_crossings: int = 16,
                   rolloff: float = 0.945) -> int:
    """Input samples on each side of an output's position that can weigh on it (0 when the rates are equal):
    the kernel of an output at ``q + r / up`` reads inputs ``q - half_width .. q + half_width + 1``."""
    if orig_sample_rate == new_sample_rate:
        return 0
    up, down = rate_ratio(orig_sample_rate, new_sample_rate)
    return _kernel_half_width(up, down, zero_crossings, rolloff) + 2


def speed_perturb(waveform: torch.Tensor, sample_rate: int, factor: float) -> torch.Tensor:
    """Play ``waveform`` [..., N] ``factor`` times faster (factor in (0, 2]; 1 returns the input itself)."""
    if not 0.0 < factor <= 2.0:
        raise ValueError(f"speed factor must be in (0, 2], got {factor}")
    played_at = round(sample_rate * factor)
    return resample(waveform, played_at, sample_rate)


class StreamingResampler:
    """``resample`` of a signal that arrives in pieces.

    Output j needs the inputs within ``resample_reach`` of its position j * down / up. :meth:`accept` gives the
    outputs whose inputs have all arrived, in whole periods of ``up`` outputs, so that the next block starts at an
    input sample that is a multiple of ``down`` (on the whole signal's output grid); it resamples only the inputs
    from a whole period of reach before that block on (the module docstring's block rule), and keeps those for the
    next call. :meth:`finish` gives the rest, the end zero-padded as :func:`resample` pads it.
    """

    def __init__(self, orig_sample_rate: int, new_sample_rate: int):
        self.up, self.down = rate_ratio(orig_sample_rate, new_sample_rate)
        self.orig_sample_rate, self.new_sample_rate = orig_sample_rate, new_sample_rate
        self.reach = -(-resample_reach(orig_sample_rate, new_sample_rate) // self.down) * self.down  # whole periods
        self.buffer = torch.zeros(0)  # [n] input samples from input index `first` on
        self.first = 0  # a multiple of down
        self.received = 0  # input samples so far
        self.emitted = 0  # output samples given so far (a multiple of up until finish)

    def accept(self, samples: torch.Tensor) -> torch.Tensor:
        """samples [n] (the next input samples) -> the output samples [m] they complete."""
        if samples.dim() != 1:
            raise ValueError(f"StreamingResampler expects samples [n], got shape {tuple(samples.shape)}")
        if self.up == self.down:
            return samples
        self.buffer = torch.cat([self.buffer, samples.to(self.buffer.dtype)])
        self.received += samples.numel()
        complete = max(0, (self.received - self.reach) * self.up // self.down)  # outputs whose inputs are all here
        return self._emit(complete // self.up * self.up)

    def finish(self) -> torch.Tensor:
        """The end of the signal -> the output samples still pending."""
        if self.up == self.down:
            return torch.zeros(0)  # accept gave every sample as it came
        return self._emit(-(-self.received * self.up // self.down))  # resample's ceil(N * up / down) in all

    def _emit(self, end: int) -> torch.Tensor:
        """Outputs [emitted, end) -> [end - emitted]; the inputs no later output reads are dropped."""
        if end <= self.emitted:
            return self.buffer.new_zeros(0)
        offset = self.first * self.up // self.down  # output index of the buffer's first sample
        outputs = resample(self.buffer, self.orig_sample_rate, self.new_sample_rate)[self.emitted - offset:end - offset]
        self.emitted = end
        keep_from = max(0, end // self.up * self.down - self.reach)  # a multiple of down
        self.buffer = self.buffer[keep_from - self.first:]
        self.first = keep_from
        return outputs


def _resample_polyphase(
    waveform: torch.Tensor, up: int, down: int, kernels: torch.Tensor, half_width: int, num_out: int
) -> torch.Tensor:
    """One strided conv1d: block k of ``up`` outputs (j = k * up + r) reads input from k * down on.

    Output r of a block sits at ``k * down + offset_r + phase_r / up`` with ``offset_r = floor(r * down / up)``,
    so its kernel row is ``kernels[phase_r]`` shifted right by ``offset_r`` inside a row of ``down - 1 + K`` taps.
    """
    taps = kernels.shape[1]
    rows = torch.arange(up, dtype=torch.int64)  # [up] r
    offsets = rows * down // up  # [up]
    phases = rows * down % up  # [up]
    length = down - 1 + taps
    weight = torch.zeros(up, length, dtype=kernels.dtype)
    columns = offsets[:, None] + torch.arange(taps)[None, :]  # [up, K]
    weight.scatter_(1, columns, kernels[phases])  # [up, down - 1 + K]
    num_blocks = -(-num_out // up)
    num_in = waveform.shape[-1]
    right = max(0, (num_blocks - 1) * down + length - (num_in + half_width))
    flat = waveform.reshape(-1, 1, num_in)  # [B, 1, N]
    padded = torch.nn.functional.pad(flat, (half_width, right))  # [B, 1, N + half_width + right]
    blocks = torch.nn.functional.conv1d(padded, weight[:, None, :], stride=down)  # [B, up, >= num_blocks]
    out = blocks[:, :, :num_blocks].transpose(1, 2).reshape(flat.shape[0], -1)[:, :num_out]  # [B, num_out]
    return out.reshape(*waveform.shape[:-1], num_out)


def _resample_gather(
    waveform: torch.Tensor, up: int, down: int, kernels: torch.Tensor, half_width: int, num_out: int
) -> torch.Tensor:
    """For ratios whose reduced rates are too large for one conv1d weight: gather each output's input frame."""
    taps = kernels.shape[1]
    padded = torch.nn.functional.pad(waveform, (half_width, half_width + 2))  # [..., N + K]
    frames = padded.unfold(-1, taps, 1)  # [..., N + 1, K] view; frame q covers input q - half_width .. q + half_width + 1
    leading = max(1, waveform[..., 0].numel())
    chunk = max(1, _MAX_GATHER_ELEMENTS // (taps * leading))
    pieces = []
    for start in range(0, num_out, chunk):  # chunks only bound memory
        positions = torch.arange(start, min(start + chunk, num_out), dtype=torch.int64) * down  # j * down
        first = positions // up  # [n] q
        phase = positions % up  # [n] r
        gathered = frames.index_select(-2, first)  # [..., n, K]
        pieces.append((gathered * kernels[phase]).sum(-1))  # [..., n]
    return torch.cat(pieces, dim=-1)


def sinc_kernels(
    up: int, down: int, zero_crossings: int, rolloff: float, window: str, kaiser_beta: float
) -> tuple[torch.Tensor, int]:
    """Interpolation kernels for every phase.

    Returns (kernels [up, 2 * half_width + 2] float64, half_width). Row ``r``, tap ``m`` weights input sample
    ``q - half_width + m`` for an output at position ``q + r / up`` (input-sample units).
    """
    cutoff = _cutoff(up, down, rolloff)
    half_width = _kernel_half_width(up, down, zero_crossings, rolloff)
    taps = torch.arange(2 * half_width + 2, dtype=torch.float64) - half_width  # [K] offsets from q
    phases = torch.arange(up, dtype=torch.float64) / up  # [up] r / up
    distance = taps[None, :] - phases[:, None]  # [up, K] input-sample distance from the output position
    scaled = distance * cutoff  # in zero crossings of the sinc
    inside = scaled.abs() < zero_crossings
    taper = _window(scaled / zero_crossings, window, kaiser_beta)  # [up, K]
    kernels = cutoff * torch.special.sinc(scaled) * taper * inside
    return kernels, half_width


def _cutoff(up: int, down: int, rolloff: float) -> float:
    """Twice the low-pass cutoff frequency, in cycles per input sample."""
    return min(up, down) * rolloff / down


def _kernel_half_width(up: int, down: int, zero_crossings: int, rolloff: float) -> int:
    """Input samples on each side of an output's position inside the sinc's ``zero_crossings`` zero crossings."""
    return math.ceil(zero_crossings / _cutoff(up, down, rolloff))


def _window(position: torch.Tensor, window: str, kaiser_beta: float) -> torch.Tensor:
    """Symmetric window evaluated at ``position`` in [-1, 1] (1 at 0, ends at +-1); values outside are clamped."""
    position = position.clamp(-1.0, 1.0)
    if window == "kaiser":
        argument = kaiser_beta * torch.sqrt(1.0 - position**2)
        return torch.special.i0(argument) / torch.special.i0(torch.tensor(kaiser_beta, dtype=position.dtype))
    if window == "hann":
        return torch.cos(position * (math.pi / 2)) ** 2
    raise ValueError(f"window must be 'kaiser' or 'hann', got {window!r}")


def _check_rate(name: str, rate: int) -> None:
    if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
        raise ValueError(f"{name} must be a positive integer, got {rate!r}")
