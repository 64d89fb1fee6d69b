#!/usr/bin/env python3
"""cuDNN SDPA backward (causal, bf16, B = 16384 / T, 12 heads) timed cold and sustained: after a
3 s sleep one warm-up call and one timed; then after W warm-up calls the median of 10 bursts of
4. Usage: sdpa_heat.py T HS W..."""
import sys, time, statistics
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

T, HS = int(sys.argv[1]), int(sys.argv[2])
B, NH = max(1, 16384 // T), 12
q, k, v = [torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3)]
dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
flops = 2.5 * 4 * B * NH * T * T * HS / 2
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
def bwd():
    torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
def timed(burst):
    s.record(); [bwd() for _ in range(burst)]; e.record(); e.synchronize()
    return s.elapsed_time(e) / burst
for W in [0] + [int(w) for w in sys.argv[3:]]:
    time.sleep(3)
    if W == 0:
        bwd(); torch.cuda.synchronize(); ms = timed(1); label = "cold (1 call after 3 s idle)"
    else:
        for _ in range(W): bwd()
        ms = statistics.median(timed(4) for _ in range(10)); label = f"after {W} warm-up calls"
    print(f"cudnn HS {HS} T {T} bwd {ms:.3f} ms {flops / ms / 1e9:.1f} TFLOP/s  {label}", flush=True)
