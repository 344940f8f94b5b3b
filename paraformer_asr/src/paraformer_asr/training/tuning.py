"""Choosing a Paraformer's decoding on its validation set (``decode.tune``, scripts/tune_decoding.py).

How far to trust the CIF's count depends on the data: on random digit strings it counts right almost always and
an LM of the training transcripts knows nothing, while on command phrases in unheard accents the count is often
one off and an LM of the phrases knows which spellings exist. So the decoding is chosen per trained model, the way
the CIF's ``alpha_scale`` is calibrated: every setting of a small grid decodes the validation set. One-pass greedy
wins unless the lowest CER of the others is below (1 - ONE_PASS_MARGIN) times its own; otherwise, of the settings
whose CER is within ``TIE_TOLERANCE`` of the lowest (a difference of a few characters on a validation set is noise),
the one with the lowest validation WER (the earlier on a tie). The CTC token extractor
(``model.predictor: ctc``) is tuned with the same grid: its length candidates are its greedy path under blank offsets
(models/ctc_extractor.py), its expected count the plain greedy path's. The grid, in that order, around the
config's ``decode`` section:

    greedy, one pass                                   (no length candidates, one decoder pass)
    greedy       + length candidates, count prior p    for p in COUNT_PRIORS, CTC score c
    beam + LM w  + length candidates, count prior p    for w in LM_WEIGHTS, p in COUNT_PRIORS, CTC score max(c, w)

with c = CTC_SCORE_WEIGHT for a model with a CTC head (its log-likelihood of each hypothesis, per token, added to
the candidates' scores) and no CTC score for one without. One decoder pass is the Paraformer's reason to exist, so
a setting that runs the decoder 11 times or more must earn it: a quarter of the errors fewer on validation. Where
the count is the weakness (BPE 64 commands: 6.67 % one pass against 0.27 %; digits in unheard accents: 8.42 against
5.82 %) the search wins; where the units make counting easy (whole words on random keywords: 9.22 against 8.16 %,
9.69 against 8.50 %) one pass stays (validation CERs, docs/history.md, "Whole words as units"). Among near-ties
that all search, the validation WER decides (the CER tolerance hides a word in a hundred; the WER says whether the
words exist). Two choices come from the validation grids of earlier runs:

- The CTC score is not a choice of the grid: in each of the 47 grids that tried the candidates without and with it
  (digits, numbers, command phrases, unheard sentences, word times), the lowest validation CER had it.
- With an LM the CTC score weighs at least as much as the LM. The LM pulls the hypotheses toward sentences it has
  seen, and the count follows the word it prefers; the CTC head, which reads every frame, is what holds the count.
  Under an LM of weight 1, a CTC score of 1 against 0.5 gave validation CERs of 0.19 / 0.06 % against 0.25 / 0.27 %
  (commands) and 0.17 / 0.05 % against 0.16 / 0.13 % (unheard sentences); without an LM (digits, numbers) 1 did no
  better than 0.5 (docs/history.md, "The CTC score at least the LM's weight").
- LM weight 2 (with CTC score 2) joined weights 0.3 and 1 with the phrase candidates: on phrases read by many voices
  it lowered the mean validation CER of four checkpoints from 24.78 to 19.53 % and left the real selection set and
  unheard sentences level (docs/history.md, "Phrase candidates").

With the section's ``beam_size``, ``length_penalty``, ``phrase_candidates`` (on the settings with length candidates),
``lm_order`` (DEFAULT_LM_ORDER when it has none) and ``length_candidates``
(DEFAULT_SPREAD when 0; a tuned checkpoint's section holds its chosen spread, so tuning it again keeps that spread
unless one is given). Scores on the validation set are then in-sample for the choice; report the test split.
:func:`tune_checkpoint` refuses to choose on a test set (the test split, the config's test manifest, a manifest
whose file name says test: training/calibration.py, ``why_test_set``), whoever calls it.
"""

from __future__ import annotations

import dataclasses

import torch

from paraformer_asr.config import Config, DecodeConfig
from paraformer_asr.data.setup import training_transcripts
from paraformer_asr.decode.lm_fusion import build_token_lm
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.phrases import training_phrases
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import (evaluation_loader, evaluation_manifest, model_from_checkpoint,
                                      resolve_eval_checkpoint)
from paraformer_asr.training.calibration import why_test_set
from paraformer_asr.training.checkpointing import load_checkpoint
from paraformer_asr.training.evaluation import evaluate

LM_WEIGHTS = (0.3, 1.0, 2.0)
COUNT_PRIORS = (0.0, 0.3, 1.0)
CTC_SCORE_WEIGHT = 0.5  # with an LM: at least the LM's weight
DEFAULT_LM_ORDER = 6
DEFAULT_SPREAD = 5
TIE_TOLERANCE = 0.001  # CER, absolute: 0.1 points
ONE_PASS_MARGIN = 0.25  # share of one-pass greedy's validation CER that more decoder passes must remove


def decoding_grid(section: DecodeConfig, ctc_head: bool = False, spread: int | None = None) -> list[DecodeConfig]:
    """The settings tried, in the order of the module docstring (one-pass greedy first; the CTC score on every
    other setting of a model with a ``ctc_head``), length candidates +- ``spread`` (default: the section's, else
    DEFAULT_SPREAD); ``tune`` stays as the section has it."""
    if spread is not None and spread < 1:
        raise ConfigError(f"the spread of the length candidates (--length-candidates) must be >= 1, got {spread}")
    spread = spread or section.length_candidates or DEFAULT_SPREAD
    order = section.lm_order or DEFAULT_LM_ORDER
    ctc = CTC_SCORE_WEIGHT if ctc_head else 0.0
    plain = dataclasses.replace(section, method="greedy", lm_order=0, length_candidates=0, count_prior=0.0,
                                ctc_score_weight=0.0)
    candidates = [dataclasses.replace(plain, length_candidates=spread, count_prior=prior, ctc_score_weight=ctc)
                  for prior in COUNT_PRIORS]
    fused = [dataclasses.replace(section, method="beam", lm_order=order, lm_weight=weight, length_candidates=spread,
                                 count_prior=prior, ctc_score_weight=max(ctc, weight) if ctc_head else 0.0)
             for weight in LM_WEIGHTS for prior in COUNT_PRIORS]  # beam + LM over the candidates
    return [plain] + candidates + fused


def tune_decoding(loaded, loader, device: torch.device, spread: int | None = None) -> tuple[DecodeConfig, list[dict]]:
    """Decode ``loader`` (the validation set) with every setting of :func:`decoding_grid` around
    ``loaded.cfg.decode`` (length candidates +- ``spread`` when given) -> (the chosen setting (:func:`choose`), one
    row per setting: its fields plus cer, wer and chosen)."""
    grid = decoding_grid(loaded.cfg.decode, ctc_head=loaded.cfg.model.ctc_weight > 0, spread=spread)
    transcripts = training_transcripts(loaded.cfg)
    lms = {order: build_token_lm(transcripts, loaded.tokenizer, order)
           for order in {setting.lm_order for setting in grid if setting.lm_order > 0}}
    phrase_lists = {}  # LM order -> the training transcripts scored by that LM (decode/phrases.py)
    if loaded.cfg.decode.phrase_candidates:
        unscored = training_phrases(transcripts, loaded.tokenizer, None, asked=False)  # None past MAX_PHRASES
        if unscored is not None:
            phrase_lists = {0: unscored, **{order: unscored.scored_by(lm) for order, lm in lms.items()}}
    rows = []
    with torch.no_grad():
        for setting in grid:
            lm = lms.get(setting.lm_order)
            phrases = phrase_lists.get(setting.lm_order) if setting.length_candidates else None
            scores, _, _ = evaluate(loaded.model, loader, loaded.tokenizer, device, setting.method, setting.beam_size,
                                    lm, setting.lm_weight if lm is not None else 0.0,
                                    length_candidates=setting.length_candidates, count_prior=setting.count_prior,
                                    ctc_score_weight=setting.ctc_score_weight,
                                    length_penalty=setting.length_penalty,
                                    phrases=phrases)
            rows.append({**dataclasses.asdict(setting), "cer": scores["cer"], "wer": scores["wer"]})
    best = choose([row["cer"] for row in rows], [row["wer"] for row in rows])
    for index, row in enumerate(rows):
        row["chosen"] = index == best
    return grid[best], rows


def choose(cers: list[float], wers: list[float]) -> int:
    """The index chosen from the grid's validation CERs and WERs (index 0: one-pass greedy): 0 unless the lowest
    CER is below ``(1 - ONE_PASS_MARGIN)`` times its CER and beyond ``TIE_TOLERANCE`` of it; else the lowest WER
    among the settings within ``TIE_TOLERANCE`` of the lowest CER (the earliest on a tie)."""
    lowest = min(cers)
    if lowest >= min(cers[0] * (1 - ONE_PASS_MARGIN), cers[0] - TIE_TOLERANCE):
        return 0
    near = [index for index, cer in enumerate(cers) if cer <= lowest + TIE_TOLERANCE]
    return min(near, key=lambda index: (wers[index], index))


def tune_checkpoint(path, split: str = "val", batch_size: int = 64, device: torch.device | None = None,
                    spread: int | None = None, manifest: str | None = None,
                    length_penalty: float | None = None,
                    phrase_candidates: bool | None = None) -> tuple[dict, DecodeConfig, list[dict]]:
    """:func:`tune_decoding` for a checkpoint file or run folder on its ``split``, or on ``manifest`` when given (a
    selection set of other voices), with length candidates +- ``spread`` and the grid ranking them with
    ``length_penalty`` and ``phrase_candidates`` when given (else the checkpoint's section's) -> (its payload with the
    chosen ``decode`` section in its config and a ``decoding_tuned_on`` record, the choice, the grid's rows).
    ConfigError for the autoregressive baseline (nothing to tune) and for a test set
    (:func:`~paraformer_asr.training.calibration.why_test_set`): the choice is made on validation data."""
    device = device or torch.device("cpu")
    checkpoint = resolve_eval_checkpoint(path)
    payload = load_checkpoint(checkpoint)
    loaded = model_from_checkpoint(payload, checkpoint, device)
    if length_penalty is not None:
        DecodingOptions(length_penalty=length_penalty)  # ConfigError naming --length-penalty for a bad value
        loaded.cfg.decode = dataclasses.replace(loaded.cfg.decode, length_penalty=length_penalty)
    if phrase_candidates is not None:
        loaded.cfg.decode = dataclasses.replace(loaded.cfg.decode, phrase_candidates=phrase_candidates)
    if loaded.cfg.model.type != "paraformer":
        raise ConfigError(f"{checkpoint}: tuning the decoding needs a Paraformer (this one: {loaded.cfg.model.type})")
    data = evaluation_manifest(loaded, split, manifest) or f"toy:{split}"
    refuse_test_set(loaded.cfg, data)
    loader = evaluation_loader(loaded, split, manifest, batch_size)
    best, rows = tune_decoding(loaded, loader, device, spread)
    payload["config"]["decode"] = dataclasses.asdict(best)
    payload["decoding_tuned_on"] = {"data": data, "utterances": len(loader.dataset)}
    return payload, best, rows


def refuse_test_set(cfg: Config, data: str) -> None:
    """ConfigError when the set labelled ``data`` (a manifest path or 'toy:<split>') is a test set of ``cfg``
    (:func:`~paraformer_asr.training.calibration.why_test_set`): the decoding is chosen on validation data."""
    reason = why_test_set(cfg, data)
    if reason:
        raise ConfigError(f"refusing to choose the decoding on the test set ({data}: {reason}): its scores would be "
                          f"in-sample for the choice; choose on validation data (split 'val')")


def grid_table(rows: list[dict]) -> str:
    """The grid's rows as a Markdown table (the chosen one in bold)."""
    lines = ["| decode | beam | LM order | LM weight | length candidates | count prior | CTC score | CER | WER |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        mark = "**" if row["chosen"] else ""
        lines.append(f"| {mark}{row['method']}{mark} | {row['beam_size'] if row['method'] == 'beam' else 1} | "
                     f"{row['lm_order']} | {row['lm_weight'] if row['lm_order'] else 0:g} | "
                     f"{row['length_candidates']} | {row['count_prior']:g} | {row['ctc_score_weight']:g} | "
                     f"{100 * row['cer']:.2f} % | "
                     f"{100 * row['wer']:.2f} % |")
    return "\n".join(lines) + "\n"
