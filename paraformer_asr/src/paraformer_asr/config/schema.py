"""The config's sections as dataclasses: every key, its type, its default and (``choices``) its allowed values;
``Config`` holds one of each section."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Optional

SUBSAMPLING_FACTORS = {"none": 1, "2x": 2, "4x": 4}


def min_input_frames(factor: int) -> int:
    """The shortest input that still leaves one frame after ``factor`` subsampling: each stride-2 3-tap conv maps
    L -> (L - 1) // 2 (models/encoder.py, ``subsampled_lengths``), so one frame out of a conv needs 2 L + 1 in."""
    frames = 1
    for _ in range(int(math.log2(factor))):
        frames = 2 * frames + 1
    return frames


MIN_INPUT_FRAMES = {factor: min_input_frames(factor) for factor in SUBSAMPLING_FACTORS.values()}
MODEL_TYPES = ("paraformer", "transformer_ar")
CTC_COMBINATIONS = ("add", "interpolate")
GLANCING_LOSSES = ("all", "unglanced")
CTC_NORMALIZATIONS = ("token", "utterance")
PREDICTORS = ("cif", "ctc")
CTC_QUERIES = ("states", "posteriors")
DECODE_METHODS = ("greedy", "beam")


def _choices(*values: str) -> dict:
    return {"choices": values}


@dataclass
class RunConfig:
    name: str = "paraformer"
    output_dir: str = "runs"
    seed: int = 0
    device: str = field(default="auto", metadata=_choices("auto", "cpu", "cuda"))
    num_threads: int = 0  # CPU threads for torch; 0 = torch's default. 1 is fastest on a busy shared CPU.


@dataclass
class ToyDataConfig:
    """Synthetic 'speech-like' task (see data/toy.py)."""

    alphabet: str = "abcdefghijklmnopqrst"
    feature_dim: int = 40
    num_train: int = 4000
    num_val: int = 300
    num_test: int = 300
    min_tokens: int = 4
    max_tokens: int = 12
    min_frames_per_token: int = 6
    max_frames_per_token: int = 12
    transition_frames: int = 2
    noise_std: float = 0.15
    seed: int = 1234


@dataclass
class SpecAugmentConfig:
    """Frequency/time masking for real speech, training only; all zeros = off."""

    freq_masks: int = 0
    freq_width: int = 0
    time_masks: int = 0
    time_width: int = 0


@dataclass
class VoicePerturbConfig:
    """Random voice differences on the log-mel features, training only (data/frontend.py, VoicePerturb); all
    zeros = off."""

    max_warp: float = 0.0  # frequency warp alpha ~ U(1 - max_warp, 1 + max_warp), e.g. 0.1
    envelope_terms: int = 0  # cosine terms of the random spectral envelope (0 level, 1 tilt, ...), e.g. 4
    envelope_max_db: float = 0.0  # largest amplitude of each term in dB, e.g. 6


NOISE_KINDS = ("white", "pink", "babble")


@dataclass
class ReverbConfig:
    """A synthetic room: the waveform convolved with a random impulse response (data/augment.py)."""

    p: float = 0.0  # probability per training item and epoch; 0 = off
    rt60_s: list[float] = field(default_factory=lambda: [0.2, 0.8])  # reverberation time drawn in [low, high] s
    drr_db: list[float] = field(default_factory=lambda: [0.0, 12.0])  # direct-to-reverberant ratio in [low, high] dB
    early_reflections: int = 4  # discrete echoes 1-50 ms after the direct sound


@dataclass
class NoiseConfig:
    """Additive noise at a random signal-to-noise ratio (data/augment.py)."""

    p: float = 0.0  # probability per training item and epoch; 0 = off
    snr_db: list[float] = field(default_factory=lambda: [5.0, 30.0])  # SNR drawn in [low, high] dB
    kinds: list[str] = field(default_factory=lambda: list(NOISE_KINDS))  # one drawn uniformly: white, pink, babble
    babble_voices: int = 3  # babble: this many other training utterances summed


@dataclass
class TelephoneConfig:
    """A telephone channel: 8 kHz, 300-3400 Hz, 8-bit mu-law (data/augment.py)."""

    p: float = 0.0  # probability per training item and epoch; 0 = off
    mu_law: bool = True  # also encode and decode with 8-bit mu-law companding at 8 kHz


@dataclass
class MicrophoneConfig:
    """Microphone colouring: a smooth random EQ curve (data/augment.py)."""

    p: float = 0.0  # probability per training item and epoch; 0 = off
    bands: int = 3  # random peaking bands, besides a low and a high shelf
    max_db: float = 6.0  # each band's and shelf's gain drawn in [-max_db, max_db]


@dataclass
class LoudnessConfig:
    """Recording level: a random gain and occasional clipping (data/augment.py)."""

    p: float = 0.0  # probability of a random gain per training item and epoch; 0 = off
    gain_db: list[float] = field(default_factory=lambda: [-12.0, 6.0])  # gain drawn in [low, high] dB
    clip_p: float = 0.0  # probability of hard clipping (after the gain); 0 = off
    clip_level: list[float] = field(default_factory=lambda: [0.3, 0.9])  # clipping level in [low, high] x the peak


@dataclass
class AugmentConfig:
    """Waveform augmentation toward real recordings, training only, in this order: room, noise, microphone,
    loudness, telephone (data/augment.py); every p 0 (the default) = off."""

    reverb: ReverbConfig = field(default_factory=ReverbConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    microphone: MicrophoneConfig = field(default_factory=MicrophoneConfig)
    loudness: LoudnessConfig = field(default_factory=LoudnessConfig)
    telephone: TelephoneConfig = field(default_factory=TelephoneConfig)

    def probabilities(self) -> dict[str, float]:
        """Every stage's probability by its key below ``data.augment`` ('reverb.p', ..., 'loudness.clip_p')."""
        stages = {name: getattr(self, name) for name in ("reverb", "noise", "microphone", "loudness", "telephone")}
        return {**{f"{name}.p": stage.p for name, stage in stages.items()}, "loudness.clip_p": self.loudness.clip_p}

    @property
    def enabled(self) -> bool:
        return any(p > 0 for p in self.probabilities().values())


@dataclass
class DataConfig:
    kind: str = field(default="toy", metadata=_choices("toy", "manifest"))
    toy: ToyDataConfig = field(default_factory=ToyDataConfig)
    train_manifest: Optional[str] = None
    val_manifest: Optional[str] = None
    test_manifest: Optional[str] = None
    sample_rate: int = 16000
    n_mels: int = 80
    skip_bad_files: bool = False
    spec_augment: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)
    tokenizer: str = field(default="char", metadata=_choices("char", "bpe", "unigram"))
    vocab_size: int = 256  # bpe / unigram: most token ids, specials included (a soft limit)
    word_units_max: int = 0  # bpe / unigram: at most this many distinct training words -> each word one unit (0: off)
    speed_perturb: Optional[list[float]] = None  # e.g. [0.9, 1.0, 1.1]: one factor per training item and epoch
    edge_pad_ms: float = 0.0  # training only: 0 .. this much quiet added before and after each item, drawn per epoch
    voice_perturb: VoicePerturbConfig = field(default_factory=VoicePerturbConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)  # training only: rooms, noise, microphones, ...
    utterance_mean: bool = False  # subtract each utterance's mean log-mel before the global normalisation


@dataclass
class StreamingConfig:
    """A chunked encoder that can be decoded while the audio arrives (models/streaming.py); off by default. Chunk
    sizes count encoder frames (40 ms each with 4x subsampling of 10 ms features)."""

    enabled: bool = False  # chunk attention masks in the encoder (and decoding as a stream possible)
    chunk_sizes: list[int] = field(default_factory=lambda: [4, 8, 16, 0])  # training: one drawn per batch; 0 = full
    left_chunks: Optional[int] = None  # chunks before its own that a frame attends to; null = all of them
    right_frames: int = 0  # look-ahead: frames past its chunk's end the first encoder layer attends to
    decode_chunk_size: int = 16  # the chunk outside training (validation, eval.py, streams); 0 = full context
    two_pass: bool = False  # a stream's final transcript from one full-context pass over the whole utterance


@dataclass
class ModelConfig:
    type: str = field(default="paraformer", metadata=_choices(*MODEL_TYPES))
    d_model: int = 128
    num_heads: int = 4
    encoder_layers: int = 3
    decoder_layers: int = 2
    # Paraformer decoder only. 0: self-attention over the tokens; k > 0 (odd): SAN-M's FSMN memory in its place, a
    # depthwise convolution of k taps over the token axis (FunASR's Paraformer decoder; 11 there)
    decoder_fsmn_kernel: int = 0
    # Paraformer decoder only. true: sinusoidal positions added to its inputs; false: none, the order only from the
    # CIF embeddings (FunASR's Paraformer decoder adds none)
    decoder_positions: bool = True
    ffn_dim: int = 512
    dropout: float = 0.1
    subsampling: str = field(default="4x", metadata=_choices(*SUBSAMPLING_FACTORS))
    subsampling_channels: int = 32
    cif_kernel_size: int = 3
    cif_threshold: float = 1.0
    cif_tail_threshold: float = 0.5
    glancing_ratio: float = 0.5
    # all: the CE over every target position (FunASR's); unglanced: only where the decoder saw no target (GLAT's)
    glancing_loss: str = field(default="all", metadata=_choices(*GLANCING_LOSSES))
    label_smoothing: float = 0.1
    quantity_weight: float = 1.0
    ctc_weight: float = 0.0
    # add: ce + ctc_weight * ctc; interpolate: (1 - ctc_weight) * ce + ctc_weight * ctc (FunASR's); both model types
    ctc_combination: str = field(default="add", metadata=_choices(*CTC_COMBINATIONS))
    # token: the CTC loss summed over the batch divided by its target tokens; utterance: by its utterances (FunASR's)
    ctc_normalization: str = field(default="token", metadata=_choices(*CTC_NORMALIZATIONS))
    # false: CE mean per token, quantity loss mean per utterance; true: both divided by the target tokens (FunASR's)
    length_normalized_loss: bool = False
    # Paraformer token extraction: cif (integrate-and-fire) or ctc (the CTC path, Paraformer-v2; needs ctc_weight > 0)
    predictor: str = field(default="cif", metadata=_choices(*PREDICTORS))
    # ctc extractor's queries: states (mean encoder state per token) or posteriors (mean CTC posterior, projected)
    ctc_queries: str = field(default="states", metadata=_choices(*CTC_QUERIES))
    predictor_bias: int = 0  # 1: the CIF also fires for an <eos> after the last token (FunASR's predictor_bias)
    activation_checkpointing: bool = False
    streaming: StreamingConfig = field(default_factory=StreamingConfig)


@dataclass
class TrainConfig:
    epochs: int = 10
    max_steps: Optional[int] = None
    batch_size: int = 32
    eval_batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    grad_clip: float = 5.0
    amp: bool = False
    accumulate_steps: int = 1
    num_workers: int = 0
    log_every: int = 20
    checkpoint_every: int = 0
    max_bad_batches: int = 5
    compile: bool = False
    compile_backend: str = field(default="inductor", metadata=_choices("inductor", "aot_eager", "eager"))
    plot_utterances: int = 3
    keep_best: int = 1  # N > 1: also keep checkpoints/best_epoch{E}.pt of the N best epochs by validation CER
    calibrate_cif: bool = True  # Paraformer: refit the CIF's inference alpha scale on the validation set each epoch
    # the first N optimiser steps weight the decoder's loss 0: the CTC head (and the CIF's quantity loss) train first
    ctc_warmup_steps: int = 0
    freeze_encoder_steps: int = 0  # the first N optimiser steps leave the encoder's weights as they are (fine-tuning)
    # > 0: validate, save and decode an exponential moving average of the weights with this decay per optimiser
    # step (training/ema.py); 0: the trained weights themselves
    ema_decay: float = 0.0


@dataclass
class DecodeConfig:
    """The checkpoint's default decoding (decode/options.py; a flag of eval.py, infer.py or serve.py overrides it)."""

    method: str = field(default="greedy", metadata=_choices(*DECODE_METHODS))
    beam_size: int = 4
    lm_order: int = 0  # with method beam: a token n-gram LM of this order from the training transcripts (0: none)
    lm_weight: float = 0.3
    # Paraformer with the CIF: also decode the token counts N +- 1..k and keep the best-scoring (0: off) ...
    length_candidates: int = 0
    # ... less count_prior x its distance to the CIF's expected count (0: the scores alone pick the count)
    count_prior: float = 0.0
    # ... plus ctc_score_weight x each hypothesis's CTC log-likelihood per token (a model with a CTC head; 0: none;
    # the autoregressive baseline ranks its beams again with it)
    ctc_score_weight: float = 0.0
    # each summed score is divided by the token count to this power where hypotheses of different lengths compete
    # (the length candidates, the autoregressive beams; 1: per token)
    length_penalty: float = 1.0
    lexicon: bool = False  # Paraformer: only sentences of the training transcripts' words (decode/lexicon.py)
    # Paraformer with length candidates: every training transcript also scored whole beside the searched hypotheses
    # (decode/phrases.py)
    phrase_candidates: bool = False
    # at the end of training, choose method, lm_weight, length_candidates, count_prior and ctc_score_weight on the
    # validation set
    # (training/tuning.py) and store the choice in best.pt
    tune: bool = False


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def subsampling_factor(self) -> int:
        return SUBSAMPLING_FACTORS[self.model.subsampling]
