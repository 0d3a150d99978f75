"""Build a random-weight Llama model locally, with nothing downloaded.

Runs in the vLLM venv (it needs ``torch``, ``transformers`` and ``tokenizers``)::

    $VENV/bin/python scripts/vllm/build_model.py tiny      # prints the model directory

The tokenizer is a byte-level BPE trained on the Python stdlib sources; the weights are random
with a fixed seed, so the output is gibberish but its length is exact with ``max_tokens`` and
``ignore_eos``. A finished model is cached under ``$HOME/.cache/sluicegate/models/<size>`` (or
``$SLUICEGATE_MODEL_CACHE/<size>``) and reused: the directory appears only once complete.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

VOCAB_SIZE = 4096
MAX_POSITIONS = 2048
SEED = 20261130
TOKENIZER_CORPUS_BYTES = 6_000_000  # enough text for a stable 4k-token BPE, trained in seconds
SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int


SHAPES: dict[str, Shape] = {
    "tiny": Shape(hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2),
    "medium": Shape(hidden=1024, intermediate=2816, layers=8, heads=16, kv_heads=4),
}


def cache_root() -> Path:
    env = os.environ.get("SLUICEGATE_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "sluicegate" / "models"


def stdlib_texts(limit_bytes: int) -> Iterator[str]:
    """Python stdlib sources in a fixed order, up to ``limit_bytes`` of text."""
    root = Path(sysconfig.get_paths()["stdlib"])
    used = 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        used += len(text)
        yield text
        if used >= limit_bytes:
            return


def build_tokenizer(out_dir: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stdlib_texts(TOKENIZER_CORPUS_BYTES), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)


def build_weights(out_dir: Path, shape: Shape, vocab_size: int) -> int:
    """Save a randomly initialised Llama in bfloat16; returns the parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=SPECIAL_TOKENS.index("<|bos|>"),
        eos_token_id=SPECIAL_TOKENS.index("<|eos|>"),
        pad_token_id=SPECIAL_TOKENS.index("<|pad|>"),
        tie_word_embeddings=True,
        dtype="bfloat16",
    )
    # transformers ships partial types: its model classes are untyped callables
    model = LlamaForCausalLM(config).to(torch.bfloat16)  # type: ignore[no-untyped-call,arg-type]
    model.save_pretrained(out_dir, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def build(size: str) -> Path:
    """Return the directory of the ``size`` model, building it first when missing."""
    target = cache_root() / size
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{size}-", dir=target.parent))
    try:
        started = time.monotonic()
        build_tokenizer(staging)
        from transformers import AutoTokenizer

        vocab = len(AutoTokenizer.from_pretrained(staging))
        params = build_weights(staging, SHAPES[size], vocab)
        shutil.rmtree(target, ignore_errors=True)
        staging.chmod(0o755)
        staging.rename(target)  # atomic: a half-built model is never seen as cached
        elapsed = time.monotonic() - started
        print(f"built {size}: {params / 1e6:.1f} M params in {elapsed:.1f} s", file=sys.stderr)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", choices=sorted(SHAPES))
    args = parser.parse_args(argv)
    print(build(args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
