"""ONNX deployment: export a checkpoint to an ONNX graph plus a JSON sidecar, and run the graph with onnxruntime.

An export directory holds one graph (`model.onnx`, fp32 or int8) and `export.json`, which describes it (model kind,
classes, input channels, normalisation, depth and size multiple, training size and resize mode, class colours,
opset, versions) and stores the model's full config, so that predict.py and eval.py run from the directory alone.

`OnnxModel` is a drop-in for the PyTorch model: an `nn.Module` without parameters whose forward runs the graph on
the CPU, [B, C, H, W] -> [B, K, H, W] float32, after the same input check as the PyTorch model. The Segmenter,
sliding windows, flip TTA and evaluation run over it unchanged.

Graph: traced with PyTorch's TorchScript-based exporter (the torch.export-based one needs onnxscript, which is not
a dependency), batch, height and width dynamic. The transformer bottleneck builds its 2D positional encoding from
the runtime feature-map size (Shape -> Range -> Sin/Cos in the graph), as the PyTorch code does, so any size that is
a multiple of 2**depth works. int8: onnxruntime's dynamic quantization (weights int8, activations quantized per
call), which covers the convolutions (ConvInteger) and the transformer's matmuls (MatMulInteger); the transposed
convolutions stay float.
"""

from __future__ import annotations

import json
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch

from . import __version__
from .checkpointing import check_tagged
from .choices import BACKENDS, QUANTIZE_MODES
from .config import Config, config_from_dict, config_to_dict
from .errors import CheckpointError, ConfigError, MissingDependencyError
from .inference import load_trained_model
from .labels import class_colours, class_names
from .models import output_channels
from .models.unet import check_model_input
from .runtime import apply_num_threads, resolve_device

EXPORT_FORMAT = "unet_transformer_seg/onnx-export/v1"
SIDECAR_NAME = "export.json"
GRAPH_NAME = "model.onnx"
INPUT_NAME, OUTPUT_NAME = "images", "logits"
DEFAULT_OPSET = 17  # LayerNormalization is one operator from opset 17 on
EXTRA_HINT = "pip install -e 'unet_transformer_seg[onnx]' (installs onnx and onnxruntime)"
SIDECAR_KEYS = ("format", "graph", "model_kind", "precision", "num_classes", "in_channels", "output_channels",
                "depth", "multiple_of", "opset", "config")


def import_onnx():
    """(onnx, onnxruntime) modules, or MissingDependencyError naming the [onnx] extra."""
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise MissingDependencyError(f"ONNX export and --backend onnx need the optional [onnx] extra; {exc.name} is "
                                     f"not installed: {EXTRA_HINT}") from None
    return onnx, onnxruntime


# ---------------------------------------------------------------------------------------------------------- export

def _trace_to_onnx(model: torch.nn.Module, sample: torch.Tensor, path: Path, opset: int) -> None:
    """Trace `model` on sample [1, C, S, S] into an ONNX graph at `path`, batch/height/width dynamic."""
    dynamic = {0: "batch", 2: "height", 3: "width"}
    with warnings.catch_warnings():  # tracer notes on the Python-side shape checks, and the exporter's deprecation
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(model, (sample,), str(path), dynamo=False, opset_version=opset,
                              input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                              dynamic_axes={INPUT_NAME: dynamic, OUTPUT_NAME: dynamic})
        except Exception as exc:  # the exporter's own errors, e.g. an opset it cannot write
            raise ConfigError(f"ONNX export to {path} failed at opset {opset}: {exc}") from None


def _quantize_int8(fp32_path: Path, int8_path: Path) -> None:
    """onnxruntime dynamic quantization: int8 weights, activations quantized at run time (Conv, MatMul)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root_logger = logging.getLogger()
    level = root_logger.level
    root_logger.setLevel(logging.ERROR)  # the quantizer logs a pre-processing hint on every call
    try:
        quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8)
    finally:
        root_logger.setLevel(level)


def _graph_opset(graph) -> int:
    return next(entry.version for entry in graph.opset_import if entry.domain in ("", "ai.onnx"))


def _tag_graph(onnx, path: Path, cfg: Config) -> int:
    """Write the model kind into the graph's metadata (so a graph moved to another directory is recognised);
    returns the graph's opset."""
    graph = onnx.load(str(path))
    for key, value in (("format", EXPORT_FORMAT), ("model_kind", cfg.model.type)):
        entry = graph.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(graph)
    onnx.save(graph, str(path))
    return _graph_opset(graph)


def describe_export(cfg: Config, precision: str, opset: int, checkpoint: str) -> Dict[str, Any]:
    """The sidecar: what predict.py / eval.py need to run the graph without the training config."""
    onnx, onnxruntime = import_onnx()
    return {
        "format": EXPORT_FORMAT,
        "graph": GRAPH_NAME,
        "model_kind": cfg.model.type,
        "precision": precision,
        "input": {"name": INPUT_NAME, "layout": "NCHW", "dtype": "float32", "dynamic": ["batch", "height", "width"]},
        "output": {"name": OUTPUT_NAME, "layout": "NCHW", "dtype": "float32",
                   "activation": "sigmoid" if output_channels(cfg) == 1 else "softmax"},
        "num_classes": cfg.data.num_classes,
        "in_channels": cfg.data.in_channels,
        "output_channels": output_channels(cfg),
        "normalisation": {"mean": cfg.data.mean, "std": cfg.data.std, "formula": "(image in [0, 1] - mean) / std"},
        "depth": cfg.model.depth,
        "multiple_of": 2**cfg.model.depth,
        "training_size": cfg.data.image_size,
        "resize_mode": cfg.data.resize_mode,
        "class_names": class_names(cfg.data),
        "class_colours": class_colours(cfg.data.num_classes).tolist(),
        "mask_palette": cfg.data.palette,
        "mask_values": cfg.data.mask_values,
        "opset": opset,
        "versions": {"unet_transformer_seg": __version__, "torch": torch.__version__, "onnx": onnx.__version__,
                     "onnxruntime": onnxruntime.__version__},
        "checkpoint": str(checkpoint),
        "config": config_to_dict(cfg),
    }


def export_onnx(checkpoint: str | Path, out_dir: str | Path, quantize: Optional[str] = None,
                opset: int = DEFAULT_OPSET) -> Dict[str, Any]:
    """Export a checkpoint (file or run folder) to out_dir/model.onnx + out_dir/export.json; returns the sidecar,
    which also records the largest |logit difference| against PyTorch on one random training-size batch."""
    if quantize not in (None, *QUANTIZE_MODES):
        raise ConfigError(f"--quantize must be one of {', '.join(QUANTIZE_MODES)}, got {quantize!r}")
    model, cfg = load_trained_model(checkpoint)
    onnx, _ = import_onnx()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    size = cfg.data.image_size
    sample = torch.randn(2, cfg.data.in_channels, size, size, generator=torch.Generator().manual_seed(0))
    graph_path = out_dir / GRAPH_NAME
    with tempfile.TemporaryDirectory(dir=out_dir) as scratch:
        traced_path = graph_path if quantize is None else Path(scratch) / "fp32.onnx"
        _trace_to_onnx(model, sample[:1], traced_path, opset)
        if quantize == "int8":
            _quantize_int8(traced_path, graph_path)
    opset = _tag_graph(onnx, graph_path, cfg)
    sidecar = describe_export(cfg, quantize or "fp32", opset, str(checkpoint))
    write_sidecar(out_dir / SIDECAR_NAME, sidecar)
    exported, _ = load_exported_model(out_dir, num_threads=1)
    with torch.no_grad():
        difference = (exported(sample) - model(sample)).abs().max()
    sidecar["check"] = {"input": list(sample.shape), "max_abs_logit_difference": float(difference)}
    write_sidecar(out_dir / SIDECAR_NAME, sidecar)
    return sidecar


def write_sidecar(path: Path, sidecar: Dict[str, Any]) -> None:
    path.write_text(json.dumps(sidecar, indent=2) + "\n")


# ----------------------------------------------------------------------------------------------------------- load

def read_sidecar(path: Path) -> Dict[str, Any]:
    """export.json as a dict; a missing, unreadable or foreign file is a CheckpointError naming it."""
    if not path.is_file():
        raise CheckpointError(f"export directory {path.parent} has no {path.name} (write one with scripts/export.py)")
    try:
        sidecar = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None
    return check_tagged(sidecar, path, "unet_transformer_seg export sidecar", EXPORT_FORMAT, SIDECAR_KEYS)


def _sidecar_config(sidecar: Dict[str, Any], path: Path) -> Config:
    """The config stored in the sidecar, checked against the sidecar's own summary fields."""
    try:
        cfg = config_from_dict(sidecar["config"])
    except ConfigError as exc:
        raise CheckpointError(f"{path} holds an invalid config: {exc}") from None
    expected = {"model_kind": cfg.model.type, "num_classes": cfg.data.num_classes,
                "in_channels": cfg.data.in_channels, "output_channels": output_channels(cfg), "depth": cfg.model.depth,
                "multiple_of": 2**cfg.model.depth}
    for key, value in expected.items():
        if sidecar[key] != value:
            raise CheckpointError(f"{path}: {key} is {sidecar[key]!r} but its config says {value!r}")
    return cfg


def _check_graph(graph, graph_path: Path, sidecar: Dict[str, Any], sidecar_path: Path) -> None:
    """The graph must be the one the sidecar describes: model kind, opset, input and output names and channels."""
    metadata = {entry.key: entry.value for entry in graph.metadata_props}
    if metadata.get("format") != EXPORT_FORMAT:
        raise CheckpointError(f"{graph_path} is not a graph written by scripts/export.py (no {EXPORT_FORMAT!r} tag)")
    if metadata.get("model_kind") != sidecar["model_kind"]:
        raise CheckpointError(f"{graph_path} holds a {metadata.get('model_kind')} model but {sidecar_path} describes "
                              f"a {sidecar['model_kind']} model; export the checkpoint again into this directory")
    opset = _graph_opset(graph)
    if opset != sidecar["opset"]:
        raise CheckpointError(f"{graph_path} uses opset {opset} but {sidecar_path} says opset {sidecar['opset']}; "
                              "export the checkpoint again")
    (graph_input,), (graph_output,) = graph.graph.input, graph.graph.output
    channels_in = graph_input.type.tensor_type.shape.dim[1].dim_value
    channels_out = graph_output.type.tensor_type.shape.dim[1].dim_value
    found = (graph_input.name, channels_in, graph_output.name, channels_out)
    wanted = (INPUT_NAME, sidecar["in_channels"], OUTPUT_NAME, sidecar["output_channels"])
    if found != wanted:
        raise CheckpointError(f"{graph_path} maps {found[0]} [B, {found[1]}, H, W] -> {found[2]} [B, {found[3]}, H, W] "
                              f"but {sidecar_path} describes {wanted[0]} [B, {wanted[1]}, H, W] -> "
                              f"{wanted[2]} [B, {wanted[3]}, H, W]")


def _session(onnxruntime, graph_path: Path, num_threads: Optional[int]):
    """An onnxruntime CPU session; num_threads sets intra_op_num_threads (None: onnxruntime's default)."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only
    # idle worker threads sleep instead of spinning: spinning threads take the cores that other processes (and
    # PyTorch's own threads) need on a shared CPU, which made two threads several times slower than one
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if num_threads is not None:
        options.intra_op_num_threads = num_threads
        options.inter_op_num_threads = 1
    try:
        return onnxruntime.InferenceSession(str(graph_path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for unloadable graphs
        raise CheckpointError(f"onnxruntime cannot load {graph_path}: {str(exc).strip().splitlines()[0]}") from None


class OnnxModel(torch.nn.Module):
    """An exported graph behind the PyTorch model's interface: forward(x [B, C, H, W]) -> logits [B, K, H, W]
    float32 on the CPU, H and W multiples of 2**depth (else ShapeError, as the PyTorch model)."""

    def __init__(self, session, in_channels: int, depth: int):
        super().__init__()
        self.session, self.in_channels, self.depth = session, in_channels, depth

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        check_model_input(images, self.in_channels, self.depth)
        array = np.ascontiguousarray(images.detach().to("cpu", torch.float32).numpy())  # [B, C, H, W]
        (logits,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: array})  # [B, K, H, W]
        return torch.from_numpy(logits)


def load_exported_model(directory: str | Path, num_threads: Optional[int] = None) -> Tuple[OnnxModel, Config]:
    """(OnnxModel, config) from an export directory; a missing, foreign, mismatched or damaged directory, sidecar or
    graph is a CheckpointError naming the file. num_threads None: the config's run.num_threads."""
    directory = Path(directory)
    if directory.is_file():
        raise CheckpointError(f"{directory} is a file; --backend onnx takes an export directory written by "
                              "scripts/export.py")
    if not directory.is_dir():
        raise CheckpointError(f"export directory not found: {directory}")
    sidecar_path = directory / SIDECAR_NAME
    sidecar = read_sidecar(sidecar_path)
    cfg = _sidecar_config(sidecar, sidecar_path)
    graph_path = directory / str(sidecar["graph"])
    if not graph_path.is_file():
        raise CheckpointError(f"graph {graph_path} named by {sidecar_path} not found")
    onnx, onnxruntime = import_onnx()
    try:
        graph = onnx.load(str(graph_path))
    except Exception as exc:  # protobuf decode errors of a damaged or foreign file
        raise CheckpointError(f"cannot read ONNX graph {graph_path}: damaged or not an ONNX file ({exc})") from None
    _check_graph(graph, graph_path, sidecar, sidecar_path)
    threads = num_threads if num_threads is not None else cfg.run.num_threads
    session = _session(onnxruntime, graph_path, threads)
    return OnnxModel(session, cfg.data.in_channels, cfg.model.depth), cfg


# ------------------------------------------------------------------------------------------------- backend choice

def add_backend_arguments(parser) -> None:
    """--backend torch|onnx and --threads, for eval.py and predict.py."""
    parser.add_argument("--backend", default="torch", choices=BACKENDS,
                        help="torch: --checkpoint is a checkpoint or run folder; onnx: an export directory "
                             "written by scripts/export.py, run by onnxruntime")
    parser.add_argument("--threads", type=int, help="CPU threads for torch and onnxruntime (intra-op); default: "
                                                    "run.num_threads of the model's config")


def load_model_for_inference(checkpoint: str | Path, backend: str = "torch", num_threads: Optional[int] = None,
                             device: str = "auto") -> Tuple[torch.nn.Module, Config]:
    """(model in eval mode, config) for --backend: a PyTorch checkpoint on --device `device`, or an ONNX export
    directory (the CPU); the thread count (default: run.num_threads) goes to torch and to the onnxruntime session."""
    if num_threads is not None and num_threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {num_threads}")
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "onnx":
        if device == "cuda":
            raise ConfigError("--device cuda: the onnx backend runs on the CPU (use --backend torch for the GPU)")
        model, cfg = load_exported_model(checkpoint, num_threads)
        cfg.run.device = "cpu"  # onnxruntime runs the graph on the CPU, whatever device the model was trained on
    elif (Path(checkpoint) / SIDECAR_NAME).is_file():
        raise CheckpointError(f"{checkpoint} is an ONNX export directory; run it with --backend onnx")
    else:
        model, cfg = load_trained_model(checkpoint, resolve_device(device, "--device"))
    apply_num_threads(num_threads if num_threads is not None else cfg.run.num_threads)
    return model, cfg
