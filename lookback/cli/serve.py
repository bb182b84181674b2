"""lookback serve: the web explorer, models side by side."""

from __future__ import annotations

import argparse
import sys

from .flags import add_load_flags, add_run_dir, int_range, positive_int


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="the web explorer: translations and attention, models side by side")
    add_run_dir(p, several="named")
    add_load_flags(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument(
        "--port", type=int_range(0, 65535), default=8000, help="port to listen on (0: any free port)"
    )
    p.add_argument("--max-chars", type=positive_int, default=500, help="longest input sentence accepted")
    p.add_argument(
        "--workers",
        type=positive_int,
        help="requests translated at once, over all models (default: the CPU cores); more wait their turn",
    )
    p.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> None:
    from ..device import describe, resolve_device
    from ..serve import app

    device = resolve_device(args.device, "--device")
    precision = args.precision or "each run's decode.precision"
    print(f"lookback: {describe(device, precision)}", file=sys.stderr)
    app.serve(
        args.run_dirs,
        host=args.host,
        port=args.port,
        checkpoint=args.checkpoint,
        device=str(device),
        precision=args.precision,
        max_chars=args.max_chars,
        workers=args.workers,
    )
