/**
 * @file cuda_fp8_classifier.cu
 * @brief Fp8Classifier (cuda_fp8_classifier.cuh): the classifier's FP8 casts, scales and GEMMs.
 */
#include "model/cuda_fp8_classifier.cuh"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/gpu/matmul_fp8.cuh"

namespace gpt2::cuda_model_detail {
namespace {

using cpu::Fp8Format;
constexpr Fp8Format kE4M3 = Fp8Format::kE4M3;
constexpr Fp8Format kE5M2 = Fp8Format::kE5M2;

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The saved state's header: a tag, the number of scale states and the updates so far.
struct SavedHeader {
  uint64_t tag;
  uint64_t states;
  int64_t updates;
};
constexpr uint64_t kSavedTag = 0x314c4353534c4338ull;  // "8CLSSCL1"

}  // namespace

/// Offsets into the buffer, each on a 256-byte boundary.
struct Fp8Classifier::Layout {
  size_t weights, weights_transposed, input, input_transposed, grad, total;
};

Fp8Classifier::Layout Fp8Classifier::layout(const ModelConfig& config, size_t rows,
                                            size_t chunk_rows, bool weight_gradient) {
  const size_t C = static_cast<size_t>(config.channels);
  const size_t Vp = static_cast<size_t>(config.padded_vocab_size);
  Layout at{};
  at.weights = round_up_256(kNumRoles * sizeof(gpu::Fp8ScaleState));
  at.weights_transposed = at.weights + round_up_256(Vp * C);
  at.input = at.weights_transposed + round_up_256(Vp * C);
  at.input_transposed = at.input + round_up_256(rows * C);
  at.grad = at.input_transposed + (weight_gradient ? round_up_256(rows * C) : 0);
  at.total = at.grad + round_up_256(chunk_rows * Vp);
  return at;
}

size_t Fp8Classifier::bytes(const ModelConfig& config, size_t rows, size_t chunk_rows,
                            bool weight_gradient) {
  return layout(config, rows, chunk_rows, weight_gradient).total;
}

Fp8Classifier::Fp8Classifier(const ModelConfig& config, uint8_t* buffer, size_t rows,
                             size_t chunk_rows, const gpu::Context& ctx,
                             bool fast_forward_accumulation, bool weight_gradient,
                             const gpu::Fp8DelayedScaling& delayed)
    : config_(config), ctx_(ctx), rows_(rows), chunk_rows_(chunk_rows),
      fast_forward_accumulation_(fast_forward_accumulation), weight_gradient_(weight_gradient),
      delayed_(delayed),
      scales_(reinterpret_cast<gpu::Fp8ScaleState*>(buffer)) {
  GPT2_CHECK(buffer != nullptr, "Fp8Classifier without its buffer");
  GPT2_CHECK(config.channels % 16 == 0 && config.padded_vocab_size % 16 == 0,
             "FP8 classifier GEMMs need C and Vp multiples of 16 (C=", config.channels,
             ", Vp=", config.padded_vocab_size, ")");
  const Layout at = layout(config, rows, chunk_rows, weight_gradient);
  weight_codes_ = buffer + at.weights;
  weight_codes_transposed_ = buffer + at.weights_transposed;
  input_codes_ = buffer + at.input;
  input_codes_transposed_ = weight_gradient ? buffer + at.input_transposed : nullptr;
  grad_codes_ = buffer + at.grad;
  const gpu::Fp8ScaleState initial[kNumRoles] = {gpu::fp8_initial_state(kE4M3, 1.0f),
                                                 gpu::fp8_initial_state(kE4M3, 1.0f),
                                                 gpu::fp8_initial_state(kE5M2, 1.0f)};
  GPT2_CUDA_CHECK(cudaMemcpyAsync(scales_, initial, sizeof initial, cudaMemcpyHostToDevice,
                                  ctx_.stream()));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));  // `initial` leaves with this scope
}

void Fp8Classifier::refresh_weights(const bf16* wte) {
  cudaStream_t stream = ctx_.stream();
  const int64_t Vp = config_.padded_vocab_size, C = config_.channels;
  gpu::Fp8ScaleState* w = state(kWeight);
  // Current scaling: the amax, the scale from it alone (a history of 1), the codes.
  gpu::fp8_cast_transpose(wte, Vp, C, &w->scale, kE4M3, nullptr, nullptr, &w->amax, stream);
  gpu::fp8_update_scales(w, 1, 0, 1, 0, stream);
  gpu::fp8_cast_transpose(wte, Vp, C, &w->scale, kE4M3, weight_codes_, weight_codes_transposed_,
                          nullptr, stream);
}

void Fp8Classifier::update_scales(uint32_t* saturated) {
  gpu::fp8_update_scales(state(kInput), 1, updates_++, delayed_.history, delayed_.margin,
                         ctx_.stream(), saturated);
}

void Fp8Classifier::set_gradient_bound(float dloss) {
  // |dlogit| = |softmax - onehot| |dloss| <= |dloss|: a bound known before the logits are.
  gpu::fp8_scale_from_bound(state(kGrad), dloss, ctx_.stream());
}

std::vector<uint8_t> Fp8Classifier::save_state() const {
  const SavedHeader header{kSavedTag, kNumRoles, updates_};
  std::vector<uint8_t> bytes(sizeof header + kNumRoles * sizeof(gpu::Fp8ScaleState));
  std::memcpy(bytes.data(), &header, sizeof header);
  GPT2_CUDA_CHECK(cudaMemcpyAsync(bytes.data() + sizeof header, scales_,
                                  kNumRoles * sizeof(gpu::Fp8ScaleState),
                                  cudaMemcpyDeviceToHost, ctx_.stream()));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  return bytes;
}

void Fp8Classifier::load_state(const std::vector<uint8_t>& bytes) {
  SavedHeader header{};
  if (bytes.size() >= sizeof header) std::memcpy(&header, bytes.data(), sizeof header);
  if (header.tag != kSavedTag || header.states != kNumRoles ||
      bytes.size() != sizeof header + kNumRoles * sizeof(gpu::Fp8ScaleState))
    GPT2_FAIL("the training state's FP8 classifier scales do not match this model (",
              bytes.size(), " bytes)");
  GPT2_CUDA_CHECK(cudaMemcpyAsync(scales_, bytes.data() + sizeof header,
                                  kNumRoles * sizeof(gpu::Fp8ScaleState),
                                  cudaMemcpyHostToDevice, ctx_.stream()));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));  // `bytes` may go when this returns
  updates_ = header.updates;
}

void Fp8Classifier::cast_input(const bf16* lnf, int rows) {
  GPT2_CHECK(static_cast<size_t>(rows) == rows_, "an FP8 classifier over ", rows,
             " rows, planned ", rows_);
  gpu::Fp8ScaleState* x = state(kInput);
  const int64_t C = config_.channels;
  if (!weight_gradient_) {
    gpu::fp8_cast_transpose(lnf, rows, C, &x->scale, kE4M3, input_codes_, nullptr, &x->amax,
                            ctx_.stream());
    return;
  }
  // A job per chunk, in grouped launches: each chunk's transposed codes a (C, chunk rows) matrix
  // of their own, the wgrad's operand; the amax raised by each.
  std::vector<gpu::Fp8CastJob<bf16>> jobs;
  for (int64_t first = 0; first < rows; first += static_cast<int64_t>(chunk_rows_)) {
    const int64_t chunk = std::min<int64_t>(static_cast<int64_t>(chunk_rows_), rows - first);
    jobs.push_back({lnf + first * C, chunk, C, &x->scale, input_codes_ + first * C,
                    input_codes_transposed_ + first * C, &x->amax});
  }
  gpu::fp8_cast_transpose_group(jobs.data(), static_cast<int>(jobs.size()), kE4M3,
                                ctx_.stream());
}

void Fp8Classifier::forward(bf16* logits, int64_t first, int rows) {
  GPT2_CHECK(first >= 0 && rows >= 1 && static_cast<size_t>(first + rows) <= rows_,
             "FP8 classifier rows [", first, ", ", first + rows, ") of ", rows_);
  const int C = config_.channels, Vp = config_.padded_vocab_size;
  const gpu::Fp8Operand x{input_codes_ + first * C, kE4M3, &state(kInput)->inverse};
  const gpu::Fp8Operand w{weight_codes_, kE4M3, &state(kWeight)->inverse};
  gpu::Fp8Epilogue epilogue;
  epilogue.fast_accumulation = fast_forward_accumulation_;
  gpu::matmul_fp8(logits, x, w, rows, Vp, C, epilogue, ctx_);
}

gpu::Fp8Destination Fp8Classifier::gradient_destination() const {
  gpu::Fp8Destination destination;
  destination.rows = grad_codes_;
  destination.format = kE5M2;
  destination.scale = &state(kGrad)->scale;  // from the bound: no amax to gather
  return destination;
}

void Fp8Classifier::input_gradient(bf16* dlnf, int rows) {
  GPT2_CHECK(rows >= 1 && static_cast<size_t>(rows) <= chunk_rows_, "an FP8 classifier chunk of ",
             rows, " rows, planned ", chunk_rows_);
  const int C = config_.channels, Vp = config_.padded_vocab_size;
  const gpu::Fp8Operand dy{grad_codes_, kE5M2, &state(kGrad)->inverse};
  const gpu::Fp8Operand w_t{weight_codes_transposed_, kE4M3, &state(kWeight)->inverse};
  gpu::matmul_fp8(dlnf, dy, w_t, nullptr, rows, C, Vp, ctx_);
}

void Fp8Classifier::weight_gradient(bf16* dwte, uint8_t* scratch, int64_t first, int rows) {
  GPT2_CHECK(weight_gradient_in_fp8(rows) && static_cast<size_t>(rows) <= chunk_rows_ &&
                 first >= 0 && static_cast<size_t>(first + rows) <= rows_,
             "an FP8 classifier weight gradient over rows [", first, ", ", first + rows, ")");
  const int C = config_.channels, Vp = config_.padded_vocab_size;
  gpu::fp8_transpose(grad_codes_, rows, Vp, scratch, ctx_.stream());
  const gpu::Fp8Operand dy_t{scratch, kE5M2, &state(kGrad)->inverse};
  const gpu::Fp8Operand x_t{input_codes_transposed_ + first * C, kE4M3, &state(kInput)->inverse};
  gpu::matmul_fp8(dwte, dy_t, x_t, nullptr, Vp, C, rows, ctx_, /*accumulate=*/true);
}

}  // namespace gpt2::cuda_model_detail
