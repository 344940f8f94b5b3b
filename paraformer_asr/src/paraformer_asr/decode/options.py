"""The decoding options shared by eval.py, infer.py and serve.py: one dataclass and one argparse helper, so that
every decoding eval.py can score, infer.py and the service can run."""

from __future__ import annotations

from dataclasses import dataclass

from paraformer_asr.data.setup import training_transcripts
from paraformer_asr.decode.lm_fusion import build_token_lm
from paraformer_asr.errors import ConfigError

METHODS = ("greedy", "beam")


@dataclass(frozen=True)
class DecodingOptions:
    """method: 'greedy' or 'beam'; beam_size: hypotheses kept by beam search; lm_order: with 'beam', the order of a
    token n-gram LM estimated from the checkpoint's training transcripts and fused by shallow fusion (0: none);
    lm_weight: its fusion weight. ConfigError naming the option for a bad value."""

    method: str = "greedy"
    beam_size: int = 4
    lm_order: int = 0
    lm_weight: float = 0.3

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"--decode must be one of {METHODS}, got {self.method!r}")
        if self.beam_size < 1:
            raise ConfigError(f"--beam-size must be >= 1, got {self.beam_size}")
        if self.lm_order < 0 or self.lm_weight < 0 or (self.lm_order > 0 and self.method != "beam"):
            raise ConfigError("--lm-order and --lm-weight must be >= 0, and an LM needs --decode beam")

    @property
    def effective_beam_size(self) -> int:
        return self.beam_size if self.method == "beam" else 1

    def search_arguments(self, loaded) -> dict:
        """The keyword arguments of transcribe_batches / transcribe_long for the model ``loaded``: method,
        beam_size, lm (built here from its training transcripts, or None) and lm_weight (0 without an LM)."""
        lm = None
        if self.lm_order > 0:
            lm = build_token_lm(training_transcripts(loaded.cfg), loaded.tokenizer, self.lm_order)
        return {"method": self.method, "beam_size": self.beam_size, "lm": lm,
                "lm_weight": self.lm_weight if lm is not None else 0.0}


def add_decoding_arguments(parser) -> None:
    """--decode, --beam-size, --lm-order, --lm-weight (see :class:`DecodingOptions`)."""
    defaults = DecodingOptions()
    group = parser.add_argument_group("decoding (the same options in eval.py, infer.py and serve.py)")
    group.add_argument("--decode", choices=METHODS, default=defaults.method)
    group.add_argument("--beam-size", type=int, default=defaults.beam_size)
    group.add_argument("--lm-order", type=int, default=defaults.lm_order,
                       help="with --decode beam: fuse a token n-gram LM of this order (over the checkpoint's "
                            "characters or subword units), estimated from its training transcripts (0 = no LM)")
    group.add_argument("--lm-weight", type=float, default=defaults.lm_weight, help="shallow-fusion weight of the LM")


def decoding_options(args) -> DecodingOptions:
    """argparse namespace (see :func:`add_decoding_arguments`) -> DecodingOptions (ConfigError on bad values)."""
    return DecodingOptions(method=args.decode, beam_size=args.beam_size, lm_order=args.lm_order,
                           lm_weight=args.lm_weight)
