#!/usr/bin/env python3
"""This project's GPT-2 logits against transformers' GPT2LMHeadModel, through Hugging Face
directories, in both directions. Needs torch and transformers (no network) and a built
gpt2-convert (`make`); runs on the CPU (a GPU is not used).

Checks (each prints max |ours - transformers| / max |transformers| over every position and
vocabulary entry, and fails above --tolerance, 1e-4 by default):
  hf-f32, hf-f16, hf-bf16   a random GPT2LMHeadModel (d2's shape unless --n-layer/--n-embd/
                            --n-head; LayerNorm parameters and biases perturbed so their mapping
                            matters) saved by save_pretrained in float32, float16 and bfloat16,
                            read here by `gpt2-convert --input DIR --print-logits TOKENS`, against
                            transformers' fp32 logits of the same (widened) weights;
  roundtrip                 that directory converted to an llm.c file and back to a directory by
                            gpt2-convert, loaded by from_pretrained (no missing or unexpected
                            weights allowed): its logits against the original model's;
  bin                       with --bin FILE (e.g. a gpt2-train checkpoint): the file converted to
                            a directory, loaded by from_pretrained, against
                            `gpt2-convert --input FILE --print-logits`;
  hf-dir                    with --hf-dir DIR (e.g. a downloaded gpt2): that directory, read both
                            ways;
  pipeline                  the round-trip directory (written by gpt2-convert) loaded alone by
                            transformers' pipeline("text-generation"), its tokenizer included:
                            the tokenizer's ids of the prompt are GPT-2's, and greedy generation
                            of a few tokens runs.
The tokens default to "The quick brown fox jumps over the lazy dog." in GPT-2's ids.
--save-dir DIR writes each check's two logit tables as DIR/<check>.json.

  python3 bench/hf_logits_check.py --convert build/gpt2-convert [--bin out/model_00000050.bin]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel

DEFAULT_TOKENS = "464,2068,7586,21831,18045,625,262,16931,3290,13"


def ours(convert, model, tokens):
    """Logits (T, V) of gpt2-convert --print-logits, as a float32 tensor."""
    result = subprocess.run([convert, "--input", model, "--print-logits", tokens],
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"gpt2-convert failed on {model} (exit {result.returncode}):\n{result.stderr}")
    return torch.tensor(json.loads(result.stdout)["logits"], dtype=torch.float32)


def load(directory):
    """from_pretrained in fp32, eval, refusing any missing or unexpected weight."""
    kwargs = dict(torch_dtype=torch.float32, output_loading_info=True)
    try:
        model, info = GPT2LMHeadModel.from_pretrained(directory, attn_implementation="eager",
                                                      **kwargs)
    except TypeError:  # transformers before attn_implementation
        model, info = GPT2LMHeadModel.from_pretrained(directory, **kwargs)
    ignorable = ("attn.bias", "attn.masked_bias", "lm_head.weight")
    problems = {key: [name for name in info[key] if not name.endswith(ignorable)]
                for key in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if any(problems.values()):
        sys.exit(f"{directory}: from_pretrained did not load every weight: {problems}")
    return model.float().eval()


def theirs(model, tokens):
    ids = torch.tensor([[int(t) for t in tokens.split(",")]])
    with torch.no_grad():
        return model(ids).logits[0].float()


def compare(name, mine, reference, args, failures):
    error = ((mine - reference).abs().max() / reference.abs().max()).item()
    ok = mine.shape == reference.shape and error <= args.tolerance
    print(f"{name:10s} shape {tuple(mine.shape)}  max|logit| {reference.abs().max().item():9.4f}"
          f"  relative error {error:.3e}  {'ok' if ok else 'FAIL'}")
    if args.save_dir:
        os.makedirs(args.save_dir, exist_ok=True)
        with open(os.path.join(args.save_dir, f"{name}.json"), "w") as f:
            json.dump({"ours": mine.tolist(), "transformers": reference.tolist()}, f)
    if not ok:
        failures.append(name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--convert", default="build/gpt2-convert", help="the gpt2-convert binary")
    parser.add_argument("--tokens", default=DEFAULT_TOKENS, help="comma-separated token ids")
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--n-head", type=int, default=2)
    parser.add_argument("--bin", help="an llm.c model file to convert and check too")
    parser.add_argument("--hf-dir", help="a Hugging Face GPT-2 directory to check too")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--save-dir", help="write each check's logits here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, transformers "
          f"{sys.modules['transformers'].__version__}, tokens {args.tokens}")

    failures = []
    work = tempfile.mkdtemp(prefix="hf_logits_check_")
    torch.manual_seed(args.seed)
    config = GPT2Config(n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head,
                        n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".ln_" in name or "ln_f" in name or name.endswith(".bias"):
                parameter.add_(0.1 * torch.randn_like(parameter))

    for dtype, label in ((torch.float32, "hf-f32"), (torch.float16, "hf-f16"),
                         (torch.bfloat16, "hf-bf16")):
        directory = os.path.join(work, label)
        copy.deepcopy(model).to(dtype).save_pretrained(directory, safe_serialization=True)
        reference = theirs(load(directory), args.tokens)  # the saved weights, widened
        compare(label, ours(args.convert, directory, args.tokens), reference, args, failures)

    f32 = os.path.join(work, "hf-f32")
    for step in (["--input", f32, "--output", os.path.join(work, "rt.bin")],
                 ["--input", os.path.join(work, "rt.bin"), "--output", os.path.join(work, "rt")]):
        subprocess.run([args.convert] + step, check=True, capture_output=True)
    compare("roundtrip", theirs(load(os.path.join(work, "rt")), args.tokens),
            theirs(load(f32), args.tokens), args, failures)

    try:
        from transformers import pipeline
        generator = pipeline("text-generation", model=os.path.join(work, "rt"), device="cpu")
        ids = generator.tokenizer("The quick brown fox")["input_ids"]
        text = generator("The quick brown fox", max_new_tokens=4, do_sample=False)
        ok = ids == [464, 2068, 7586, 21831] and text and "generated_text" in text[0]
        print(f"pipeline: tokenizer ids {ids}, generated {text[0]['generated_text']!r}")
        if not ok:
            failures.append("pipeline")
    except Exception as error:  # a directory the pipeline cannot load alone
        print(f"pipeline: FAILED: {error}")
        failures.append("pipeline")

    if args.bin:
        directory = os.path.join(work, "bin")
        subprocess.run([args.convert, "--input", args.bin, "--output", directory], check=True,
                       capture_output=True)
        compare("bin", ours(args.convert, args.bin, args.tokens),
                theirs(load(directory), args.tokens), args, failures)
    if args.hf_dir:
        compare("hf-dir", ours(args.convert, args.hf_dir, args.tokens),
                theirs(load(args.hf_dir), args.tokens), args, failures)

    print(f"work files: {work}")
    if failures:
        sys.exit(f"FAILED: {', '.join(failures)}")
    print("all checks within", args.tolerance)


if __name__ == "__main__":
    main()
