/**
 * @file cuda_fp8_linears.cu
 * @brief Fp8Linears (cuda_fp8_linears.cuh): the casts, scales and FP8 GEMMs of the block
 *        linears.
 */
#include "model/cuda_fp8_linears.cuh"

#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/fp8_cast.cuh"
#include "kernels/gpu/matmul_fp8.cuh"

namespace gpt2::cuda_model_detail {
namespace {

using cpu::Fp8Format;
constexpr Fp8Format kE4M3 = Fp8Format::kE4M3;
constexpr Fp8Format kE5M2 = Fp8Format::kE5M2;
constexpr float kInitialGradScale = 32768.0f;  // 2^15, see the header
constexpr int kOperandSlots = 2;               // X (forward); dY and dY^T (backward)
constexpr int kWeightTensors[] = {kQkvw, kAttprojw, kFcw, kFcprojw};  // by Linear

// Elements of one layer's four weights: 3C^2 + C^2 + 4C^2 + 4C^2.
size_t layer_weight_elements(const ModelConfig& config) {
  const size_t C = static_cast<size_t>(config.channels);
  return 12 * C * C;
}

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

size_t Fp8Linears::weight_bytes(const ModelConfig& config) {
  return 2 * layer_weight_elements(config) * static_cast<size_t>(config.num_layers);
}

size_t Fp8Linears::scale_bytes(const ModelConfig& config) {
  // The states, then a saturation count per state.
  return (sizeof(gpu::Fp8ScaleState) + sizeof(uint32_t)) * kNumRoles * kNumLinears *
         static_cast<size_t>(config.num_layers);
}

size_t Fp8Linears::operand_bytes(const ModelConfig& config, size_t rows) {
  return kOperandSlots * round_up_256(rows * 4 * static_cast<size_t>(config.channels));
}

size_t Fp8Linears::input_bytes(const ModelConfig& config, size_t rows) {
  // qkv's, attproj's and fc's inputs (C wide each) and fcproj's (4C).
  return static_cast<size_t>(config.num_layers) * 7 * static_cast<size_t>(config.channels) *
         rows;
}

Fp8Linears::Fp8Linears(const ModelConfig& config, const Buffers& buffers, size_t rows,
                       const gpu::Context& ctx, bool fast_forward_accumulation,
                       const gpu::Fp8DelayedScaling& delayed)
    : config_(config), ctx_(ctx), weights_(buffers.weights), scales_(buffers.scales),
      saturation_counts_(reinterpret_cast<uint32_t*>(buffers.scales + state_count())),
      operands_(buffers.operands), inputs_(buffers.inputs), rows_(rows),
      slot_bytes_(round_up_256(rows * 4 * static_cast<size_t>(config.channels))),
      fast_forward_accumulation_(fast_forward_accumulation), delayed_(delayed) {
  GPT2_CHECK(weights_ && scales_ && operands_ && inputs_, "Fp8Linears without its buffers");
  GPT2_CHECK(rows % 16 == 0, "FP8 GEMMs need B*T a multiple of 16 (got ", rows, ")");
  GPT2_CHECK(config.channels % 16 == 0, "FP8 GEMMs need C a multiple of 16 (C=",
             config.channels, ")");
  const int L = config.num_layers;
  std::vector<gpu::Fp8ScaleState> initial(state_count());
  for (int l = 0; l < L; ++l) {
    for (int k = 0; k < kNumLinears; ++k) {
      const auto linear = static_cast<Linear>(k);
      initial[state(l, linear, kWeight) - scales_] = gpu::fp8_initial_state(kE4M3, 1.0f);
      initial[state(l, linear, kInput) - scales_] = gpu::fp8_initial_state(kE4M3, 1.0f);
      initial[state(l, linear, kGrad) - scales_] =
          gpu::fp8_initial_state(kE5M2, kInitialGradScale);
    }
  }
  GPT2_CUDA_CHECK(cudaMemcpyAsync(scales_, initial.data(), initial.size() * sizeof(initial[0]),
                                  cudaMemcpyHostToDevice, ctx_.stream()));
  GPT2_CUDA_CHECK(cudaMemsetAsync(saturation_counts_, 0, state_count() * sizeof(uint32_t),
                                  ctx_.stream()));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));  // `initial` leaves with this scope
}

int Fp8Linears::out_features(Linear linear) const {
  const int C = config_.channels;
  switch (linear) {
    case kQkv: return 3 * C;
    case kFc: return 4 * C;
    default: return C;
  }
}

int Fp8Linears::in_features(Linear linear) const {
  return linear == kFcProj ? 4 * config_.channels : config_.channels;
}

gpu::Fp8ScaleState* Fp8Linears::state(int l, Linear linear, Role role) const {
  const int L = config_.num_layers;
  return scales_ + (static_cast<size_t>(role) * L + l) * kNumLinears + linear;
}

uint8_t* Fp8Linears::weight_codes(int l, Linear linear, bool transposed) const {
  const size_t C = static_cast<size_t>(config_.channels);
  static constexpr size_t kOffsets[] = {0, 3, 4, 8};  // in C^2, by Linear
  // Layer l holds its four weights in (OC, IC) order, then the four transposed.
  const size_t layer = 2 * layer_weight_elements(config_) * static_cast<size_t>(l);
  return weights_ + layer + (transposed ? layer_weight_elements(config_) : 0) +
         kOffsets[linear] * C * C;
}

uint8_t* Fp8Linears::input_rows(Linear linear) const {
  // fcproj's in the other slot: fc's GEMM writes them while it reads its own from slot 0.
  return operand(linear == kFcProj ? 1 : 0);
}

uint8_t* Fp8Linears::input_codes(int l, Linear linear) const {
  // Layer l's 7C rows of codes: qkv's, attproj's and fc's inputs (C each), then fcproj's (4C).
  const size_t C = static_cast<size_t>(config_.channels);
  return inputs_ + (7 * static_cast<size_t>(l) + static_cast<size_t>(linear)) * C * rows_;
}

void Fp8Linears::refresh_weights(const bf16* params, const LayerMajorLayout& layout,
                                 bool amaxes_recorded) {
  cudaStream_t stream = ctx_.stream();
  const int L = config_.num_layers;
  // One pass over every weight, all of them in a few launches: their amaxes alone (codes
  // false), or their codes in both orders.
  auto pass = [&](bool codes) {
    std::vector<gpu::Fp8CastJob<bf16>> jobs;
    jobs.reserve(static_cast<size_t>(L) * kNumLinears);
    for (int l = 0; l < L; ++l)
      for (int k = 0; k < kNumLinears; ++k) {
        const auto linear = static_cast<Linear>(k);
        gpu::Fp8ScaleState* s = state(l, linear, kWeight);
        gpu::Fp8CastJob<bf16> job;
        job.in = params + layout.offset(kWeightTensors[k], l);
        job.rows = out_features(linear);
        job.cols = in_features(linear);
        job.scale = &s->scale;
        job.out = codes ? weight_codes(l, linear, false) : nullptr;
        job.out_t = codes ? weight_codes(l, linear, true) : nullptr;
        job.amax = codes ? nullptr : &s->amax;
        jobs.push_back(job);
      }
    gpu::fp8_cast_transpose_group(jobs.data(), static_cast<int>(jobs.size()), kE4M3, stream);
  };
  // Current scaling: the amaxes (AdamW's, or a pass of their own), the scales from them alone
  // (a history of 1), the casts.
  if (!amaxes_recorded) {
    zero_weight_amaxes();
    pass(false);
  }
  gpu::fp8_update_scales(state(0, kQkv, kWeight), kNumLinears * L, 0, 1, 0, stream);
  pass(true);
}

int Fp8Linears::attach_weight_amaxes(std::vector<gpu::AdamWSegment>& segments,
                                     const LayerMajorLayout& layout) const {
  int attached = 0;
  for (int l = 0; l < config_.num_layers; ++l)
    for (int k = 0; k < kNumLinears; ++k) {
      const auto linear = static_cast<Linear>(k);
      const auto offset = static_cast<int64_t>(layout.offset(kWeightTensors[k], l));
      const int64_t count = static_cast<int64_t>(out_features(linear)) * in_features(linear);
      for (gpu::AdamWSegment& segment : segments)
        if (segment.param_offset == offset && segment.count == count) {
          segment.amax = &state(l, linear, kWeight)->amax;
          ++attached;
        }
    }
  return attached;
}

void Fp8Linears::zero_weight_amaxes() {
  // The weights' states are contiguous (role-major); their amax fields a state apart.
  gpu::Fp8ScaleState* first = state(0, kQkv, kWeight);
  GPT2_CUDA_CHECK(cudaMemset2DAsync(&first->amax, sizeof(gpu::Fp8ScaleState), 0, sizeof(float),
                                    static_cast<size_t>(kNumLinears) * config_.num_layers,
                                    ctx_.stream()));
}

void Fp8Linears::update_scales(uint32_t* saturated) {
  const int count = kNumLinears * config_.num_layers;  // a role's states, contiguous
  for (const Role role : {kInput, kGrad}) {
    gpu::Fp8ScaleState* first = state(0, kQkv, role);
    const int margin = role == kGrad ? delayed_.gradient_margin : delayed_.margin;
    gpu::fp8_update_scales(first, count, updates_, delayed_.history, margin, ctx_.stream(),
                           saturated, saturation_counts_ + (first - scales_));
  }
  ++updates_;
}

std::vector<std::pair<std::string, int64_t>> Fp8Linears::saturated_tensors() const {
  std::vector<uint32_t> counts(state_count());
  GPT2_CUDA_CHECK(cudaMemcpyAsync(counts.data(), saturation_counts_,
                                  counts.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                  ctx_.stream()));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  static constexpr const char* kLinearNames[] = {"qkv", "attproj", "fc", "fcproj"};
  std::vector<std::pair<std::string, int64_t>> tensors;
  for (const Role role : {kInput, kGrad})
    for (int l = 0; l < config_.num_layers; ++l)
      for (int k = 0; k < kNumLinears; ++k) {
        const uint32_t n = counts[static_cast<size_t>(state(l, static_cast<Linear>(k), role) -
                                                      scales_)];
        if (n == 0) continue;
        tensors.emplace_back(str_cat("layer ", l, " ", kLinearNames[k],
                                     role == kInput ? " input" : " gradient"),
                             int64_t{n});
      }
  return tensors;
}

namespace {

// The saved state's header: a tag, the number of scale states and the updates so far.
struct SavedScalesHeader {
  uint64_t tag;  // kSavedScalesTag
  uint64_t states;
  int64_t updates;
};
constexpr uint64_t kSavedScalesTag = 0x3153454c41435338ull;  // "8SCALES1"

}  // namespace

size_t Fp8Linears::state_bytes() const {
  return sizeof(SavedScalesHeader) + state_count() * sizeof(gpu::Fp8ScaleState);
}

std::vector<uint8_t> Fp8Linears::save_state() const {
  const size_t count = state_count();
  const SavedScalesHeader header{kSavedScalesTag, count, updates_};
  std::vector<uint8_t> bytes(sizeof header + count * sizeof(gpu::Fp8ScaleState));
  std::memcpy(bytes.data(), &header, sizeof header);
  GPT2_CUDA_CHECK(cudaMemcpyAsync(bytes.data() + sizeof header, scales_,
                                  count * sizeof(gpu::Fp8ScaleState), cudaMemcpyDeviceToHost,
                                  ctx_.stream()));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  return bytes;
}

void Fp8Linears::load_state(const std::vector<uint8_t>& bytes) {
  const size_t count = state_count();
  SavedScalesHeader header{};
  if (bytes.size() >= sizeof header) std::memcpy(&header, bytes.data(), sizeof header);
  if (header.tag != kSavedScalesTag)
    GPT2_FAIL("the training state's precision state is not --precision fp8's scales");
  if (header.states != count ||
      bytes.size() != sizeof header + count * sizeof(gpu::Fp8ScaleState))
    GPT2_FAIL("the training state holds FP8 scales for ", header.states, " tensors (",
              bytes.size(), " bytes); this model has ", count);
  GPT2_CUDA_CHECK(cudaMemcpyAsync(scales_, bytes.data() + sizeof header,
                                  count * sizeof(gpu::Fp8ScaleState), cudaMemcpyHostToDevice,
                                  ctx_.stream()));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));  // `bytes` may go when this returns
  updates_ = header.updates;
}

gpu::Fp8Destination Fp8Linears::input_destination(int l, Linear linear) const {
  gpu::Fp8ScaleState* x = state(l, linear, kInput);
  gpu::Fp8Destination destination;
  destination.rows = input_rows(linear);
  destination.transposed = input_codes(l, linear);
  destination.scale = &x->scale;
  destination.amax = &x->amax;
  return destination;
}

void Fp8Linears::forward(int l, Linear linear, bf16* out, const bf16* in, const bf16* bias,
                         bf16* pre_gelu, int rows) {
  cudaStream_t stream = ctx_.stream();
  const int OC = out_features(linear), IC = in_features(linear);
  gpu::Fp8ScaleState* x = state(l, linear, kInput);
  gpu::Fp8ScaleState* w = state(l, linear, kWeight);
  GPT2_CHECK(static_cast<size_t>(rows) == rows_, "an FP8 forward of ", rows, " rows, planned ",
             rows_);
  uint8_t* x_codes = input_rows(linear);
  // fcproj's input codes are there already when fc's GEMM wrote them.
  const bool written = in == nullptr || (linear == kFcProj && gelu_codes_layer_ == l);
  if (linear == kFcProj) gelu_codes_layer_ = -1;
  if (!written)
    gpu::fp8_cast_transpose(in, rows, IC, &x->scale, kE4M3, x_codes, input_codes(l, linear),
                            &x->amax, stream);
  const gpu::Fp8Operand a{x_codes, kE4M3, &x->inverse};
  const gpu::Fp8Operand b{weight_codes(l, linear, false), kE4M3, &w->inverse};
  gpu::Fp8Epilogue epilogue;
  epilogue.bias = bias;
  epilogue.fast_accumulation = fast_forward_accumulation_;
  if (pre_gelu) {
    // fc: the plain GEMM to the pre-GELU values (kept for the backward), then one pass over
    // them with the GELU folded into fcproj's input cast: its codes in both orders and its
    // amax. (cuBLASLt's GELU epilogue to E4M3 codes ran at about half the plain GEMM's rate,
    // and its codes still wanted a transpose: bench/NOTES_fp8.md.) `out` stays unwritten.
    gpu::matmul_fp8(pre_gelu, a, b, rows, OC, IC, epilogue, ctx_);
    gpu::Fp8CastFusion<bf16> fusion;
    fusion.gelu_forward = true;
    gpu::Fp8ScaleState* y = state(l, kFcProj, kInput);
    gpu::fp8_cast_transpose(pre_gelu, rows, OC, &y->scale, kE4M3, input_rows(kFcProj),
                            input_codes(l, kFcProj), &y->amax, stream, fusion);
    gelu_codes_layer_ = l;
    return;
  }
  gpu::matmul_fp8(out, a, b, rows, OC, IC, epilogue, ctx_);
}

void Fp8Linears::backward(int l, Linear linear, bf16* dinp, bf16* dweight, bf16* dbias,
                          const bf16* dout, const bf16* gelu_input, int rows,
                          float* dbias_scratch) {
  cudaStream_t stream = ctx_.stream();
  const int OC = out_features(linear), IC = in_features(linear);
  gpu::Fp8ScaleState* x = state(l, linear, kInput);
  gpu::Fp8ScaleState* w = state(l, linear, kWeight);
  gpu::Fp8ScaleState* g = state(l, linear, kGrad);
  GPT2_CHECK(static_cast<size_t>(rows) == rows_, "an FP8 backward of ", rows, " rows, planned ",
             rows_);
  GPT2_CHECK((gelu_input != nullptr) == (linear == kFc),
             "fc's FP8 backward, and only fc's, takes the GELU's input");
  uint8_t* dy = operand(0);
  uint8_t* dy_t = operand(1);
  // One pass over dout: fc's GELU backward, the codes in both orders, the amax and the bias
  // gradient's column partials (dbias_scratch: the matmul bias-gradient scratch, which holds
  // B*T/64 rows of partials, more than these B*T/128).
  gpu::Fp8CastFusion<bf16> fusion;
  fusion.gelu_input = gelu_input;
  fusion.column_partials = dbias != nullptr ? dbias_scratch : nullptr;
  gpu::fp8_cast_transpose(dout, rows, OC, &g->scale, kE5M2, dy, dy_t, &g->amax, stream, fusion);
  if (dbias != nullptr)
    gpu::launch_add_column_partials(dbias, dbias_scratch,
                                    gpu::ceil_div(rows, gpu::kFp8CastTileRows), OC, stream);
  // dgrad: dX = dY W, (rows, IC), K = OC. fcproj's dX is left the gradient of the GELU's
  // output: fc's cast above applies gelu' (cuBLASLt's FP8 DGELU epilogue runs as a separate
  // generic kernel, several times slower than the GEMM: bench/NOTES_fp8.md, "FP8 on the GPU").
  const gpu::Fp8Operand dy_rows{dy, kE5M2, &g->inverse};
  const gpu::Fp8Operand w_t{weight_codes(l, linear, true), kE4M3, &w->inverse};
  gpu::matmul_fp8(dinp, dy_rows, w_t, nullptr, rows, IC, OC, ctx_);
  // wgrad: dW += dY^T X, (OC, IC), K = rows.
  const gpu::Fp8Operand dy_cols{dy_t, kE5M2, &g->inverse};
  const gpu::Fp8Operand x_cols{input_codes(l, linear), kE4M3, &x->inverse};
  gpu::matmul_fp8(dweight, dy_cols, x_cols, nullptr, OC, IC, rows, ctx_, /*accumulate=*/true);
}

}  // namespace gpt2::cuda_model_detail
