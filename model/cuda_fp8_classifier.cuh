/**
 * @file cuda_fp8_classifier.cuh
 * @brief --precision fp8 --fp8-classifier (issue 22): the classifier's forward and input-gradient
 *        GEMMs in FP8; internal to model/cuda_model*.cu.
 *
 * The classifier (logits = lnf wte^T, by chunks of rows; wte tied to the token embedding) in
 * the block linears' recipe (cuda_fp8_linears.cuh):
 *  - forward  logits = lnf wte^T      E4M3 lnf (cast once per micro-batch, delayed scale) x
 *                                     E4M3 wte (current scale, cast once per optimizer step)
 *  - dgrad    dlnf = dlogits wte      E5M2 dlogits (written by the cross-entropy kernel itself)
 *                                     x E4M3 wte^T. Their scale is current scaling of a bound
 *                                     known in advance: |dlogit| <= |dloss| (the loss scale
 *                                     over the rows), so it never saturates, even on the first
 *                                     micro-batch (a delayed scale has no history there, and a
 *                                     fixed initial one saturates small batches)
 *  - wgrad    dwte += dlogits^T lnf   bf16, as without FP8; with weight_gradient (--fp8-classifier
 *                                     all) the same E5M2 dlogits, transposed to (Vp, rows) by
 *                                     fp8_transpose into the logits' buffer (the cross-entropy
 *                                     then writes the codes alone: no bf16 dlogits), x E4M3
 *                                     lnf^T (its chunk's (C, rows) block, cast beside the rows),
 *                                     accumulated into the bf16 gradient per chunk as in bf16.
 *                                     A chunk whose rows are not a multiple of 16 (cuBLASLt's
 *                                     FP8 leading dimension) runs it in bf16 from bf16 dlogits.
 * fp32 accumulation, bf16 logits, dlnf and dwte. One buffer (bytes()): the three scale states,
 * wte's codes in both orders, lnf's codes (with weight_gradient in both orders) and one
 * chunk's dlogits codes.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_bf16.h>

#include "kernels/gpu/context.cuh"
#include "kernels/gpu/fp8_cast.cuh"
#include "kernels/gpu/fp8_scale.cuh"
#include "model/config.h"

namespace gpt2::cuda_model_detail {

class Fp8Classifier {
 public:
  using bf16 = __nv_bfloat16;

  /// Bytes of its buffer for `rows` = B*T rows handled in chunks of up to chunk_rows.
  static size_t bytes(const ModelConfig& config, size_t rows, size_t chunk_rows,
                      bool weight_gradient);

  /// Takes the planned buffer and writes the initial scale states (on ctx's stream).
  /// fast_forward_accumulation: the forward GEMM with Hopper's fast FP8 accumulation
  /// (gpu::Fp8Epilogue::fast_accumulation); the gradients' always without. weight_gradient:
  /// dwte in FP8 too (weight_gradient()). delayed: lnf's scale's history and margin.
  Fp8Classifier(const ModelConfig& config, uint8_t* buffer, size_t rows, size_t chunk_rows,
                const gpu::Context& ctx, bool fast_forward_accumulation, bool weight_gradient,
                const gpu::Fp8DelayedScaling& delayed = {});

  /// wte's codes in both orders again (current scaling), from the bf16 parameters.
  void refresh_weights(const bf16* wte);
  /// lnf's delayed scale from the amaxes since the last update; with `saturated` (device
  /// memory), 1 added to it when lnf's casts saturated.
  void update_scales(uint32_t* saturated = nullptr);
  /// dlogits' scale for a micro-batch whose gradient of each row's loss is dloss.
  void set_gradient_bound(float dloss);
  /// The scale states and update count as bytes (for the training state; synchronizes), and
  /// back (throws gpt2::Error naming what does not match).
  std::vector<uint8_t> save_state() const;
  void load_state(const std::vector<uint8_t>& bytes);

  /// lnf (rows, C), every row of the micro-batch, to E4M3 codes: rows, and with
  /// weight_gradient each chunk's (C, chunk rows) block of the transposed order.
  void cast_input(const bf16* lnf, int rows);
  /// logits (rows, Vp) = lnf rows [first, first + rows) times wte^T.
  void forward(bf16* logits, int64_t first, int rows);
  /// Where the cross-entropy writes the chunk's dlogits codes (crossentropy.cuh).
  gpu::Fp8Destination gradient_destination() const;
  /// dlnf (rows, C) = the chunk's dlogits (their codes) times wte.
  void input_gradient(bf16* dlnf, int rows);
  /// Whether weight_gradient takes a chunk of `rows` (else dwte stays bf16 for it, from bf16
  /// dlogits): built with weight_gradient, and K = rows a multiple of 16 (cuBLASLt's FP8).
  bool weight_gradient_in_fp8(int rows) const { return weight_gradient_ && rows % 16 == 0; }
  /// dwte (Vp, C) += the chunk's dlogits^T (their codes, transposed into `scratch`, at least
  /// rows * Vp bytes on a 16-byte boundary: the logits' buffer, done with by then) times lnf
  /// rows [first, first + rows).
  void weight_gradient(bf16* dwte, uint8_t* scratch, int64_t first, int rows);

 private:
  enum Role : int { kWeight, kInput, kGrad, kNumRoles };
  struct Layout;
  static Layout layout(const ModelConfig& config, size_t rows, size_t chunk_rows,
                       bool weight_gradient);
  gpu::Fp8ScaleState* state(Role role) const { return scales_ + role; }

  ModelConfig config_;
  const gpu::Context& ctx_;
  size_t rows_, chunk_rows_;
  bool fast_forward_accumulation_;
  bool weight_gradient_;
  gpu::Fp8DelayedScaling delayed_;
  gpu::Fp8ScaleState* scales_;
  uint8_t* weight_codes_;             // wte (Vp, C)
  uint8_t* weight_codes_transposed_;  // wte^T (C, Vp)
  uint8_t* input_codes_;              // lnf (rows, C)
  uint8_t* input_codes_transposed_;   // weight_gradient: lnf^T by chunks, chunk k's (C, its
                                      // rows) at k's first row times C; else null
  uint8_t* grad_codes_;               // a chunk's dlogits (chunk_rows, Vp)
  int64_t updates_ = 0;               // delayed-scale updates so far
};

}  // namespace gpt2::cuda_model_detail
