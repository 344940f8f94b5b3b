"""Serve a trained checkpoint over HTTP: python -m paraformer_asr.serving.command --checkpoint CKPT (or
python scripts/serve.py --checkpoint CKPT) [--host 127.0.0.1] [--port 8000]
    [--max-batch-size 8] [--max-wait-ms 5] [--max-audio-seconds 3600] [--max-upload-mb 128] [--device auto]
    [--long-yield-ms 200] [--max-long-recordings 4] [long-recording options: --chunk-seconds 20 --segment pauses ...]
    [--max-streams 16] [--max-stream-seconds 600]
    [--backend torch|onnx] [--num-threads N] [decoding options, as eval.py: --decode beam --beam-size 4 --lm-order 3
    --hotwords FILE --hotword-weight W]

POST /transcribe (multipart form, audio file in field 'file', optionally a hotword list in field 'hotwords', one
phrase a line, added to --hotwords' list) -> {"text", "duration_s", "rtf", "words"}; GET /health;
docs at /docs. WebSocket /stream: 16-bit PCM in, partial and final transcripts out, at most --max-streams at once,
each up to --max-stream-seconds of audio (docs/usage.md, "Streaming"); GET / serves a page that streams the
microphone or a file to it. Concurrent short requests are decoded together: the batcher waits at most --max-wait-ms
to fill a batch of up to --max-batch-size. Audio longer than --chunk-seconds is decoded window by window on its own
lane, which yields to short requests between window batches (at most --long-yield-ms each time). Needs the optional
extra: pip install -e .[serve]. A run folder means its best.pt. The checkpoint must be trained on audio (data.kind:
manifest). Stop with Ctrl-C / SIGTERM: queued short requests are finished first; long ones end with 503.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from paraformer_asr.cli import add_backend_arguments, parse_decoding_arguments, run_main
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import load_model
from paraformer_asr.serving.settings import ServeSettings

SERVE_MODULES = ("fastapi", "uvicorn", "python_multipart", "websockets")


def check_serve_extra() -> None:
    missing = [name for name in SERVE_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"the service needs the optional 'serve' packages (missing: {', '.join(missing)}); "
                          f"install them with: pip install -e .[serve]")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, load the checkpoint and serve it until stopped; 0 once it stops. User errors raise
    (``run_main`` turns them into ``error: ...`` and status 2)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--max-audio-seconds", type=float, default=3600.0)
    parser.add_argument("--max-upload-mb", type=float, default=128.0,
                        help="largest request body in MiB (128: an hour of 16 kHz 16-bit mono WAV)")
    parser.add_argument("--long-yield-ms", type=float, default=200.0,
                        help="longest wait of the long-recording lane for idle short requests, per window batch")
    parser.add_argument("--max-long-recordings", type=int, default=4,
                        help="long recordings queued or being decoded at once; more get 503")
    parser.add_argument("--max-streams", type=int, default=16,
                        help="WebSocket streams (/stream) open at once; more are refused (close code 1013)")
    parser.add_argument("--max-stream-seconds", type=float, default=600.0,
                        help="the most audio one stream may send (close code 1009 past it)")
    args, options, decoding = parse_decoding_arguments(parser, argv)
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be in [0, 65535], got {args.port}")
    if not args.max_upload_mb > 0:
        raise ConfigError(f"--max-upload-mb must be > 0, got {args.max_upload_mb}")
    check_serve_extra()

    import uvicorn

    from paraformer_asr.serving.app import create_app  # the optional 'serve' extra: imported once it is known

    settings = ServeSettings(max_upload_bytes=int(args.max_upload_mb * 1024 * 1024),
                             max_audio_seconds=args.max_audio_seconds, max_batch_size=args.max_batch_size,
                             max_wait_ms=args.max_wait_ms, long_form=options, long_yield_ms=args.long_yield_ms,
                             max_long_recordings=args.max_long_recordings, decoding=decoding,
                             max_streams=args.max_streams, max_stream_seconds=args.max_stream_seconds)
    loaded, _ = load_model(args.checkpoint, args.backend, args.device, args.num_threads)
    app = create_app(loaded, settings)
    print(f"serving {loaded.path} on http://{args.host}:{args.port} (API docs at /docs)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
