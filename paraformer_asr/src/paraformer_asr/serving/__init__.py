"""HTTP speech-recognition service (optional extra ``serve``: fastapi, uvicorn, python-multipart).

``create_app(loaded_model, settings)`` builds the FastAPI app; command.py (``python -m
paraformer_asr.serving.command``, which scripts/serve.py calls) parses the command line and runs it with uvicorn.
Import :mod:`paraformer_asr.serving.app` only when fastapi is installed.
"""

from paraformer_asr.serving.settings import ServeSettings

__all__ = ["ServeSettings"]
