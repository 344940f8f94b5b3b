"""Export a trained checkpoint to ONNX for the onnxruntime backend:
    python scripts/export.py --checkpoint RUN_DIR_OR_CKPT --out DIR [--quantize int8]

DIR gets one .onnx graph per part of the model (Paraformer: encoder, predictor_cif, decoder; autoregressive
baseline: encoder, cross_kv, decoder_step; ``*.int8.onnx`` with --quantize int8: dynamic int8 quantization by
onnxruntime) and export.json, the sidecar (config with the front end, tokenizer, normaliser, alpha_scale, model
kind, opset, versions) from which infer.py, eval.py and serve.py run it with --backend onnx --checkpoint DIR.
Graph inputs and outputs: docs/tensor_contracts.md. Needs the optional extra: pip install -e 'paraformer_asr[onnx]'.
"""

from __future__ import annotations

import argparse
import sys

from paraformer_asr.cli import run_main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    parser.add_argument("--out", required=True, help="export folder to write")
    parser.add_argument("--quantize", choices=("int8",), help="write dynamically int8-quantized graphs")
    args = parser.parse_args(argv)

    from paraformer_asr.deploy.export import export_checkpoint

    sidecar = export_checkpoint(args.checkpoint, args.out, args.quantize)
    print(f"wrote {sidecar.parent} ({sidecar.name} and the graphs it names)")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
