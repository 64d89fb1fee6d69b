#!/usr/bin/env python3
"""One causal SDPA forward+backward for a profiler: kernel against kernel with ncu.

Three warm-up steps, then one forward+backward on contiguous (B, NH, T, HS) bf16 tensors
(B = 16384 / T, NH = 12) inside cudaProfilerStart/Stop, so that

  ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
      python3 bench/pytorch_attention_once.py 1024 64 cudnn

lists the backend's kernels and their times alone (no Python or launch overhead), for the same
shapes as `gpt2-attention-bench --seq-lens 1024 --head-sizes 64` under ncu. Backend: cudnn or fa2.
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: pytorch_attention_once.py T HS [cudnn|fa2]")
    T, HS = int(sys.argv[1]), int(sys.argv[2])
    name = sys.argv[3] if len(sys.argv) > 3 else "cudnn"
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}
    if name not in backends:
        sys.exit(f"backend must be cudnn or fa2 (got '{name}')")
    B, NH = max(1, 16384 // T), 12
    q, k, v = [torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16).requires_grad_()
               for _ in range(3)]
    dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)

    def step():
        for t in (q, k, v):
            t.grad = None
        with sdpa_kernel(backends[name]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(dout)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
