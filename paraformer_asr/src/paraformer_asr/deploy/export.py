"""Exporting a trained checkpoint to ONNX graphs plus a JSON sidecar (scripts/export.py).

The graphs are traced with torch.onnx's TorchScript exporter (``dynamo=False``): the models check their inputs
with data-dependent Python branches (too-short utterances, NaN), which the tracer records as constants while
torch.export refuses them; every shape derived from an input's shape stays dynamic in the traced graph.

The sidecar (``export.json``) holds everything a run needs besides the graphs: the checkpoint's config (front end,
data kind, model kind and sizes), the tokenizer (a sentencepiece model travels inside it, base64), the feature
normaliser, the CIF's alpha_scale, the opset, the precision and the versions that wrote it.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

import paraformer_asr
from paraformer_asr.deploy.export_format import FORMAT, FORMAT_VERSION, KIND_KEY, OPSET, ROLE_KEY, SIDECAR
from paraformer_asr.deploy.graphs import PREDICTOR_GRAPHS, GraphSpec, ar_graphs, paraformer_graphs
from paraformer_asr.deploy.onnx_extra import require_onnx
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import model_from_checkpoint, resolve_eval_checkpoint
from paraformer_asr.training.checkpointing import load_checkpoint


def model_graphs(model: torch.nn.Module, model_kind: str, input_dim: int, predictor: str | None) -> list[GraphSpec]:
    """The graphs of a model kind ('paraformer', with its token extractor ``predictor``, or 'transformer_ar')."""
    if model_kind == "paraformer":
        return paraformer_graphs(model, input_dim, predictor)
    return ar_graphs(model, input_dim)


def export_graph(spec: GraphSpec, path: Path, model_kind: str) -> None:
    """Trace one graph to ``path`` (opset :data:`OPSET`) and tag it with the model kind and its role."""
    import onnx

    dynamic_axes = {**spec.inputs, **spec.outputs}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer warnings about the models' input checks (constants in the graph)
        torch.onnx.export(spec.module.eval(), spec.example, str(path), input_names=list(spec.inputs),
                          output_names=list(spec.outputs), dynamic_axes=dynamic_axes, opset_version=OPSET,
                          dynamo=False)
    graph = onnx.load(str(path))
    onnx.helper.set_model_props(graph, {KIND_KEY: model_kind, ROLE_KEY: spec.name})
    onnx.save(graph, str(path))


def quantize_graph(source: Path, target: Path) -> None:
    """Dynamic int8 quantization of one graph: the weights of its matrix products in int8, their activations
    quantized on the fly; products of two activations (attention scores) and the convolutions of the subsampling
    front end stay in float (onnxruntime's ConvInteger made the whole encoder slower than fp32 on the CPU)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantizer_log = logging.getLogger()  # the quantizer advises pre-processing on the root logger
    level = quantizer_log.level
    quantizer_log.setLevel(logging.ERROR)
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"],
                         extra_options={"MatMulConstBOnly": True})
    finally:
        quantizer_log.setLevel(level)


def export_checkpoint(checkpoint: str | Path, out: str | Path, quantize: str | None = None) -> Path:
    """Export ``checkpoint`` (a .pt file or run folder) to the folder ``out``: one .onnx file per graph (int8
    graphs with ``quantize='int8'``, but for the predictor, whose running sums decide the token count) and
    :data:`SIDECAR`. -> the sidecar's path."""
    versions = require_onnx()
    if quantize not in (None, "int8"):
        raise ConfigError(f"--quantize must be int8, got {quantize!r}")
    path = resolve_eval_checkpoint(checkpoint)
    state = load_checkpoint(path)  # read once: the model and the sidecar's config, tokenizer and normaliser
    loaded = model_from_checkpoint(state, path, torch.device("cpu"))
    model_kind = loaded.cfg.model.type
    predictor_kind = getattr(loaded.cfg.model, "predictor", "cif") if model_kind == "paraformer" else None
    if predictor_kind is not None and predictor_kind not in PREDICTOR_GRAPHS:
        raise ConfigError(f"{loaded.path}: model.predictor {predictor_kind!r} has no ONNX export (exportable: "
                          f"{', '.join(PREDICTOR_GRAPHS)})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    graphs = {}
    with tempfile.TemporaryDirectory() as scratch:
        for spec in model_graphs(loaded.model, model_kind, loaded.input_dim, predictor_kind):
            traced = Path(scratch) / f"{spec.name}.onnx"
            export_graph(spec, traced, model_kind)
            name = f"{spec.name}.int8.onnx" if quantize and spec.quantize else f"{spec.name}.onnx"
            if quantize and spec.quantize:
                quantize_graph(traced, out / name)
            else:
                shutil.copyfile(traced, out / name)
            graphs[spec.name] = name
    sidecar = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "model_kind": model_kind, "predictor": predictor_kind,
        "precision": quantize or "fp32", "opset": OPSET, "graphs": graphs,
        "input_dim": loaded.input_dim, "sample_rate": loaded.cfg.data.sample_rate,
        "alpha_scale": float(loaded.model.predictor.alpha_scale) if predictor_kind == "cif" else None,
        "config": state["config"], "tokenizer": state["tokenizer"], "normalizer": state.get("normalizer"),
        "source_checkpoint": str(loaded.path),
        "versions": {"paraformer_asr": paraformer_asr.__version__, "torch": torch.__version__, **versions},
    }
    sidecar_path = out / SIDECAR
    sidecar_path.write_text(json.dumps(sidecar, indent=1) + "\n", encoding="utf-8")
    return sidecar_path
