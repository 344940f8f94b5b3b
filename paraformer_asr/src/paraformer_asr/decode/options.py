"""The decoding options shared by eval.py, infer.py and serve.py: one dataclass and one argparse helper, so that
every decoding eval.py can score, infer.py and the service can run.

An option left unset (None) comes from the checkpoint's ``decode`` config section (config/schema.py, DecodeConfig), so a
config can ship the decoding its model was measured with; a flag overrides it. The hotword list is the run's or the
request's, never a checkpoint's.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, fields, replace

from paraformer_asr.config import DECODE_METHODS, DecodeConfig, ModelConfig, ctc_score_missing
from paraformer_asr.data.setup import training_transcripts
from paraformer_asr.decode.hotwords import (DEFAULT_HOTWORD_MARGIN, DEFAULT_HOTWORD_WEIGHT, Hotword, HotwordTrie,
                                            read_hotwords)
from paraformer_asr.decode.lexicon import LexiconAutomaton, lexicon_words
from paraformer_asr.decode.lm_fusion import build_token_lm
from paraformer_asr.decode.phrases import training_phrases
from paraformer_asr.errors import ConfigError

RUN_OPTIONS = ("hotwords", "hotword_weight", "hotword_margin")  # given per run or request, never read from a checkpoint


@dataclass(frozen=True)
class DecodingOptions:
    """method: 'greedy' or 'beam'; beam_size: hypotheses kept by beam search; lm_order: with 'beam', the order of a
    token n-gram LM estimated from the checkpoint's training transcripts and fused by shallow fusion (0: none);
    lm_weight: its fusion weight; length_candidates: k > 0 also decodes k candidate counts either side of the token
    extractor's own (a Paraformer: the CIF's count +- 1..k, or the CTC extractor's greedy path under k blank offsets
    either way) and keeps the candidate with the best normalised score (length_penalty below), less count_prior x its
    distance to the extractor's expected count, plus ctc_score_weight x its CTC log-likelihood per token (a model with
    a CTC head; the autoregressive baseline's beams are ranked again with it); length_penalty: the power of the token
    count that divides each summed score where hypotheses of different lengths compete (1: per token, as said above);
    lexicon: a Paraformer's hypotheses are sentences of the words of its training transcripts where one of the
    counted length exists (decode/lexicon.py; greedy becomes beam 1 constrained); phrase_candidates: a Paraformer
    decoding length candidates also scores each of its training transcripts whole beside the searched hypotheses
    (decode/phrases.py; inert without length candidates or with hotwords, which take its place). None: the
    checkpoint's ``decode`` section (:meth:`resolve`). hotwords: the entries of a hotword list (decode/hotwords.py;
    None: no list), every search biased toward them (greedy becomes beam 1 with biasing); hotword_weight: the bonus
    per unit of a phrase listed without a weight of its own (the list's lines were read with it; the service reads
    its requests' lists with it);
    hotword_margin: a unit earns its bonus only where its log-prob is within this of the step's best (None: always).
    ConfigError naming the option for a bad value."""

    method: str | None = None
    beam_size: int | None = None
    lm_order: int | None = None
    lm_weight: float | None = None
    length_candidates: int | None = None
    count_prior: float | None = None
    ctc_score_weight: float | None = None
    lexicon: bool | None = None
    length_penalty: float | None = None
    phrase_candidates: bool | None = None
    hotwords: tuple[Hotword, ...] | None = None
    hotword_weight: float = DEFAULT_HOTWORD_WEIGHT
    hotword_margin: float | None = DEFAULT_HOTWORD_MARGIN

    def __post_init__(self) -> None:
        if self.method is not None and self.method not in DECODE_METHODS:
            raise ConfigError(f"--decode must be one of {DECODE_METHODS}, got {self.method!r}")
        if self.beam_size is not None and self.beam_size < 1:
            raise ConfigError(f"--beam-size must be >= 1, got {self.beam_size}")
        if (self.lm_order or 0) < 0 or (self.lm_weight or 0) < 0:
            raise ConfigError("--lm-order and --lm-weight must be >= 0")
        if self.method == "greedy" and (self.lm_order or 0) > 0:
            raise ConfigError("an LM needs --decode beam (--lm-order > 0 with greedy decoding)")
        if (self.length_candidates or 0) < 0:
            raise ConfigError(f"--length-candidates must be >= 0, got {self.length_candidates}")
        if (self.count_prior or 0) < 0:
            raise ConfigError(f"--count-prior must be >= 0, got {self.count_prior}")
        if (self.ctc_score_weight or 0) < 0:
            raise ConfigError(f"--ctc-score-weight must be >= 0, got {self.ctc_score_weight}")
        if self.length_penalty is not None and not (self.length_penalty >= 0 and math.isfinite(self.length_penalty)):
            raise ConfigError(f"--length-penalty must be a finite number >= 0, got {self.length_penalty}")
        if not (self.hotword_weight > 0 and math.isfinite(self.hotword_weight)):
            raise ConfigError(f"--hotword-weight must be a finite number > 0, got {self.hotword_weight}")
        if self.hotword_margin is not None and not (self.hotword_margin >= 0 and math.isfinite(self.hotword_margin)):
            raise ConfigError(f"--hotword-margin must be a finite number >= 0, got {self.hotword_margin}")

    def resolve(self, defaults: DecodeConfig) -> "DecodingOptions":
        """Every unset option from ``defaults`` (a checkpoint's ``cfg.decode``). Greedy decoding keeps no LM: a
        config's LM belongs to its beam search, so ``--decode greedy`` on a checkpoint that ships beam + LM decodes
        greedily without it."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in values.items():
            if value is None and name not in RUN_OPTIONS:
                values[name] = getattr(defaults, name)
        if values["method"] == "greedy" and self.lm_order is None:
            values["lm_order"] = 0
        return DecodingOptions(**values)

    @property
    def effective_beam_size(self) -> int:
        return self.beam_size if self.method == "beam" else 1

    def search_arguments(self, loaded) -> dict:
        """The keyword arguments of transcribe_batches / transcribe_long for the model ``loaded`` (options resolved
        against its config): method, beam_size, lm (built here from its training transcripts, or None), lm_weight (0
        without an LM), length_candidates, count_prior, ctc_score_weight, length_penalty, hotwords (the list's
        HotwordTrie over the model's units, None without a list or with an empty one), lexicon (the LexiconAutomaton
        of its training transcripts' words, or None) and phrases (the PhraseCandidates of its training transcripts,
        scored by that LM; None without length candidates, with hotwords or past ``MAX_PHRASES``); ConfigError when
        the model cannot decode that way (or a phrase has characters its units cannot write)."""
        options = self.resolve(loaded.cfg.decode)
        if options.length_candidates > 0 and loaded.cfg.model.type != "paraformer":
            raise ConfigError(f"--length-candidates needs a Paraformer (this checkpoint: {loaded.cfg.model.type}); "
                              "use 0")
        if options.ctc_score_weight > 0:
            check_ctc_score(loaded.cfg.model, options.method, options.length_candidates)
        lm = None
        if options.lm_order > 0:
            lm = build_token_lm(training_transcripts(loaded.cfg), loaded.tokenizer, options.lm_order)
        hotwords = self.hotword_trie(options.hotwords, loaded.tokenizer) if options.hotwords else None
        lexicon = None
        if options.lexicon:
            if loaded.cfg.model.type != "paraformer":
                raise ConfigError(f"--lexicon needs a Paraformer (this checkpoint: {loaded.cfg.model.type}, whose "
                                  "decoder learns the training words itself); use --no-lexicon")
            lexicon = LexiconAutomaton.build(lexicon_words(training_transcripts(loaded.cfg)), loaded.tokenizer)
        phrases = None
        if options.phrase_candidates:
            if loaded.cfg.model.type != "paraformer" or (self.phrase_candidates and not options.length_candidates):
                raise ConfigError("--phrase-candidates needs a Paraformer decoding length candidates (this checkpoint: "
                                  f"{loaded.cfg.model.type}, --length-candidates {options.length_candidates}); use "
                                  "--no-phrase-candidates")
            if hotwords is not None and self.phrase_candidates:
                raise ConfigError("--phrase-candidates does not combine with --hotwords (the phrases carry no "
                                  "hotword bonuses); use one or the other")
            if options.length_candidates > 0 and hotwords is None:
                phrases = training_phrases(training_transcripts(loaded.cfg), loaded.tokenizer, lm,
                                           asked=bool(self.phrase_candidates))
        return {"method": options.method, "beam_size": options.beam_size, "lm": lm,
                "lm_weight": options.lm_weight if lm is not None else 0.0,
                "length_candidates": options.length_candidates, "count_prior": options.count_prior,
                "ctc_score_weight": options.ctc_score_weight, "length_penalty": options.length_penalty,
                "hotwords": hotwords, "lexicon": lexicon, "phrases": phrases}


    def hotword_trie(self, entries, tokenizer) -> HotwordTrie:
        """The trie of hotword ``entries`` over ``tokenizer``'s units, gated by ``hotword_margin``."""
        return HotwordTrie.build(entries, tokenizer, self.hotword_margin)


def add_decoding_arguments(parser) -> None:
    """--decode, --beam-size, --lm-order, --lm-weight, --length-candidates, --count-prior, --ctc-score-weight,
    --length-penalty (see
    :class:`DecodingOptions`), --lexicon / --no-lexicon, each defaulting to the checkpoint's ``decode`` config
    section; --hotwords, --hotword-weight, --hotword-margin."""
    group = parser.add_argument_group("decoding (the same options in eval.py, infer.py and serve.py; each defaults "
                                      "to the checkpoint's 'decode' config section)")
    group.add_argument("--decode", choices=DECODE_METHODS, default=None)
    group.add_argument("--beam-size", type=int, default=None)
    group.add_argument("--lm-order", type=int, default=None,
                       help="with --decode beam: fuse a token n-gram LM of this order (over the checkpoint's "
                            "characters or subword units), estimated from its training transcripts (0 = no LM)")
    group.add_argument("--lm-weight", type=float, default=None, help="shallow-fusion weight of the LM")
    group.add_argument("--length-candidates", type=int, default=None,
                       help="Paraformer: also decode K candidate token counts either side of the extractor's own "
                            "(the CIF: N +- 1..K; the CTC extractor: the greedy path with the blank's log-prob "
                            "offset by up to K steps) and keep the best-scoring one (--length-penalty; 0 = off)")
    group.add_argument("--count-prior", type=float, default=None,
                       help="with --length-candidates: subtract this times each candidate's distance to the "
                            "extractor's expected token count from its score (0 = none)")
    group.add_argument("--ctc-score-weight", type=float, default=None,
                       help="a model trained with a CTC head: add this times each hypothesis's CTC log-likelihood per "
                            "token to its score, over the length candidates (Paraformer) or the beams "
                            "(autoregressive baseline) (0 = none)")
    group.add_argument("--length-penalty", type=float, default=None,
                       help="divide each hypothesis's summed score by its token count to this power where "
                            "hypotheses of different lengths compete (length candidates, autoregressive beams): 1 "
                            "= the mean per token, below 1 favours fewer tokens")
    group.add_argument("--lexicon", action=argparse.BooleanOptionalAction, default=None,
                       help="Paraformer: only sentences of the words of the checkpoint's training transcripts, where "
                            "one with the counted number of units exists (closed vocabularies: a count one off can "
                            "no longer spell a word that does not exist; words outside the training transcripts can "
                            "no longer be written); greedy decoding becomes beam 1 constrained")
    group.add_argument("--phrase-candidates", action=argparse.BooleanOptionalAction, default=None,
                       help="Paraformer with length candidates: also score every training transcript whole beside "
                            "the searched hypotheses, at the candidate of its length, or at its own length when that "
                            "is within a fifth of the CIF's count (phrase lists: a long phrase the beam lost is found "
                            "again)")
    group.add_argument("--hotwords", metavar="FILE", default=None,
                       help="bias the search toward the phrases of this file (names, terms; one a line, "
                            "phrase<TAB>weight for a weight of its own, # comments): each unit of a phrase earns a "
                            "bonus, given back when the match breaks; greedy decoding becomes beam 1 with biasing")
    group.add_argument("--hotword-weight", type=float, default=DEFAULT_HOTWORD_WEIGHT,
                       help="the bonus per unit of a phrase listed without a weight, in log-prob units (default "
                            f"{DEFAULT_HOTWORD_WEIGHT:g}; the service reads its requests' lists with it too)")
    group.add_argument("--hotword-margin", type=float, default=DEFAULT_HOTWORD_MARGIN,
                       help="a unit of a listed phrase earns its bonus only where the model's own log-prob for it is "
                            "within this of the step's best (default: "
                            f"{'none' if DEFAULT_HOTWORD_MARGIN is None else f'{DEFAULT_HOTWORD_MARGIN:g}'})")


def check_ctc_score(model: ModelConfig, method: str, length_candidates: int) -> None:
    """ConfigError naming --ctc-score-weight unless a CTC score has hypotheses to rank
    (:func:`paraformer_asr.config.ctc_score_missing`)."""
    missing = ctc_score_missing(model, method, length_candidates)
    if missing is not None:
        raise ConfigError(f"--ctc-score-weight needs {missing}; use 0")


def decoding_options(args) -> DecodingOptions:
    """argparse namespace (see :func:`add_decoding_arguments`) -> DecodingOptions (ConfigError on bad values, a
    hotword file that cannot be read or holds a bad line: the message names the file and the line)."""
    options = DecodingOptions(method=args.decode, beam_size=args.beam_size, lm_order=args.lm_order,
                              lm_weight=args.lm_weight, length_candidates=args.length_candidates,
                              count_prior=args.count_prior, ctc_score_weight=args.ctc_score_weight,
                              length_penalty=args.length_penalty,
                              lexicon=args.lexicon, phrase_candidates=args.phrase_candidates,
                              hotword_weight=args.hotword_weight,
                              hotword_margin=args.hotword_margin)
    if args.hotwords is None:
        return options
    return replace(options, hotwords=read_hotwords(args.hotwords, args.hotword_weight))
