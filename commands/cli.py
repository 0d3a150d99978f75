"""The ``sluicegate`` command. Each subcommand lives in the module that owns its room;
this file only dispatches, importing lazily so ``sluicegate --help`` stays fast."""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("commands.serve", "run the gateway (no --config: in front of an embedded emulator)"),
    "demo": ("commands.demo", "gateway + embedded emulators + a live view, no GPU needed"),
    "epp": ("commands.epp", "the same decisions as an Endpoint Picker behind Envoy (ext_proc)"),
    "check-config": ("commands.check_config", "validate a config file, print every error"),
    "emulate": ("emulator.cli", "run a vLLM 0.32 emulator (one model on one card)"),
    "diagnose": ("commands.diagnose", "latency breakdown and capacity from vLLM /metrics"),
    "evaluate": ("simulation.matrix.cli", "every preset over the scenario matrix, simulated"),
    "evaluate-live": ("commands.evaluate_live", "the matrix's live subset over HTTP vs simulated"),
    "simulate": ("simulation.cli", "discrete-event simulation of agents, policies and engine"),
    "swarm": ("simulation.swarm", "closed-loop agent load generator over real HTTP"),
    "simulate-runs": ("simulation.run_cli", "agent runs vs call- and run-level admission"),
    "swarm-runs": ("simulation.run_swarm", "agent runs over real HTTP (X-Agent-Run-*)"),
}


def _usage() -> str:
    lines = ["usage: sluicegate COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<13} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    entry = COMMANDS.get(args[0])
    if entry is None:
        print(f"sluicegate: unknown command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(entry[0])
    result: int = module.main(args[1:])
    return result


if __name__ == "__main__":
    raise SystemExit(main())
