/**
 * @file attention.cu
 * @brief The attention dispatch: kernel selection, memory sizes and the forward/backward calls
 * routed to the naive, portable-flash and Hopper-flash kernels (see attention.cuh).
 */
#include "kernels/gpu/attention.cuh"

#include <cuda_bf16.h>

#include "base/error.h"
#include "kernels/gpu/attention_hopper.cuh"
#include "kernels/gpu/context.cuh"

namespace gpt2::gpu {
namespace {

using bf16 = __nv_bfloat16;

size_t storage_bytes(const AttentionConfig& c) { return c.bf16 ? 2 : 4; }

// Naive: the backward's scratch (permuted Q, K, V, dO, dQ, dK, dV), then the dP/dS buffer.
size_t naive_scratch_bytes(const AttentionConfig& c) {
  return attention_naive_scratch_elems(c.B, c.T, c.C, c.backward) * storage_bytes(c);
}

template <typename T_>
void forward_typed(const AttentionConfig& c, const AttentionTensors& t, const Context& ctx) {
  T_* out = static_cast<T_*>(t.out);
  const T_* qkv = static_cast<const T_*>(t.qkv);
  switch (c.kernel) {
    case AttentionKernel::kNaive:
      attention_naive_forward(out, static_cast<T_*>(t.saved), qkv, c.B, c.T, c.C, c.NH,
                              static_cast<T_*>(t.workspace), ctx);
      return;
    case AttentionKernel::kFlashPortable:
      attention_flash_forward(out, static_cast<float*>(t.saved), qkv, c.B, c.T, c.C, c.NH,
                              ctx.stream());
      return;
    case AttentionKernel::kFlashHopper:
      if constexpr (std::is_same_v<T_, bf16>) {
        attention_hopper_forward(out, static_cast<float*>(t.saved), qkv, c.B, c.T, c.C, c.NH,
                                 t.workspace, c.forward_shape, ctx.stream(), c.rows,
                                 c.forward_max_blocks, c.forward_persistent_max_t);
        return;
      }
      break;
  }
  GPT2_FAIL("attention kernel ", to_string(c.kernel), " does not take ",
            c.bf16 ? "bf16" : "fp32");
}

template <typename T_>
void backward_typed(const AttentionConfig& c, const AttentionTensors& t, const Context& ctx) {
  T_* dqkv = static_cast<T_*>(t.dqkv);
  const T_* dout = static_cast<const T_*>(t.dout);
  const T_* qkv = static_cast<const T_*>(t.qkv);
  switch (c.kernel) {
    case AttentionKernel::kNaive: {
      T_* scratch = static_cast<T_*>(t.workspace);
      T_* dprobs = reinterpret_cast<T_*>(static_cast<char*>(t.workspace) + naive_scratch_bytes(c));
      attention_naive_backward(dqkv, dout, qkv, static_cast<const T_*>(t.saved), c.B, c.T, c.C,
                               c.NH, scratch, dprobs, ctx);
      return;
    }
    case AttentionKernel::kFlashPortable:
      attention_flash_backward(dqkv, dout, qkv, static_cast<const T_*>(t.out),
                               static_cast<const float*>(t.saved), c.B, c.T, c.C, c.NH,
                               static_cast<float*>(t.workspace), ctx.stream());
      return;
    case AttentionKernel::kFlashHopper:
      if constexpr (std::is_same_v<T_, bf16>) {
        const bool fixed_order = c.deterministic || c.T < c.backward_racing_from_t;
        attention_hopper_backward(dqkv, dout, qkv, static_cast<const bf16*>(t.out),
                                  static_cast<const float*>(t.saved), c.B, c.T, c.C, c.NH,
                                  t.workspace, fixed_order, c.backward_max_blocks, ctx.stream(),
                                  c.rows, c.backward_converts_dq_from_t,
                                  c.backward_stages_grads_max_t);
        return;
      }
      break;
  }
  GPT2_FAIL("attention kernel ", to_string(c.kernel), " does not take ",
            c.bf16 ? "bf16" : "fp32");
}

}  // namespace

const char* to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kNaive: return "naive";
    case AttentionKernel::kFlashPortable: return "flash-portable";
    case AttentionKernel::kFlashHopper: return "flash-hopper";
  }
  return "unknown";
}

const char* to_string(HopperForwardShape shape) {
  switch (shape) {
    case HopperForwardShape::kAuto: return "auto";
    case HopperForwardShape::kRows128: return "fwd128";
    case HopperForwardShape::kRows64: return "fwd64";
    case HopperForwardShape::kRows64NoProducer: return "fwd64w1";
  }
  return "unknown";
}

bool attention_hopper_supported(bool bf16, int head_size, std::string* why_not) {
  auto no = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return false;
  };
  if (!attention_hopper_compiled())
    return no("this build has no sm_90a code (configure with CMAKE_CUDA_ARCHITECTURES=90a)");
  if (!bf16) return no("the Hopper kernels take bf16 only (this run is fp32)");
  if (head_size != 64 && head_size != 128)
    return no(str_cat("the Hopper kernels take head size 64 or 128 (got ", head_size, ")"));
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();  // a probe: leave no error behind for the next launch check
    return no("no CUDA device");
  }
  if (prop.major != 9 || prop.minor != 0)
    return no(str_cat(prop.name, " is sm_", prop.major, prop.minor,
                      "; the Hopper kernels need sm_90 (H100/H200)"));
  return true;
}

AttentionKernel select_attention_kernel(AttentionKind kind, FlashKernelChoice choice, bool bf16,
                                        int head_size) {
  if (kind == AttentionKind::kNaive) return AttentionKernel::kNaive;
  if (head_size != 64 && head_size != 128)
    GPT2_USAGE_FAIL("flash attention on the GPU needs head size 64 or 128 (model has ", head_size,
                    ")");
  std::string why;
  const bool hopper = attention_hopper_supported(bf16, head_size, &why);
  switch (choice) {
    case FlashKernelChoice::kAuto:
      return hopper ? AttentionKernel::kFlashHopper : AttentionKernel::kFlashPortable;
    case FlashKernelChoice::kPortable:
      return AttentionKernel::kFlashPortable;
    case FlashKernelChoice::kHopper:
      if (!hopper) GPT2_USAGE_FAIL("--attn-kernel hopper cannot run here: ", why);
      return AttentionKernel::kFlashHopper;
  }
  GPT2_FAIL("unknown flash kernel choice");
}

size_t attention_saved_bytes(const AttentionConfig& c) {
  if (c.kernel == AttentionKernel::kNaive)
    return static_cast<size_t>(c.B) * c.NH * c.T * c.T * storage_bytes(c);
  return static_cast<size_t>(c.B) * c.NH * c.T * sizeof(float);
}

size_t attention_workspace_bytes(const AttentionConfig& c) {
  const size_t probs_gradient =  // dP, then dS in place (B,NH,T,T): the naive backward's
      c.backward ? static_cast<size_t>(c.B) * c.NH * c.T * c.T * storage_bytes(c) : 0;
  switch (c.kernel) {
    case AttentionKernel::kNaive:
      return naive_scratch_bytes(c) + probs_gradient;
    case AttentionKernel::kFlashPortable:  // the forward keeps no scratch
      return c.backward ? attention_flash_scratch_floats(c.B, c.T, c.C, c.NH) * sizeof(float) : 0;
    case AttentionKernel::kFlashHopper:
      return c.backward ? attention_hopper_workspace_bytes(c.B, c.T, c.C, c.NH)
                        : kHopperForwardWorkspaceBytes;
  }
  return 0;
}

std::string attention_saved_name(const AttentionConfig& c) {
  return c.kernel == AttentionKernel::kNaive ? "attention probabilities P (L,B,NH,T,T)"
                                             : "attention log-sum-exp (L,B,NH,T) fp32";
}

std::string attention_workspace_name(const AttentionConfig& c) {
  if (!c.backward)
    switch (c.kernel) {
      case AttentionKernel::kNaive: return "attention scratch: Q,K,V,O (4,B,T,C)";
      case AttentionKernel::kFlashHopper: return "attention scratch: the forward's work counter";
      default: return "attention scratch (the forward keeps none)";
    }
  switch (c.kernel) {
    case AttentionKernel::kNaive:
      return "attention scratch: Q,K,V,dO,dQ,dK,dV (7,B,T,C) + dP/dS (B,NH,T,T)";
    case AttentionKernel::kFlashPortable:
      return "attention scratch: D (B,NH,T) + fp32 dQ (B,T,C)";
    case AttentionKernel::kFlashHopper:
      return "attention scratch: lse2, D (B,NH,T) + fp32 dQ (B,T,C) + dQ order semaphores + "
             "work counter (forward and backward)";
  }
  return "attention scratch";
}

void check_query_rows(const QueryRows& rows, int T) {
  GPT2_CHECK(rows.count >= 0 && rows.count <= 2, "query rows in ", rows.count, " ranges");
  int previous_end = 0;
  for (int r = 0; r < rows.count; ++r) {
    GPT2_CHECK(rows.begin[r] >= previous_end && rows.begin[r] < rows.end[r] && rows.end[r] <= T,
               "query rows [", rows.begin[r], ", ", rows.end[r], ") out of order or outside T=", T);
    GPT2_CHECK(rows.begin[r] % kQueryRowsGranule == 0 &&
                   (rows.end[r] % kQueryRowsGranule == 0 || rows.end[r] == T),
               "query rows [", rows.begin[r], ", ", rows.end[r], ") not on multiples of ",
               kQueryRowsGranule);
    previous_end = rows.end[r];
  }
}

void attention_forward(const AttentionConfig& config, const AttentionTensors& tensors,
                       const Context& ctx) {
  check_query_rows(config.rows, config.T);
  if (config.bf16) {
    forward_typed<bf16>(config, tensors, ctx);
  } else {
    forward_typed<float>(config, tensors, ctx);
  }
}

void attention_backward(const AttentionConfig& config, const AttentionTensors& tensors,
                        const Context& ctx) {
  GPT2_CHECK(config.backward, "attention backward with a forward-only config (its workspace "
             "has no room for the backward's scratch)");
  check_query_rows(config.rows, config.T);
  if (config.bf16) {
    backward_typed<bf16>(config, tensors, ctx);
  } else {
    backward_typed<float>(config, tensors, ctx);
  }
}

}  // namespace gpt2::gpu
