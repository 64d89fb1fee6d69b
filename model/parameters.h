/**
 * @file parameters.h
 * @brief GPT-2 parameter tensors: llm.c's order and shapes, one flat buffer, GPT-2 init.
 *
 * Order (sizes):  wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b (L,C), qkvw (L,3C,C), qkvb (L,3C),
 *   attprojw (L,C,C), attprojb (L,C), ln2w (L,C), ln2b (L,C), fcw (L,4C,C), fcb (L,4C),
 *   fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C).
 * All sizes and offsets are 64-bit (wpe alone is 100M elements at maxT = 131072, C = 768).
 * Init (GPT-2): weights ~ normal(0, 0.02), residual projections (attprojw, fcprojw) scaled by
 *   1/sqrt(2L), biases 0, LayerNorm weights 1; the padding rows [V, Vp) of wte are 0.
 *   Each tensor draws from its own stream seeded by (seed, tensor index), so one tensor's size
 *   (e.g. maxT) does not change another tensor's values.
 * Weight decay applies to the 2-D weights only: wte, wpe, qkvw, attprojw, fcw, fcprojw.
 * LayerMajorLayout is the CUDA model's order of the same values: wte, wpe, then layer 0's twelve
 * per-layer tensors (in the order above), layer 1's, ..., then lnfw, lnfb. A layer's parameters
 * (and gradients) are then one contiguous range, which data parallelism reduces and gathers as
 * one collective; every host interface (checkpoints, get/set_parameters) keeps llm.c's order,
 * converted by from_llmc / to_llmc.
 */
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace gpt2 {

enum ParamTensor : int {
  kWte, kWpe, kLn1w, kLn1b, kQkvw, kQkvb, kAttprojw, kAttprojb,
  kLn2w, kLn2b, kFcw, kFcb, kFcprojw, kFcprojb, kLnfw, kLnfb,
  kNumParamTensors
};

struct ParameterLayout {
  std::array<size_t, kNumParamTensors> sizes{};
  std::array<size_t, kNumParamTensors> offsets{};
  size_t total = 0;
  int num_layers = 0;

  /// Where layer l of per-layer `tensor` begins (each tensor holds its L layers in a row).
  size_t layer_offset(int tensor, int l) const {
    return offsets[tensor] + static_cast<size_t>(l) * (sizes[tensor] / num_layers);
  }

  static ParameterLayout for_config(const ModelConfig& config);
  static const char* name(int tensor);      // "wte", "wpe", ...
  static bool decays(int tensor);           // weight decay applies
  static bool is_per_layer(int tensor);     // leading L dimension
};

/// One tensor's slice of one layer (or a whole tensor that has no layers: layer -1) in two
/// orders: `offset` in LayerMajorLayout's, `source` in ParameterLayout's.
struct ParameterSlice {
  int tensor = 0;
  int layer = -1;
  size_t offset = 0;
  size_t source = 0;
  size_t size = 0;
};

class LayerMajorLayout {
 public:
  explicit LayerMajorLayout(const ModelConfig& config);

  size_t total() const { return total_; }
  int num_layers() const { return num_layers_; }
  /// Every slice, in this layout's order.
  const std::vector<ParameterSlice>& slices() const { return slices_; }
  /// Where `tensor` (of `layer`, for per-layer tensors; layer ignored otherwise) begins.
  size_t offset(int tensor, int layer = 0) const;
  /// Where layer l's range begins, 0 <= l <= L (layer_begin(L): where lnfw begins).
  size_t layer_begin(int layer) const;
  /// The boundaries that keep each layer, wte, wpe and lnf in buckets of their own (ShardPlan's
  /// cuts), so that a layer's gradients become ready, and its parameters are needed, at once.
  std::vector<size_t> bucket_cuts() const;

  /// out (total) = the llm.c-ordered llmc (total) in this order, and back.
  template <typename T>
  void from_llmc(const T* llmc, T* out) const {
    for (const ParameterSlice& s : slices_)
      std::copy(llmc + s.source, llmc + s.source + s.size, out + s.offset);
  }
  template <typename T>
  void to_llmc(const T* in, T* llmc) const {
    for (const ParameterSlice& s : slices_)
      std::copy(in + s.offset, in + s.offset + s.size, llmc + s.source);
  }

 private:
  std::vector<ParameterSlice> slices_;
  std::array<size_t, kNumParamTensors> in_layer_{};  // per-layer tensors: offset in a layer
  std::array<size_t, kNumParamTensors> whole_{};     // the others: their offset
  size_t first_layer_ = 0, layer_size_ = 0, total_ = 0;
  int num_layers_ = 0;
};

/// One transformer layer's tensors in a flat buffer (parameters, or their gradients), in
/// either order: the CUDA model's LayerMajorLayout or the CPU model's ParameterLayout.
template <typename T>
struct LayerTensors {
  T* ln1w;
  T* ln1b;
  T* qkvw;      // (3C, C)
  T* qkvb;      // (3C)
  T* attprojw;  // (C, C)
  T* attprojb;
  T* ln2w;
  T* ln2b;
  T* fcw;       // (4C, C)
  T* fcb;       // (4C)
  T* fcprojw;   // (C, 4C)
  T* fcprojb;
};

/// Layer l's tensors in `base`, a buffer of `layout`'s order.
template <typename T>
LayerTensors<T> layer_tensors(T* base, const LayerMajorLayout& layout, int l) {
  const auto at = [&](int tensor) { return base + layout.offset(tensor, l); };
  return {at(kLn1w),     at(kLn1b),     at(kQkvw), at(kQkvb), at(kAttprojw), at(kAttprojb),
          at(kLn2w),     at(kLn2b),     at(kFcw),  at(kFcb),  at(kFcprojw),  at(kFcprojb)};
}

/// Layer l's tensors in `base`, a buffer of `layout`'s (llm.c's) order.
template <typename T>
LayerTensors<T> layer_tensors(T* base, const ParameterLayout& layout, int l) {
  const auto at = [&](int tensor) { return base + layout.layer_offset(tensor, l); };
  return {at(kLn1w),     at(kLn1b),     at(kQkvw), at(kQkvb), at(kAttprojw), at(kAttprojb),
          at(kLn2w),     at(kLn2b),     at(kFcw),  at(kFcb),  at(kFcprojw),  at(kFcprojb)};
}

/// Fills params (layout.total floats) with GPT-2's initialization.
void init_parameters(float* params, const ModelConfig& config, uint64_t seed);

}  // namespace gpt2
