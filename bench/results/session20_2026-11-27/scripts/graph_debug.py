import sys, traceback, statistics
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
backend = {"fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[sys.argv[1]]
mode = sys.argv[2]  # global | relaxed | thread_local
what = sys.argv[3]  # fwd | fb | bwd
T, HS = int(sys.argv[4]), int(sys.argv[5])
B, NH = max(1, 16384 // T), 12
leaves = [torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3)]
dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
def attend():
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(*leaves, is_causal=True)
outs = []
def burst():
    if what == "fwd":
        with torch.no_grad():
            attend()
    elif what == "fb":
        torch.autograd.grad(attend(), leaves, dout)
    else:
        torch.autograd.grad(outs[0], leaves, dout, retain_graph=True)
try:
    if what == "bwd":
        outs.append(attend())
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2): burst()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode=mode):
        burst()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(5):
        s.record(); g.replay(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    print(f"OK {sys.argv[1:]} {statistics.median(ts):.3f} ms")
except Exception:
    print(f"FAIL {sys.argv[1:]}"); traceback.print_exc(limit=6)
