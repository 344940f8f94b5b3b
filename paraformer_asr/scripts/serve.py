"""Serve a trained checkpoint over HTTP: python scripts/serve.py --checkpoint CKPT [options]; --help lists them.

The command lives in the library, paraformer_asr/serving/command.py, so that it also runs from any install as
python -m paraformer_asr.serving.command; this script calls it.
"""

from __future__ import annotations

import sys

from paraformer_asr.cli import run_main
from paraformer_asr.serving.command import main

if __name__ == "__main__":
    sys.exit(run_main(main))
