"""Export a trained checkpoint to ONNX: a graph plus a JSON sidecar that predict.py and eval.py run from.

    python scripts/export.py --checkpoint runs/RUN/checkpoints/best.pt --out exports/RUN [--quantize int8]
                             [--opset 17]

Writes OUT/model.onnx (batch, height and width dynamic; height and width multiples of 2**model.depth) and
OUT/export.json (model kind, classes, input channels, normalisation, size multiple, training size and resize mode,
class colours, opset, versions, the full config, and the largest |logit difference| against PyTorch on a random
batch). --quantize int8 writes an onnxruntime dynamically quantized graph instead of the float32 one. Then:

    python scripts/predict.py --backend onnx --checkpoint exports/RUN IMAGE ...
    python scripts/eval.py --backend onnx --checkpoint exports/RUN --split test

Needs the optional [onnx] extra (onnx, onnxruntime).
"""

import argparse
import json

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.choices import QUANTIZE_MODES
from unet_transformer_seg.deployment import DEFAULT_OPSET, export_onnx


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    parser.add_argument("--out", required=True, help="export directory to write (model.onnx, export.json)")
    parser.add_argument("--quantize", choices=QUANTIZE_MODES, help="int8: onnxruntime dynamic quantization")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    sidecar = export_onnx(args.checkpoint, args.out, args.quantize, args.opset)
    summary = {key: sidecar[key] for key in ("model_kind", "precision", "opset", "multiple_of", "check")}
    print(json.dumps({"out": args.out, **summary}, indent=2))
    return 0


if __name__ == "__main__":
    run_main(main)
