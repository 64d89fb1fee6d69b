#!/bin/bash
# Session twenty, call i6: why capturing SDPA in a CUDA graph failed (i5): variants, each in its
# own process.
for b in fa2 cudnn; do
  for w in fwd fb bwd; do timeout 60 python3 sx/graph_debug.py $b global $w 4096 64 2>&1 | grep -vE "^\s*$" | tail -7; done
  timeout 60 python3 sx/graph_debug.py $b relaxed fwd 4096 64 2>&1 | grep -vE "^\s*$" | tail -7
done
