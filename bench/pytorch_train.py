#!/usr/bin/env python3
"""PyTorch GPT-2 training throughput on the points of gpt2-sweep, for the README's comparison.

The same model as `gpt2-train --model NAME` (dN: N layers, N heads, 64 N channels; gpt2,
gpt2-medium, gpt2-large, gpt2-xl; vocabulary 50257 padded to 50304, tied embeddings, GELU tanh,
pre-LayerNorm), written the plain nanoGPT way:
fp32 parameters under bf16 autocast, attention by scaled_dot_product_attention (causal; PyTorch
picks its backend), fused AdamW, random tokens (the data does not change the speed). For every
(T, B) it times --steps optimizer steps after --warmup ones (CUDA-synchronized wall clock per
step, median) and reports tokens/s = B*T / median step time and the peak memory PyTorch reserved.
--compile also times torch.compile (at the T values of --compile-seq-lens only: compiling takes
a minute). Out-of-memory points are reported as OOM.

With --sweep-csv (the sweep.csv gpt2-sweep wrote in the same device call) it prints and writes
(--markdown) one table: this trainer's flash and naive next to PyTorch, with the ratio.
"""
import argparse
import csv
import datetime
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_io import print_table, write_csv


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.c_attn(self.ln_1(x)).view(B, T, 3, self.NH, C // self.NH)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.c_fcproj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L=12, NH=12, C=768, Vp=50304, max_T=1024):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(max_T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


PRESETS = {"gpt2": (12, 12, 768), "gpt2-medium": (24, 16, 1024), "gpt2-large": (36, 20, 1280),
           "gpt2-xl": (48, 25, 1600)}


def model_shape(name):
    """(layers, heads, channels) of a gpt2-train model preset."""
    if name in PRESETS:
        return PRESETS[name]
    if name.startswith("d") and name[1:].isdigit() and int(name[1:]) > 0:
        depth = int(name[1:])
        return depth, depth, 64 * depth
    raise SystemExit(f"pytorch_train.py: unknown model preset '{name}'")


def measure(model_name, T, B, steps, warmup, compiled):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    L, NH, C = model_shape(model_name)
    model = GPT2(L=L, NH=NH, C=C, max_T=T).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if compiled else model
    idx = torch.randint(0, 50257, (B, T), device="cuda")
    targets = torch.randint(0, 50257, (B, T), device="cuda")
    times = []
    for step in range(warmup + steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    peak = torch.cuda.max_memory_reserved()
    del model, optimizer, step_model
    return B * T / median, median * 1e3, peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="d12", help="gpt2-train preset: dN, gpt2, gpt2-medium, ...")
    parser.add_argument("--seq-lens", default="1024,2048,4096,8192,16384,32768,65536")
    parser.add_argument("--tokens-per-step", type=int, default=16384)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile")
    parser.add_argument("--compile-seq-lens", default="16384")
    parser.add_argument("--csv", default="out/pytorch_train.csv")
    parser.add_argument("--sweep-csv", help="gpt2-sweep's sweep.csv from the same run")
    parser.add_argument("--markdown", help="write the comparison table here")
    args = parser.parse_args()
    if args.sweep_csv and not os.path.isfile(args.sweep_csv):
        sys.exit(f"pytorch_train.py: --sweep-csv {args.sweep_csv}: no such file (run gpt2-sweep "
                 "first, or leave --sweep-csv out)")
    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.cuda.get_device_name()
    print(f"PyTorch {torch.__version__} GPT-2 {args.model} training on {device}: bf16 autocast, SDPA, "
          f"fused AdamW, median of {args.steps} steps after {args.warmup}", flush=True)
    rows = []
    modes = [("eager", False)] + ([("compile", True)] if args.compile else [])
    compile_lens = {int(x) for x in args.compile_seq_lens.split(",")}
    for T in (int(x) for x in args.seq_lens.split(",")):
        B = max(1, args.tokens_per_step // T)
        for mode, compiled in modes:
            if compiled and T not in compile_lens:
                continue
            try:
                tokens_per_s, step_ms, peak = measure(args.model, T, B, args.steps, args.warmup,
                                                      compiled)
                status = "ok"
            except torch.cuda.OutOfMemoryError:
                tokens_per_s, step_ms, peak, status = math.nan, math.nan, math.nan, "OOM"
                torch.cuda.empty_cache()
            rows.append(dict(device=device, model=args.model, seq_len=T, batch_size=B, mode=mode,
                             status=status,
                             tokens_per_s=tokens_per_s, median_step_ms=step_ms,
                             peak_mem_bytes=peak))
            print(f"T={T:6d} B={B:3d} {mode:8s} {status:4s} {tokens_per_s:10.0f} tokens/s "
                  f"{step_ms:9.2f} ms/step  peak {peak / 2**30:6.2f} GiB", flush=True)
    write_csv(args.csv, rows)
    if args.sweep_csv:
        compare(args, rows, device)


def training_flops_per_token(model_name, T):
    """The trainer's MFU numerator (train/metrics.cpp): 6 (N - maxT C) + 6 L T C, maxT = T."""
    L, _, C = model_shape(model_name)
    num_params = 50304 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6.0 * (num_params - T * C) + 6.0 * L * T * C


def compare(args, torch_rows, device):
    with open(args.sweep_csv) as f:
        ours = list(csv.DictReader(f))
    by_key = {(int(r["seq_len"]), r["attn"]): r for r in ours}
    torch_by_key = {(r["seq_len"], r["mode"]): r for r in torch_rows}

    def fmt(r, key="tokens_per_s"):
        if r is None:
            return "-", "-"
        if r["status"] != "ok":
            return r["status"], "-"
        return f"{float(r[key]):.0f}", f"{float(r['peak_mem_bytes']) / 2**30:.2f} GiB"

    def mfu(r, T, peak):
        if r is None or r["status"] != "ok" or not peak:
            return "-"
        return f"{100 * float(r['tokens_per_s']) * training_flops_per_token(args.model, T) / peak:.1f}%"

    lines = [f"{args.model} training, bf16, tokens/s and peak memory; {device}, "
             f"{datetime.date.today().isoformat()}, one device call (gpt2-sweep, then PyTorch "
             f"{torch.__version__} eager with SDPA{' and torch.compile' if args.compile else ''}).",
             "",
             "| T | B | flash tokens/s | flash memory | flash MFU | naive tokens/s | naive memory | "
             "PyTorch eager tokens/s | PyTorch memory | eager MFU | flash / PyTorch |"
             + (" torch.compile tokens/s | compile memory | compile MFU | flash / compile |"
                if args.compile else ""),
             "|" + " --- |" * (11 + (4 if args.compile else 0))]
    for T in sorted({int(r["seq_len"]) for r in ours}):
        flash, naive = by_key.get((T, "flash")), by_key.get((T, "naive"))
        eager, comp = torch_by_key.get((T, "eager")), torch_by_key.get((T, "compile"))
        B = (flash or naive)["batch_size"]
        # The device's peak as the trainer took it (its MFU = tokens/s x FLOPs/token / peak).
        peak = None
        if flash and flash["status"] == "ok" and float(flash.get("mfu") or 0) > 0:
            peak = float(flash["tokens_per_s"]) * training_flops_per_token(args.model, T) / \
                float(flash["mfu"])
        ratio = "-"
        if flash and eager and flash["status"] == "ok" and eager["status"] == "ok":
            ratio = f"{float(flash['tokens_per_s']) / eager['tokens_per_s']:.2f}x"
        row = [str(T), str(B), *fmt(flash), mfu(flash, T, peak), *fmt(naive), *fmt(eager),
               mfu(eager, T, peak), ratio]
        if args.compile:
            compile_ratio = "-"
            if comp and flash and comp["status"] == "ok" and flash["status"] == "ok":
                compile_ratio = f"{float(flash['tokens_per_s']) / comp['tokens_per_s']:.2f}x"
            row += [*fmt(comp), mfu(comp, T, peak), compile_ratio]
        lines.append("| " + " | ".join(row) + " |")
    print_table(lines, args.markdown)


if __name__ == "__main__":
    main()
