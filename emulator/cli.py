"""``sluicegate emulate``: one vLLM 0.32 instance (one model on one card), emulated."""

from __future__ import annotations

import argparse

import uvicorn

from emulator.embedded import EmulatorSpec, build_app, build_runner
from emulator.profile import shipped_profiles


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="sluicegate emulate",
        description="Serve an emulated vLLM 0.32 (OpenAI API + /metrics) on one port.",
    )
    parser.add_argument(
        "--profile",
        default="rx9070xt",
        help=f"shipped profile ({', '.join(shipped_profiles())}) or a YAML path",
    )
    parser.add_argument("--model-name", default=None, help="served model name (default: profile)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="a card K times faster: runs K times faster than the profile, reports wall durations",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the output-length draws")
    parser.add_argument(
        "--max-num-queued-reqs",
        type=int,
        default=None,
        help="vLLM's cap on waiting+running requests (503 when reached)",
    )
    parser.add_argument(
        "--enable-prompt-tokens-details",
        action="store_true",
        help="usage carries prompt_tokens_details.cached_tokens, as vLLM's flag does",
    )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vLLM's prefix cache (default: the profile's, on as in vLLM)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.speed <= 0:
        print("sluicegate emulate: --speed must be > 0")
        return 2
    spec = EmulatorSpec(
        profile=args.profile,
        model_name=args.model_name or args.profile,
        speed=args.speed,
        seed=args.seed,
        max_num_queued_reqs=args.max_num_queued_reqs,
        enable_prompt_tokens_details=args.enable_prompt_tokens_details,
        enable_prefix_caching=args.enable_prefix_caching,
    )
    runner = build_runner(spec)
    app = build_app(spec, runner)
    print(
        f"emulating vLLM 0.32: profile {runner.profile.name}, model {spec.model_name!r}, "
        f"{runner.profile.engine.max_num_seqs} slots, speed x{spec.speed:g} "
        f"on http://{args.host}:{args.port}",
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
