/**
 * @file cuda_fp8_linears.cuh
 * @brief --precision fp8 (issue 22): a training model's block linears (qkv, attention
 *        projection, fc, fc projection) with their GEMMs in FP8; internal to
 *        model/cuda_model*.cu.
 *
 * The recipe (bench/NOTES_fp8.md), Transformer Engine's with per-tensor scales:
 *  - E4M3 for a linear's input X and weight W, E5M2 for its output gradient dY.
 *  - Weights: current scaling (amax, then scale, then cast), in both orders, once per optimizer
 *    step (refresh_weights), not per micro-batch. The amaxes come from AdamW when its update
 *    recorded them (attach_weight_amaxes: every weight updated on this rank), else from a pass
 *    over the weights: the same values either way.
 *  - Inputs and gradients: delayed scaling (kernels/gpu/fp8_scale.cuh: an amax history of 16,
 *    power-of-two scales, margins given apart for inputs and gradients), updated once per
 *    optimizer step (update_scales); before their first update inputs are cast with scale 1,
 *    gradients with 2^15 (gradients at initialization are far below E5M2's 57344 / 2^15 =
 *    1.75).
 *  - forward  Y = X W^T + b         E4M3 X x E4M3 W, X cast here in both orders: the row order
 *                                   for this GEMM, the transposed kept for the backward's;
 *                                   fc's GEMM writes its pre-GELU values (bf16, kept for
 *                                   the backward); one pass over them folds the GELU into
 *                                   fcproj's X cast (both orders, its amax)
 *  - dY cast  one pass over dY: its codes in both orders, its amax and the bias gradient's
 *             column partials; fc's with the GELU backward folded in (dY = gelu'(pre) times
 *             the incoming gradient), so fcproj's dgrad leaves its dX before gelu'
 *  - dgrad    dX = dY W             E5M2 dY x E4M3 W^T (cuBLASLt's FP8 DGELU epilogue is a
 *                                   slow separate kernel; hence the GELU in fc's cast)
 *  - wgrad    dW += dY^T X          E5M2 dY^T x E4M3 X^T, the codes the forward kept
 *  fp32 accumulation in every GEMM (the forward's optionally Hopper's fast accumulation,
 *  --fp8-fast-accumulation), bf16 outputs.
 * Buffers (planned by the model's memory plan): the weights' codes, the scale states, every
 * layer's inputs X^T (7C codes a row: what lets the model keep one layer's bf16 GELU output
 * instead of L, cuda_model_plan.cu) and two operand slots of rows x 4C codes (X in the forward,
 * fcproj's X in the second; dY in both orders in the backward).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <cuda_bf16.h>

#include "kernels/gpu/adamw.cuh"
#include "kernels/gpu/context.cuh"
#include "kernels/gpu/fp8_scale.cuh"
#include "kernels/gpu/layernorm_fp8.cuh"
#include "model/config.h"
#include "model/parameters.h"

namespace gpt2::cuda_model_detail {

class Fp8Linears {
 public:
  using bf16 = __nv_bfloat16;
  enum Linear : int { kQkv, kAttProj, kFc, kFcProj, kNumLinears };

  /// Bytes of each buffer for a model of `config` whose micro-batches have `rows` = B*T rows.
  static size_t weight_bytes(const ModelConfig& config);
  static size_t scale_bytes(const ModelConfig& config);
  static size_t operand_bytes(const ModelConfig& config, size_t rows);
  static size_t input_bytes(const ModelConfig& config, size_t rows);

  struct Buffers {
    uint8_t* weights = nullptr;
    gpu::Fp8ScaleState* scales = nullptr;
    uint8_t* operands = nullptr;
    uint8_t* inputs = nullptr;
  };
  /// Takes the planned buffers and writes the initial scale states (on ctx's stream).
  /// fast_forward_accumulation: the forward GEMMs with Hopper's fast FP8 accumulation
  /// (gpu::Fp8Epilogue::fast_accumulation); the backward's always without. delayed: the
  /// inputs' and gradients' scales' history and margins.
  Fp8Linears(const ModelConfig& config, const Buffers& buffers, size_t rows,
             const gpu::Context& ctx, bool fast_forward_accumulation,
             const gpu::Fp8DelayedScaling& delayed = {});

  /// Every layer's weights cast again (current scaling), from the bf16 parameters; their amaxes
  /// from a pass over them, or, with amaxes_recorded, as AdamW left them (below).
  void refresh_weights(const bf16* params, const LayerMajorLayout& layout,
                       bool amaxes_recorded = false);
  /// The weights' amaxes for AdamW to raise (gpu::AdamWSegment::amax): set on the segments that
  /// hold a whole FP8 weight; returns how many (4 a layer when every weight is updated here).
  int attach_weight_amaxes(std::vector<gpu::AdamWSegment>& segments,
                           const LayerMajorLayout& layout) const;
  /// The weights' amaxes zeroed (before an update raises them).
  void zero_weight_amaxes();
  /// The inputs' and gradients' delayed scales from the amaxes since the last update; with
  /// `saturated` (device memory), the count of those whose casts saturated added to it.
  void update_scales(uint32_t* saturated = nullptr);
  /// Every scale state and the count of updates, as bytes (for the training state;
  /// synchronizes); and back (throws gpt2::Error naming what does not match this model).
  std::vector<uint8_t> save_state() const;
  void load_state(const std::vector<uint8_t>& bytes);
  /// The size of save_state()'s bytes.
  size_t state_bytes() const;
  /// The inputs and gradients whose casts saturated since this object was made ("layer 3 fc
  /// input", "layer 0 qkv gradient"), each with its count of updates that found it so, in
  /// state order (synchronizes).
  std::vector<std::pair<std::string, int64_t>> saturated_tensors() const;

  /// Where the op that produces layer l's input to `linear` may write it as FP8 codes itself
  /// (a LayerNorm: gpu::layernorm_forward_fp8): both orders, this input's scale and amax. The
  /// forward then takes in = nullptr.
  gpu::Fp8Destination input_destination(int l, Linear linear) const;
  /// out (rows, OC) = in (rows, IC) W^T + bias; fc: out = gelu(.), pre_gelu = the GEMM's. in
  /// null: its codes are written already (input_destination), else the forward casts it. fc's
  /// forward writes its GELU output only as fcproj's input codes (the GELU folded into their
  /// cast) and leaves out unwritten; fcproj's forward, which must follow fc's in the same
  /// layer, then takes those codes and does not read its in.
  void forward(int l, Linear linear, bf16* out, const bf16* in, const bf16* bias,
               bf16* pre_gelu, int rows);
  /// dinp (rows, IC) = dout W, dweight += dout^T in (in's codes from this layer's forward),
  /// dbias += column sums of dout. fc's takes the GELU's input (its pre-GELU values), and its
  /// dout is the gradient of the GELU's output as fcproj's backward left it: the GELU backward
  /// runs in fc's cast. dbias_scratch: the matmul bias-gradient scratch.
  void backward(int l, Linear linear, bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout,
                const bf16* gelu_input, int rows, float* dbias_scratch);

 private:
  enum Role : int { kWeight, kInput, kGrad, kNumRoles };
  int out_features(Linear linear) const;
  int in_features(Linear linear) const;
  size_t state_count() const {
    return static_cast<size_t>(kNumRoles) * kNumLinears * config_.num_layers;
  }
  /// The scale state of layer l's linear in a role (weights first: one update launch each).
  gpu::Fp8ScaleState* state(int l, Linear linear, Role role) const;
  /// Layer l's weight codes, (OC, IC) or transposed (IC, OC).
  uint8_t* weight_codes(int l, Linear linear, bool transposed) const;
  /// Where a linear's input codes (rows, IC) are: slot 0, fcproj's slot 1 (written by fc's
  /// forward, which reads its own input from slot 0).
  uint8_t* input_rows(Linear linear) const;
  /// Layer l's input X^T (IC, rows), written by the forward for the backward.
  uint8_t* input_codes(int l, Linear linear) const;
  uint8_t* operand(int slot) const { return operands_ + static_cast<size_t>(slot) * slot_bytes_; }

  ModelConfig config_;
  const gpu::Context& ctx_;
  uint8_t* weights_;
  gpu::Fp8ScaleState* scales_;
  uint32_t* saturation_counts_;  // by state, after the states in their buffer (scale_bytes)
  uint8_t* operands_;
  uint8_t* inputs_;
  size_t rows_;
  size_t slot_bytes_;
  bool fast_forward_accumulation_;
  gpu::Fp8DelayedScaling delayed_;
  int gelu_codes_layer_ = -1;  // the layer whose fc GEMM wrote fcproj's input codes, if any
  int64_t updates_ = 0;  // delayed-scale updates so far
};

}  // namespace gpt2::cuda_model_detail
