"""`braze serve FILE.braze`: serve an artifact over HTTP with Ray Serve on a local Ray instance until Ctrl-C."""
from __future__ import annotations

import argparse
import signal
import threading
from typing import Any, Callable

from braze.ir.errors import BrazeError


def add_command(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register `serve` on the `braze` subcommand parsers."""
    serve = command(sub, "serve", "serve a .braze file over HTTP with Ray Serve (needs braze[ray])",
                    "Start a local Ray instance and serve the artifact with Ray Serve: POST JSON "
                    '({"inputs": {NAME: rows}}) or safetensors bodies to http://HOST:PORT/; requests are batched. '
                    "Runs until Ctrl-C (or SIGTERM), then shuts Serve and Ray down.",
                    "braze serve model.braze --replicas 2 --port 8000")
    serve.add_argument("artifact", metavar="FILE.braze")
    serve.add_argument("--replicas", type=int, default=1, help="replicas, one CPU each (default 1)")
    serve.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--max-batch-size", type=int, default=32,
                       help="requests batched into one run at most (default 32)")
    serve.add_argument("--threads", type=int, help="threads per call (default: the replica's CPUs)")
    serve.set_defaults(run=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import ray
        from ray import serve
    except ImportError:
        raise BrazeError("braze serve needs Ray: pip install 'braze[ray]'") from None
    from braze.ray import deployment
    application = deployment(args.artifact, num_replicas=args.replicas, max_batch_size=args.max_batch_size,
                             threads=args.threads)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(application, name="braze", route_prefix="/")
        print(f"serving {args.artifact} at http://{args.host}:{args.port}/ (Ctrl-C stops)", flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
        ray.shutdown()
        signal.signal(signal.SIGTERM, previous)
    print("stopped", flush=True)
    return 0
