#!/usr/bin/env python3
"""Greedy generation speed: gpt2-generate (GPU key/value cache) against transformers' generate.

For each model of --models (dN: N layers, N heads, 64N channels; gpt2, gpt2-medium, gpt2-large,
gpt2-xl) a randomly initialized GPT2LMHeadModel is saved, converted by our gpt2-convert to an
llm.c file and back to a Hugging Face directory; both sides then load that directory (written
by gpt2-convert), so they run the very same weights. The prompt is "the" followed by " the"
(--prompt-tokens GPT-2 tokens: ids 1169, 262, 262, ...), batch 1, greedy, exactly
--new-tokens new tokens (gpt2-generate --ignore-eos; transformers without an end-of-text id).
Per precision (fp32 and bf16 on both sides; --hf-fp16 adds transformers in fp16 next to our
bf16) each side runs --warmup untimed generations, then --repeats timed ones; the median is
reported:
  ours          gpt2-generate's own timing line: prefill time, decode tokens/s
                (decode steps / decode time), end-to-end time of generate() (sampling included;
                model loading and process start excluded);
  transformers  generate() wall time with CUDA synchronized (end to end); its prefill is
                estimated as the time of a generate() of 1 new token, its decode rate as
                (new tokens - 1) / (end to end - that prefill).
Ratios are transformers time / our time (above 1: we are faster). Never asserts; prints a
Markdown table and writes CSV (--csv) and the table (--markdown). Needs torch, transformers,
a GPU, and built gpt2-generate and gpt2-convert (`make`).

  python3 bench/hf_generate_bench.py --generate build/gpt2-generate --convert build/gpt2-convert \\
      --models d12,gpt2-medium
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from bench_io import write_csv, write_text

PRESETS = {"gpt2": (12, 12, 768), "gpt2-medium": (24, 16, 1024), "gpt2-large": (36, 20, 1280),
           "gpt2-xl": (48, 25, 1600)}
THE, SPACE_THE = 1169, 262  # GPT-2 ids of "the" and " the"
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def shape_of(name):
    """(layers, heads, channels) of a model name."""
    if name in PRESETS:
        return PRESETS[name]
    if name.startswith("d") and name[1:].isdigit():
        n = int(name[1:])
        return n, n, 64 * n
    sys.exit(f"unknown model {name!r}: dN or one of {', '.join(PRESETS)}")


def write_model(name, convert, work):
    """A random GPT-2 of that shape as a Hugging Face directory written by gpt2-convert."""
    layers, heads, channels = shape_of(name)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_head=heads, n_embd=channels, n_positions=1024,
                        vocab_size=50257)
    original = os.path.join(work, f"{name}-transformers")
    GPT2LMHeadModel(config).save_pretrained(original, safe_serialization=True)
    llmc = os.path.join(work, f"{name}.bin")
    directory = os.path.join(work, name)
    for step in (["--input", original, "--output", llmc], ["--input", llmc, "--output", directory]):
        subprocess.run([convert] + step, check=True, capture_output=True)
    return directory


def time_ours(args, directory, precision):
    """gpt2-generate's timing line as a dict of floats."""
    prompt = "the" + " the" * (args.prompt_tokens - 1)
    command = [args.generate, "--model", directory, "--device", "cuda", "--precision", precision,
               "--prompt", prompt, "--max-new-tokens", str(args.new_tokens), "--greedy",
               "--ignore-eos", "--warmup", str(args.warmup), "--repeats", str(args.repeats)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"gpt2-generate failed (exit {result.returncode}):\n{result.stderr}")
    if f"prompt {args.prompt_tokens} tokens" not in result.stderr:
        sys.exit(f"gpt2-generate did not see a {args.prompt_tokens}-token prompt:\n{result.stderr}")
    for line in result.stderr.splitlines():
        if line.startswith("gpt2-generate: timing "):
            pairs = (item.split("=") for item in line.split()[2:])
            return {key: float(value) for key, value in pairs}
    sys.exit(f"no timing line in gpt2-generate's output:\n{result.stderr}")


def time_theirs(args, directory, dtype):
    """Median seconds of transformers' generate for 1 and for --new-tokens new tokens."""
    model = GPT2LMHeadModel.from_pretrained(directory, torch_dtype=TORCH_DTYPES[dtype])
    model = model.cuda().eval()
    model.generation_config.eos_token_id = None  # exactly max_new_tokens, like --ignore-eos
    model.generation_config.pad_token_id = 0
    ids = torch.tensor([[THE] + [SPACE_THE] * (args.prompt_tokens - 1)], device="cuda")

    def run(new_tokens):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=new_tokens,
                                 use_cache=True)
        torch.cuda.synchronize()
        assert out.shape[1] == args.prompt_tokens + new_tokens, out.shape
        return time.perf_counter() - start

    times = {}
    for new_tokens in (1, args.new_tokens):
        for _ in range(args.warmup):
            run(new_tokens)
        times[new_tokens] = statistics.median(run(new_tokens) for _ in range(args.repeats))
    attention = getattr(model.config, "_attn_implementation", "default")
    del model
    torch.cuda.empty_cache()
    return times[1], times[args.new_tokens], attention


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--generate", default="build/gpt2-generate")
    parser.add_argument("--convert", default="build/gpt2-convert")
    parser.add_argument("--models", default="d12", help="comma-separated: dN, gpt2-medium, ...")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--hf-fp16", action="store_true",
                        help="also time transformers in fp16 (next to our bf16)")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--csv", default="bench/results/hf_generate.csv")
    parser.add_argument("--markdown", default="bench/results/hf_generate.md")
    parser.add_argument("--work-dir", help="where the models are written (default: a temp dir)")
    args = parser.parse_args()
    if args.prompt_tokens < 1 or args.new_tokens < 2 or args.repeats < 1:
        sys.exit("--prompt-tokens >= 1, --new-tokens >= 2 and --repeats >= 1 please")
    if args.prompt_tokens + args.new_tokens - 1 > 1024:
        sys.exit("prompt + new tokens must fit GPT-2's 1024 positions")
    work = args.work_dir or tempfile.mkdtemp(prefix="hf_generate_bench_")
    os.makedirs(work, exist_ok=True)
    device = torch.cuda.get_device_name()
    print(f"{device}; torch {torch.__version__}, transformers "
          f"{sys.modules['transformers'].__version__}; prompt {args.prompt_tokens} tokens, "
          f"{args.new_tokens} new, batch 1, greedy; median of {args.repeats} after "
          f"{args.warmup} warm-up runs")

    rows = []
    for name in args.models.split(","):
        directory = write_model(name, args.convert, work)
        pairs = [(p, p) for p in args.precisions.split(",")]
        if args.hf_fp16 and "bf16" in args.precisions.split(","):
            pairs.append(("bf16", "fp16"))
        for ours_precision, their_dtype in pairs:
            ours = time_ours(args, directory, ours_precision)
            their_prefill, their_total, attention = time_theirs(args, directory, their_dtype)
            their_decode_rate = (args.new_tokens - 1) / max(their_total - their_prefill, 1e-9)
            row = {
                "model": name, "ours_precision": ours_precision, "hf_dtype": their_dtype,
                "hf_attention": attention, "prompt_tokens": args.prompt_tokens,
                "new_tokens": args.new_tokens,
                "ours_prefill_ms": 1e3 * ours["prefill_s"],
                "ours_decode_tokens_per_s": ours["decode_tokens_per_s"],
                "ours_end_to_end_ms": 1e3 * ours["end_to_end_s"],
                "hf_prefill_ms": 1e3 * their_prefill,
                "hf_decode_tokens_per_s": their_decode_rate,
                "hf_end_to_end_ms": 1e3 * their_total,
                "decode_speedup": ours["decode_tokens_per_s"] / their_decode_rate,
                "end_to_end_speedup": their_total / ours["end_to_end_s"],
                "device": device, "date": datetime.date.today().isoformat(),
            }
            rows.append(row)
            print(f"{name} ours {ours_precision} vs transformers {their_dtype}: end to end "
                  f"{row['ours_end_to_end_ms']:.1f} ms vs {row['hf_end_to_end_ms']:.1f} ms")

    header = ("| model | ours | transformers | ours prefill ms | ours decode tok/s | "
              "ours end-to-end ms | transformers prefill ms | transformers decode tok/s | "
              "transformers end-to-end ms | decode speedup | end-to-end speedup |")
    lines = [f"Greedy generation, batch 1, prompt {args.prompt_tokens} tokens, "
             f"{args.new_tokens} new tokens, {device} (median of {args.repeats} runs after "
             f"{args.warmup} warm-up runs; speedup = transformers time / ours).", "", header,
             "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['ours_precision']} | {r['hf_dtype']} ({r['hf_attention']}) | "
            f"{r['ours_prefill_ms']:.2f} | {r['ours_decode_tokens_per_s']:.0f} | "
            f"{r['ours_end_to_end_ms']:.1f} | {r['hf_prefill_ms']:.2f} | "
            f"{r['hf_decode_tokens_per_s']:.0f} | {r['hf_end_to_end_ms']:.1f} | "
            f"{r['decode_speedup']:.2f}x | {r['end_to_end_speedup']:.2f}x |")
    table = "\n".join(lines) + "\n"
    print()
    print(table)
    write_csv(args.csv, rows)
    write_text(args.markdown, table)


if __name__ == "__main__":
    main()
