"""The onnxruntime backend: an export folder (deploy/export.py) loaded as a model with the PyTorch models' decoding
interface (models/interface.py), so every decoding path (batches, long recordings, the service) runs over it.

The Paraformer's decoding (greedy, beam, LM fusion, CIF times) and the autoregressive searches are the PyTorch
models' own code (ParaformerDecoding, ArDecoding: decode/paraformer_search.py, decode/ar_search.py); only the
network passes run in onnxruntime, on the CPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from paraformer_asr.checks import check_finite, lengths_to_mask
from paraformer_asr.config import Config, ModelConfig, config_from_dict
from paraformer_asr.data.frontend import FeatureNormalizer
from paraformer_asr.data.tokenizer import tokenizer_from_dict
from paraformer_asr.decode.ar_search import ArDecoding
from paraformer_asr.decode.paraformer_search import ParaformerDecoding
from paraformer_asr.deploy.export_format import (FORMAT, FORMAT_VERSION, KIND_KEY, OPSET, PRECISIONS, ROLE_KEY,
                                                 SIDECAR)
from paraformer_asr.deploy.graphs import PREDICTOR_GRAPHS
from paraformer_asr.deploy.onnx_extra import require_onnx
from paraformer_asr.errors import CheckpointError, ConfigError
from paraformer_asr.loaded_model import LoadedModel
from paraformer_asr.models.cif import CifOutput
from paraformer_asr.models.encoder import check_encodable, subsampled_lengths
from paraformer_asr.models.ctc_extractor import CtcExtraction
from paraformer_asr.models.paraformer import TokenExtraction

GRAPH_ROLES = {"paraformer": ("encoder", "predictor", "decoder"),
               "transformer_ar": ("encoder", "cross_kv", "decoder_step")}
OPTIONAL_ROLES = {"paraformer": ("ctc",), "transformer_ar": ("ctc",)}  # loaded when the sidecar names them
CPU = torch.device("cpu")


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(tensor.detach().cpu().numpy())


class Graph:
    """One onnxruntime session: ``graph(name=tensor, ...)`` -> its outputs as CPU torch tensors, in order."""

    def __init__(self, path: Path, num_threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = num_threads  # 0: onnxruntime's default (all cores)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only
        # idle worker threads sleep instead of spinning: spinning threads take the cores that other processes need
        # on a shared CPU (two threads were 3-9x slower than with this setting on the 2-core machine under load)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for unreadable or unsupported graphs
            raise CheckpointError(f"{path}: onnxruntime cannot load this graph ({str(exc).splitlines()[0]})") from None
        self.path = path

    def __call__(self, **inputs: torch.Tensor) -> list[torch.Tensor]:
        outputs = self.session.run(None, {name: _numpy(value) for name, value in inputs.items()})
        return [torch.from_numpy(output) for output in outputs]


@dataclass
class EncoderLengths:
    """What decode/timestamps.py asks of ``model.encoder``: the encoder frames of each input length."""

    subsampling_factor: int

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return subsampled_lengths(lengths, self.subsampling_factor)


class ExportedModel:
    """What both exported model kinds share: the encoder graph with the PyTorch encoder's input checks."""

    device = CPU
    calibrates_cif = False  # the CIF scale is fixed in the graphs: calibrate the checkpoint before exporting

    def __init__(self, cfg: Config, tokenizer, graphs: dict[str, Graph], precision: str = "fp32"):
        self.cfg: ModelConfig = cfg.model
        self.precision = precision  # of the graphs: fp32 or int8
        self.graphs = graphs
        self.vocab_size = tokenizer.vocab_size
        self.pad_id, self.eos_id, self.blank_id = tokenizer.pad_id, tokenizer.eos_id, tokenizer.blank_id
        self.encoder = EncoderLengths(cfg.subsampling_factor)

    def eval(self) -> "ExportedModel":
        return self

    def encode(self, features: torch.Tensor, feat_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features [B, T, F], feat_mask [B, T] -> (encoder_out [B, T', D], enc_mask [B, T'])"""
        check_finite(features, "encoder features")
        check_encodable(feat_mask.sum(dim=1), self.encoder.subsampling_factor)
        return tuple(self.graphs["encoder"](features=features.float(), feat_mask=feat_mask))

    def ctc_log_probs(self, encoder_out: torch.Tensor) -> torch.Tensor | None:
        """The ctc graph: encoder_out [B, T', D] -> log_probs [B, T', V]; None when the export has none."""
        return self.graphs["ctc"](encoder_out=encoder_out)[0] if "ctc" in self.graphs else None


class OnnxParaformer(ExportedModel, ParaformerDecoding):
    """The exported Paraformer: encoder -> predictor (the sidecar's ``predictor``: ``predictor_cif`` or
    ``predictor_ctc``) -> decoder graphs; decoding as the PyTorch model's."""

    def _predict(self, encoder_out: torch.Tensor, enc_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """The predictor graph's outputs by name (PREDICTOR_GRAPHS)."""
        return dict(zip(PREDICTOR_GRAPHS[self.cfg.predictor].outputs,
                        self.graphs["predictor"](encoder_out=encoder_out, enc_mask=enc_mask)))

    def cif_alphas(self, encoder_out: torch.Tensor, enc_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (raw alphas [B, T'] in threshold units, the calibrated ones), as the PyTorch model's."""
        outputs = self._predict(encoder_out, enc_mask)
        return outputs["alphas"] / self.cfg.cif_threshold, outputs["integrated_alphas"]

    def ctc_frame_queries(self, encoder_out: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
        """The CTC extractor's per-frame queries for its length candidates: the encoder states [B, T', D]. The map of
        ``model.ctc_queries: posteriors`` lives inside the predictor graph, so such an export decodes greedily only."""
        if self.cfg.ctc_queries != "states":
            raise ValueError(f"length candidates of an exported model with model.ctc_queries {self.cfg.ctc_queries!r} "
                             "are not exported: decode it greedily, or the PyTorch checkpoint with candidates")
        return encoder_out

    def decode_queries(self, embeddings: torch.Tensor, token_mask: torch.Tensor, encoder_out: torch.Tensor,
                       enc_mask: torch.Tensor) -> torch.Tensor:
        """The decoder graph: queries [B, N, D], token_mask [B, N] -> logits [B, N, V]."""
        (logits,) = self.graphs["decoder"](embeddings=embeddings, token_mask=token_mask, encoder_out=encoder_out,
                                           enc_mask=enc_mask)
        return logits

    def forward(self, features: torch.Tensor, feat_mask: torch.Tensor) -> tuple[torch.Tensor, TokenExtraction]:
        """Inference pass: -> (logits [B, N, V], extraction), N = max(num_tokens)."""
        encoder_out, enc_mask = self.encode(features, feat_mask)  # [B, T', D], [B, T']
        outputs = self._predict(encoder_out, enc_mask)
        num_tokens = outputs["num_tokens"]  # [B]
        width = int(num_tokens.max()) if num_tokens.numel() > 0 else 0
        token_mask = lengths_to_mask(num_tokens, width)  # [B, N]
        embeddings = outputs["embeddings"][:, :width]  # [B, N, D] of the graph's S >= N slots
        logits = self.decode_queries(embeddings, token_mask, encoder_out, enc_mask)  # [B, N, V]
        if self.cfg.predictor == "ctc":
            extraction = CtcExtraction(embeddings=embeddings, token_mask=token_mask, num_tokens=num_tokens,
                                       frame_starts=outputs["frame_starts"][:, :width],
                                       frame_ends=outputs["frame_ends"][:, :width],
                                       frame_weights=outputs["frame_weights"], frame_tokens=outputs["frame_tokens"])
        else:
            alphas = outputs["alphas"]  # [B, T']
            extraction = CifOutput(alphas=alphas, alpha_sum=(alphas / self.cfg.cif_threshold).sum(dim=1),
                                   integrated_alphas=outputs["integrated_alphas"], embeddings=embeddings,
                                   token_mask=token_mask, num_tokens=num_tokens,
                                   fire_frames=outputs["fire_frames"][:, :width])
        return logits, extraction


@dataclass
class OnnxDecoderCache:
    """The key/value cache of the exported decoder step: self_k / self_v [layers, B, H, L, Dh] (L tokens fed),
    cross_k / cross_v [layers, B, H, T', Dh], memory_mask [B, T']."""

    memory_mask: torch.Tensor
    cross_k: torch.Tensor
    cross_v: torch.Tensor
    self_k: torch.Tensor
    self_v: torch.Tensor

    @property
    def length(self) -> int:
        return self.self_k.shape[3]

    def reorder_rows(self, rows: torch.Tensor) -> "OnnxDecoderCache":
        """Self-attention entries of row ``rows[i]`` move to row i (rows of the same utterance, as beam search)."""
        return OnnxDecoderCache(self.memory_mask, self.cross_k, self.cross_v, self.self_k.index_select(1, rows),
                                self.self_v.index_select(1, rows))


class OnnxTransformerAR(ExportedModel, ArDecoding):
    """The exported autoregressive baseline: encoder, cross_kv and decoder_step graphs under the PyTorch searches."""

    def __init__(self, cfg: Config, tokenizer, graphs: dict[str, Graph], precision: str = "fp32"):
        super().__init__(cfg, tokenizer, graphs, precision)
        self.bos_id = tokenizer.bos_id
        self.never_emitted = [self.pad_id, self.bos_id] + ([self.blank_id] if self.blank_id is not None else [])

    def decode_step(self, encoder_out: torch.Tensor, prev_tokens: torch.Tensor, step: int,
                    cache: OnnxDecoderCache | None = None,
                    enc_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, OnnxDecoderCache]:
        """As TransformerAR.decode_step: -> (log_probs [B, V] float32, cache holding step + 1 tokens)."""
        if cache is None:
            if enc_mask is None:
                enc_mask = torch.ones(encoder_out.shape[:2], dtype=torch.bool)  # [B, T']
            cross_k, cross_v = self.graphs["cross_kv"](encoder_out=encoder_out)  # [layers, B, H, T', Dh]
            empty = cross_k.new_zeros(*cross_k.shape[:3], 0, cross_k.shape[4])  # [layers, B, H, 0, Dh]
            cache = OnnxDecoderCache(enc_mask, cross_k, cross_v, empty, empty)
        if cache.length != step:
            raise ValueError(f"decode_step: the cache holds {cache.length} tokens but step is {step}")
        log_probs, self_k, self_v = self.graphs["decoder_step"](
            token=prev_tokens[:, step:step + 1], self_k=cache.self_k, self_v=cache.self_v, cross_k=cache.cross_k,
            cross_v=cache.cross_v, enc_mask=cache.memory_mask)
        check_finite(log_probs, "decoder step log_probs")
        return log_probs, OnnxDecoderCache(cache.memory_mask, cache.cross_k, cache.cross_v, self_k, self_v)


MODEL_CLASSES = {"paraformer": OnnxParaformer, "transformer_ar": OnnxTransformerAR}


def read_sidecar(folder: Path) -> dict:
    """The checked sidecar of an export folder; CheckpointError naming the file for anything missing or foreign."""
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not an export folder (the onnx backend takes the folder written by "
                              f"scripts/export.py, not a .pt checkpoint)")
    path = folder / SIDECAR
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: {folder} is not an export folder written by scripts/export.py")
    try:
        sidecar = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(sidecar, dict) or sidecar.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a paraformer_asr export sidecar (no '{FORMAT}' format tag)")
    if sidecar.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} has format version {sidecar.get('format_version')}, expected {FORMAT_VERSION}")
    for key in ("model_kind", "graphs", "opset", "precision", "config", "tokenizer", "input_dim"):
        if key not in sidecar:
            raise CheckpointError(f"{path} is missing '{key}'")
    if sidecar["model_kind"] not in GRAPH_ROLES:
        raise CheckpointError(f"{path}: unknown model_kind {sidecar['model_kind']!r} "
                              f"(expected one of {tuple(GRAPH_ROLES)})")
    if sidecar["opset"] != OPSET or sidecar["precision"] not in PRECISIONS:
        raise CheckpointError(f"{path}: opset {sidecar['opset']} / precision {sidecar['precision']!r} is not "
                              f"supported (this version reads opset {OPSET}, precision one of {PRECISIONS})")
    return sidecar


def check_graph(path: Path, sidecar: dict, role: str) -> None:
    """CheckpointError naming ``path`` when the graph is missing, unreadable, of another model kind or role, or of
    another opset than the sidecar says."""
    import onnx

    if not path.is_file():
        raise CheckpointError(f"{path} is missing (listed in the sidecar as the '{role}' graph)")
    try:
        graph = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf decode errors of a damaged file
        raise CheckpointError(f"{path} is not a readable ONNX graph ({type(exc).__name__})") from None
    props = {prop.key: prop.value for prop in graph.metadata_props}
    if props.get(KIND_KEY) != sidecar["model_kind"] or props.get(ROLE_KEY) != role:
        raise CheckpointError(f"{path} is the '{props.get(ROLE_KEY)}' graph of a '{props.get(KIND_KEY)}' model, but "
                              f"the sidecar needs the '{role}' graph of a '{sidecar['model_kind']}' model")
    opset = next((entry.version for entry in graph.opset_import if entry.domain in ("", "ai.onnx")), None)
    if opset != sidecar["opset"]:
        raise CheckpointError(f"{path} uses opset {opset}, but the sidecar says {sidecar['opset']}: "
                              "re-export the checkpoint")


def load_exported_model(folder: str | Path, num_threads: int | None = None) -> LoadedModel:
    """An export folder -> LoadedModel whose ``model`` runs the graphs in onnxruntime with ``num_threads`` intra-op
    threads (None: the config's ``run.num_threads``; 0: onnxruntime's default); CheckpointError naming the file for
    a bad or mismatched folder."""
    require_onnx()
    folder = Path(folder)
    sidecar = read_sidecar(folder)
    try:
        cfg = config_from_dict(sidecar["config"])
    except ConfigError as exc:
        raise CheckpointError(f"{folder / SIDECAR}: stored config is invalid: {exc}") from None
    if cfg.model.type != sidecar["model_kind"]:
        raise CheckpointError(f"{folder / SIDECAR}: model_kind {sidecar['model_kind']!r} does not match its config's "
                              f"model.type {cfg.model.type!r}")
    threads = cfg.run.num_threads if num_threads is None else num_threads
    graphs = {}
    if not isinstance(sidecar["graphs"], dict):
        raise CheckpointError(f"{folder / SIDECAR}: 'graphs' must map graph names to files")
    optional = [role for role in OPTIONAL_ROLES[sidecar["model_kind"]] if role in sidecar["graphs"]]
    for role in (*GRAPH_ROLES[sidecar["model_kind"]], *optional):
        stem = f"predictor_{sidecar.get('predictor')}" if role == "predictor" else role  # the token extractor's graph
        name = sidecar["graphs"].get(stem)
        if not isinstance(name, str):
            raise CheckpointError(f"{folder / SIDECAR} names no '{stem}' graph")
        check_graph(folder / name, sidecar, stem)
        graphs[role] = Graph(folder / name, threads)
    tokenizer = tokenizer_from_dict(sidecar["tokenizer"])
    normalizer = FeatureNormalizer.from_dict(sidecar["normalizer"]) if sidecar.get("normalizer") else None
    model = MODEL_CLASSES[sidecar["model_kind"]](cfg, tokenizer, graphs, sidecar["precision"])
    return LoadedModel(model, cfg, tokenizer, normalizer, int(sidecar["input_dim"]), folder)
