/**
 * @file cuda_model.cu
 * @brief CudaModel<T_>'s forward, backward, evaluation and optimizer step over kernels/gpu.
 *
 * The layer structure, the residual-gradient discipline and the buffer names are those of
 * CpuGpt2 (model/cpu_gpt2.h): one residual-gradient buffer for the whole stream, zeroed once per
 * backward; layernorm_backward adds into it; matmul / attention / gelu overwrite their activation
 * gradients; every parameter gradient accumulates (+=). The forward stops at lnf; the classifier
 * then runs over chunks of rows (cuda_model_plan.cu). Training, per chunk: logits =
 * lnf_chunk wte^T; fused cross-entropy (the chunk's losses, and dlogits = (softmax - onehot) *
 * loss_scale/(B*T) over the logits in place); dlnf_chunk = dlogits wte; dwte += dlogits^T
 * lnf_chunk. Evaluation: logits and losses per chunk. Each row's loss depends on its row only,
 * so the chunking changes nothing but the GEMMs' summation order (cuBLAS may pick another
 * algorithm per row count) and, in bf16, dwte's rounding: one bf16 rounding per chunk's +=
 * (matmul.cuh). The probabilities are never stored. The forward's per-layer code is one function
 * (block_forward, cuda_model_impl.cuh) over a BlockActivations of pointers, with the attention
 * step passed in; training, prefill and decode all run it. Each residual add is fused with the
 * LayerNorm that reads it (ln2 inside the block; the next block's ln1, or lnf, at its end): the
 * same bits as the add then the LayerNorm. With recompute_fc each layer's backward first runs
 * the very same fc GEMM (GELU_AUX epilogue) again, which gives the same bits.
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "model/cuda_model_impl.cuh"

namespace gpt2::cuda_model_detail {

template <typename T_>
gpu::AttentionConfig CudaModel<T_>::attention_at(int B, int T) const {
  gpu::AttentionConfig config = attention_;
  config.B = B;
  config.T = T;
  return config;
}

template <typename T_>
gpu::AttentionTensors CudaModel<T_>::attention_tensors(const gpu::AttentionConfig& config,
                                                       int l) const {
  const size_t BT = static_cast<size_t>(config.B) * config.T;
  gpu::AttentionTensors tensors;
  tensors.qkv = act(kQkv) + l * BT * 3 * config.C;
  tensors.out = act(kAtty) + l * BT * config.C;
  tensors.saved = static_cast<char*>(buffers_[kAttSaved]) + l * gpu::attention_saved_bytes(config);
  tensors.workspace = buffers_[kAttWorkspace];
  return tensors;
}

template <typename T_>
void CudaModel<T_>::upload_tokens(const int* inputs, const int* targets, int B, int T) {
  const size_t n = static_cast<size_t>(B) * T;
  const int V = config_.vocab_size;
  // An out-of-range id would index outside wte on the device: refuse it here, with its place.
  for (size_t i = 0; i < n; ++i) {
    GPT2_CHECK(inputs[i] >= 0 && inputs[i] < V, "input token ", inputs[i], " at ", i, ", V=", V);
    GPT2_CHECK(!targets || (targets[i] >= 0 && targets[i] < V), "target token ", targets[i],
               " at ", i, ", V=", V);
  }
  // The staging is free once the previous upload's copy ran (at the start of its forward).
  GPT2_CUDA_CHECK(cudaEventSynchronize(tokens_copied_));
  int* staged_inputs = pinned_tokens_;
  int* staged_targets = pinned_tokens_ + n;
  std::copy(inputs, inputs + n, staged_inputs);
  GPT2_CUDA_CHECK(cudaMemcpyAsync(buffers_[kInputs], staged_inputs, n * sizeof(int),
                                  cudaMemcpyHostToDevice, ctx_->stream()));
  if (targets) {
    std::copy(targets, targets + n, staged_targets);
    GPT2_CUDA_CHECK(cudaMemcpyAsync(buffers_[kTargets], staged_targets, n * sizeof(int),
                                    cudaMemcpyHostToDevice, ctx_->stream()));
  }
  GPT2_CUDA_CHECK(cudaEventRecord(tokens_copied_, ctx_->stream()));
  cur_B_ = B;
  cur_T_ = T;
  have_targets_ = targets != nullptr;
}

template <typename T_>
void CudaModel<T_>::forward(int B, int T) {
  forward_blocks(B, T, context_ != nullptr);  // ends with lnf, fused with the last residual add
}

template <typename T_>
void CudaModel<T_>::classifier_losses(int B, int T) {
  const int64_t BT = static_cast<int64_t>(B) * T;
  const int C = config_.channels, V = config_.vocab_size, Vp = config_.padded_vocab_size;
  T_* logits = act(kLogits);  // (rows, Vp)
  for (int64_t first = 0; first < BT; first += classifier_chunk_rows_) {
    const int rows = static_cast<int>(std::min<int64_t>(classifier_chunk_rows_, BT - first));
    // A chunk is (B, T) = (1, rows) to the ops.
    gpu::matmul_forward(logits, act(kLnf) + first * C, param(kWte),
                        static_cast<const T_*>(nullptr), 1, rows, C, Vp, *ctx_);
    gpu::crossentropy_forward(buf<float>(kLosses) + first, logits, buf<int>(kTargets) + first, 1,
                              rows, V, Vp, ctx_->stream());
  }
}

template <typename T_>
void CudaModel<T_>::classifier_forward_backward(float loss_scale) {
  const int64_t BT = static_cast<int64_t>(cur_B_) * cur_T_;
  const int C = config_.channels, V = config_.vocab_size, Vp = config_.padded_vocab_size;
  const float dloss =
      static_cast<float>(static_cast<double>(loss_scale) / double(loss_count(cur_B_, cur_T_)));
  T_* logits = act(kLogits);  // (rows, Vp): the logits, then their gradient in place
  // --fp8-classifier: the forward and dlnf in FP8 from lnf's codes and dlogits' (which the
  // cross-entropy writes); dwte in bf16, or with `all` in FP8 as well (the cross-entropy then
  // writes the codes alone, and dlogits' transposed codes go into the logits' buffer).
  Fp8Classifier* fp8 = fp8_pass_ ? fp8_classifier_.get() : nullptr;
  if constexpr (std::is_same_v<T_, bf16>) {
    if (fp8) {
      fp8->cast_input(act(kLnf), static_cast<int>(BT));
      fp8->set_gradient_bound(dloss);
    }
  }
  for (int64_t first = 0; first < BT; first += classifier_chunk_rows_) {
    const int rows = static_cast<int>(std::min<int64_t>(classifier_chunk_rows_, BT - first));
    const T_* lnf = act(kLnf) + first * C;
    T_* dlnf = act(kDLnf) + first * C;
    if constexpr (std::is_same_v<T_, bf16>) {
      if (fp8) {
        const bool fp8_dwte = fp8->weight_gradient_in_fp8(rows);
        fp8->forward(logits, first, rows);
        gpu::crossentropy_forward_backward(buf<float>(kLosses) + first, logits,
                                           buf<int>(kTargets) + first, dloss, 1, rows, V, Vp,
                                           ctx_->stream(), fp8->gradient_destination(),
                                           /*codes_only=*/fp8_dwte);
        fp8->input_gradient(dlnf, rows);
        if (fp8_dwte)
          fp8->weight_gradient(grad(kWte), reinterpret_cast<uint8_t*>(logits), first, rows);
        else
          gpu::matmul_backward(static_cast<T_*>(nullptr), grad(kWte), static_cast<T_*>(nullptr),
                               logits, lnf, param(kWte), 1, rows, C, Vp,
                               static_cast<float*>(nullptr), *ctx_);
        continue;
      }
    }
    gpu::matmul_forward(logits, lnf, param(kWte), static_cast<const T_*>(nullptr), 1, rows, C, Vp,
                        *ctx_);
    gpu::crossentropy_forward_backward(buf<float>(kLosses) + first, logits,
                                       buf<int>(kTargets) + first, dloss, 1, rows, V, Vp,
                                       ctx_->stream());
    // dlnf rows [first, first + rows) (=) and dwte (+=, accumulating over the chunks); no bias.
    gpu::matmul_backward(dlnf, grad(kWte), static_cast<T_*>(nullptr), logits, lnf, param(kWte), 1,
                         rows, C, Vp, static_cast<float*>(nullptr), *ctx_);
  }
}

template <typename T_>
void CudaModel<T_>::forward_blocks(int B, int T, bool shared) {
  const gpu::Context& ctx = *ctx_;
  const size_t BT = static_cast<size_t>(B) * T;
  const gpu::AttentionConfig attention = attention_at(B, T);
  const int L = config_.num_layers;
  // Data parallel, with a parameter gather under way: each point waits for its own buckets
  // (model/cuda_data_parallel.h's need points); otherwise nothing waits.
  const auto wait_parameters = [&](int point) {
    if (dp_) dp_->wait_parameters(point);
  };
  wait_parameters(0);
  const T_* wpe = param(kWpe);
  if (shared) {  // wpe's rows at this rank's positions
    const int64_t C = config_.channels;
    gpu::copy_rows(act(kWpeRows), wpe,
                   RowCopy{1, T, C, {T, C, 0, nullptr}, {config_.max_seq_len, C, 0,
                                                         context_->positions()}},
                   ctx.stream());
    wpe = act(kWpeRows);
  }
  gpu::encoder_forward(act(kEncoded), buf<int>(kInputs), param(kWte), wpe, B, T,
                       config_.channels, ctx.stream());
  run_layernorm(ln1_of(0, block_activations(0, BT)), nullptr, act(kEncoded), nullptr, B, T);
  const FollowingLayerNorm<T_> lnf{act(kLnf), buf<float>(kLnfMean), buf<float>(kLnfRstd),
                             param(kLnfw), param(kLnfb)};
  for (int l = 0; l < L; ++l) {
    wait_parameters(l + 1);
    const FollowingLayerNorm<T_> next =
        l + 1 < L ? ln1_of(l + 1, block_activations(l + 1, BT)) : lnf;
    const BlockActivations<T_> a = block_activations(l, BT);
    block_forward(l, a, B, T, [&] {
      const gpu::AttentionTensors tensors = attention_tensors(attention, l);
      if (shared) {
        context_->forward(a.qkv, a.atty, static_cast<float*>(tensors.saved));
      } else {
        gpu::attention_forward(attention, tensors, ctx);
      }
    }, next);
  }
}

template <typename T_>
FollowingLayerNorm<T_> CudaModel<T_>::layernorm_before(int l, int linear,
                                                       const BlockActivations<T_>& a) const {
  const LayerTensors<T_> w = layer_params(l);
  FollowingLayerNorm<T_> ln =
      linear == Fp8Linears::kQkv
          ? FollowingLayerNorm<T_>{a.ln1, a.ln1_mean, a.ln1_rstd, w.ln1w, w.ln1b}
          : FollowingLayerNorm<T_>{a.ln2, a.ln2_mean, a.ln2_rstd, w.ln2w, w.ln2b};
  if (fp8_layernorm(linear))
    ln.codes = fp8_->input_destination(l, static_cast<Fp8Linears::Linear>(linear));
  return ln;
}

template <typename T_>
bool CudaModel<T_>::fp8_layernorm(int linear) const {
  return fp8_ && fp8_pass_ && gpu::layernorm_fp8_supported(config_.channels) &&
         (linear == Fp8Linears::kQkv || !options_.recompute_fc);
}

template <typename T_>
void CudaModel<T_>::run_layernorm(const FollowingLayerNorm<T_>& ln, T_* residual_out,
                                  const T_* residual, const T_* addend, int B, int T) {
  cudaStream_t stream = ctx_->stream();
  const int C = config_.channels;
  if constexpr (std::is_same_v<T_, bf16>) {
    if (ln.codes.scale != nullptr) {
      if (addend != nullptr)
        gpu::residual_layernorm_forward_fp8(residual_out, ln.codes, ln.mean, ln.rstd, residual,
                                            addend, ln.weight, ln.bias, B, T, C, stream);
      else
        gpu::layernorm_forward_fp8(ln.codes, ln.mean, ln.rstd, residual, ln.weight, ln.bias, B,
                                   T, C, stream);
      return;
    }
  }
  if (addend != nullptr)
    gpu::residual_layernorm_forward(residual_out, ln.out, ln.mean, ln.rstd, residual, addend,
                                    ln.weight, ln.bias, B, T, C, stream);
  else
    gpu::layernorm_forward(ln.out, ln.mean, ln.rstd, residual, ln.weight, ln.bias, B, T, C,
                           stream);
}

template <typename T_>
BlockActivations<T_> CudaModel<T_>::block_activations(int l, size_t BT) const {
  const size_t Cs = config_.channels;
  BlockActivations<T_> a;
  a.residual = l == 0 ? act(kEncoded) : act(kResidual3) + (l - 1) * BT * Cs;
  // fp8 keeps the linears' inputs as FP8 codes for the backward (Fp8Linears), so one layer's
  // bf16 ln1 and GELU output will do; and ln2 too, unless --recompute fc reads it again.
  const size_t ln1_slot = fp8_ ? 0 : static_cast<size_t>(l);
  const size_t ln2_slot = fp8_ && !options_.recompute_fc ? 0 : static_cast<size_t>(l);
  a.ln1 = act(kLn1) + ln1_slot * BT * Cs;
  a.ln1_mean = buf<float>(kLn1Mean) + l * BT;
  a.ln1_rstd = buf<float>(kLn1Rstd) + l * BT;
  a.qkv = act(kQkv) + l * BT * 3 * Cs;
  a.atty = act(kAtty) + l * BT * Cs;
  a.residual2 = act(kResidual2) + l * BT * Cs;
  a.ln2 = act(kLn2) + ln2_slot * BT * Cs;
  a.ln2_mean = buf<float>(kLn2Mean) + l * BT;
  a.ln2_rstd = buf<float>(kLn2Rstd) + l * BT;
  const size_t fc_slot = options_.recompute_fc ? 0 : static_cast<size_t>(l);  // see the plan
  const size_t gelu_slot = fp8_ ? 0 : fc_slot;
  a.fch = act(kFch) + fc_slot * BT * 4 * Cs;
  a.fch_gelu = act(kFchGelu) + gelu_slot * BT * 4 * Cs;
  a.residual3 = act(kResidual3) + l * BT * Cs;
  a.proj = act(kProj);
  return a;
}

template <typename T_>
void CudaModel<T_>::linear_forward(int l, int linear, T_* out, const T_* in, const T_* weight,
                                   const T_* bias, T_* pre_gelu, int B, int T, int IC, int OC) {
  if constexpr (std::is_same_v<T_, bf16>) {
    if (fp8_ && fp8_pass_) {
      fp8_->forward(l, static_cast<Fp8Linears::Linear>(linear), out, in, bias, pre_gelu, B * T);
      return;
    }
  }
  if (pre_gelu)
    gpu::matmul_forward_gelu(out, pre_gelu, in, weight, bias, B, T, IC, OC, *ctx_);
  else
    gpu::matmul_forward(out, in, weight, bias, B, T, IC, OC, *ctx_);
}

template <typename T_>
void CudaModel<T_>::linear_backward(int l, int linear, T_* dinp, T_* dweight, T_* dbias,
                                    const T_* dout, const T_* in, const T_* weight,
                                    const T_* pre_gelu, int B, int T, int IC, int OC) {
  float* scratch = buf<float>(kMatmulScratch);
  if constexpr (std::is_same_v<T_, bf16>) {
    if (fp8_ && fp8_pass_) {
      // fcproj's dinp stays the gradient of the GELU's output; fc's cast applies gelu'.
      const auto fp8_linear = static_cast<Fp8Linears::Linear>(linear);
      const T_* gelu_input = fp8_linear == Fp8Linears::kFc
                                 ? block_activations(l, static_cast<size_t>(B) * T).fch
                                 : nullptr;
      fp8_->backward(l, fp8_linear, dinp, dweight, dbias, dout, gelu_input, B * T, scratch);
      return;
    }
  }
  if (pre_gelu)
    gpu::matmul_backward_gelu(dinp, dweight, dbias, dout, in, pre_gelu, weight, B, T, IC, OC,
                              scratch, *ctx_);
  else
    gpu::matmul_backward(dinp, dweight, dbias, dout, in, weight, B, T, IC, OC, scratch, *ctx_);
}

template <typename T_>
void CudaModel<T_>::refresh_fp8_weights() {
  if (!fp8_ || !fp8_weights_stale_) return;
  if constexpr (std::is_same_v<T_, bf16>) {
    fp8_->refresh_weights(buf<bf16>(kParams), device_layout_, fp8_amaxes_recorded_);
    if (fp8_classifier_) fp8_classifier_->refresh_weights(param(kWte));
  }
  fp8_weights_stale_ = false;
  fp8_amaxes_recorded_ = false;
}

template <typename T_>
void CudaModel<T_>::backward(float loss_scale) {
  GPT2_CHECK(have_targets_, "backward needs a forward with targets");
  const gpu::Context& ctx = *ctx_;
  cudaStream_t stream = ctx.stream();
  const int B = cur_B_, T = cur_T_;
  const int C = config_.channels, L = config_.num_layers;
  const size_t BT = static_cast<size_t>(B) * T, Cs = C;
  const gpu::AttentionConfig attention = attention_at(B, T);
  float* ln_scratch = buf<float>(kLayernormScratch);

  classifier_forward_backward(loss_scale);  // the losses, dlnf and dwte
  T_* dresidual = act(kDResidual);
  GPT2_CUDA_CHECK(cudaMemsetAsync(dresidual, 0, BT * Cs * sizeof(T_), stream));
  gpu::layernorm_backward(dresidual, grad(kLnfw), grad(kLnfb), act(kDLnf),
                          act(kResidual3) + (L - 1) * BT * Cs, param(kLnfw), buf<float>(kLnfMean),
                          buf<float>(kLnfRstd), B, T, C, ln_scratch, stream);
  if (dp_) dp_->backward_point(0);  // lnf done (model/cuda_data_parallel.h's points)

  // The layers' gradients in the buffer the classifier's chunks used (done with it by now).
  T_* dfch = act(kLogits);      // (B,T,4C)
  T_* dln2 = dfch + BT * 4 * Cs;  // (B,T,C)
  T_* datty = dln2 + BT * Cs;     // (B,T,C)
  T_* dqkv = datty + BT * Cs;     // (B,T,3C)
  T_* dln1 = dqkv + BT * 3 * Cs;  // (B,T,C)
  for (int l = L - 1; l >= 0; --l) {
    const BlockActivations<T_> a = block_activations(l, BT);
    const T_* residual = a.residual;
    const T_* ln1 = a.ln1;
    const T_* atty = a.atty;
    const T_* residual2 = a.residual2;
    const T_* ln2 = a.ln2;
    const LayerTensors<T_> w = layer_params(l);
    const LayerTensors<T_> dw = layer_grads(l);
    if (options_.recompute_fc)  // the forward's very GEMM again: the same fch and fch_gelu bits
      linear_forward(l, Fp8Linears::kFc, a.fch_gelu, ln2, w.fcw, w.fcb, a.fch, B, T, C, 4 * C);
    const T_* fch = a.fch;
    const T_* fch_gelu = a.fch_gelu;

    // dresidual holds d(residual3): the fcproj branch and the skip to residual2 both get it.
    // fcproj's backward with the GELU's folded in: dfch = gelu'(fch) * (dresidual @ W).
    linear_backward(l, Fp8Linears::kFcProj, dfch, dw.fcprojw, dw.fcprojb, dresidual, fch_gelu,
                    w.fcprojw, fch, B, T, 4 * C, C);
    linear_backward(l, Fp8Linears::kFc, dln2, dw.fcw, dw.fcb, dfch, ln2, w.fcw, nullptr, B, T, C,
                    4 * C);
    gpu::layernorm_backward(dresidual, dw.ln2w, dw.ln2b, dln2, residual2, w.ln2w,
                            buf<float>(kLn2Mean) + l * BT, buf<float>(kLn2Rstd) + l * BT, B, T, C,
                            ln_scratch, stream);
    // Now d(residual2): the attproj branch and the skip to the block input get it.
    linear_backward(l, Fp8Linears::kAttProj, datty, dw.attprojw, dw.attprojb, dresidual, atty,
                    w.attprojw, nullptr, B, T, C, C);
    gpu::AttentionTensors tensors = attention_tensors(attention, l);
    if (context_) {
      context_->backward(dqkv, datty, a.qkv, atty, static_cast<const float*>(tensors.saved));
    } else {
      tensors.dout = datty;
      tensors.dqkv = dqkv;
      gpu::attention_backward(attention, tensors, ctx);
    }
    linear_backward(l, Fp8Linears::kQkv, dln1, dw.qkvw, dw.qkvb, dqkv, ln1, w.qkvw, nullptr, B,
                    T, C, 3 * C);
    gpu::layernorm_backward(dresidual, dw.ln1w, dw.ln1b, dln1, residual, w.ln1w,
                            buf<float>(kLn1Mean) + l * BT, buf<float>(kLn1Rstd) + l * BT, B, T, C,
                            ln_scratch, stream);
    if (dp_) dp_->backward_point(L - l);  // layer l done
  }
  if (context_) {
    // wpe's gradient at this rank's rows, then added into its positions' rows.
    GPT2_CUDA_CHECK(cudaMemsetAsync(act(kDWpeRows), 0, static_cast<size_t>(T) * Cs * sizeof(T_),
                                    stream));
    gpu::encoder_backward(grad(kWte), act(kDWpeRows), dresidual, buf<int>(kInputs), B, T, C,
                          config_.padded_vocab_size, buffers_[kEncoderScratch], stream);
    RowCopy add{1, T, C, {config_.max_seq_len, C, 0, context_->positions()}, {T, C, 0, nullptr}};
    add.add = true;
    gpu::copy_rows(grad(kWpe), static_cast<const T_*>(act(kDWpeRows)), add, stream);
  } else {
    gpu::encoder_backward(grad(kWte), grad(kWpe), dresidual, buf<int>(kInputs), B, T, C,
                          config_.padded_vocab_size, buffers_[kEncoderScratch], stream);
  }
  if (dp_) dp_->backward_point(L + 1);  // wte and wpe done
}

template <typename T_>
gpu::StepScalars CudaModel<T_>::read_step_scalars(StepScalarsSlot slot) const {
  GPT2_CUDA_CHECK(cudaMemcpyAsync(pinned_scalars_, step_scalars(slot), sizeof(gpu::StepScalars),
                                  cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize();
  return *pinned_scalars_;
}

template <typename T_>
float CudaModel<T_>::evaluate(const int* inputs, const int* targets) {
  GPT2_CHECK(targets != nullptr);
  check_parameters_whole("evaluate");
  const int B = options_.batch_size, T = attention_.T;  // this rank's rows
  gen_length_ = -1;  // ends a generation session (model.h)
  upload_tokens(inputs, targets, B, T);
  forward(B, T);
  classifier_losses(B, T);
  GPT2_CUDA_CHECK(cudaMemsetAsync(step_scalars(kEvaluationScalars), 0, sizeof(gpu::StepScalars),
                                  ctx_->stream()));
  gpu::mean_loss_accumulate(step_scalars(kEvaluationScalars), buf<float>(kLosses),
                            static_cast<int64_t>(B) * T, ctx_->stream(), loss_count(B, T));
  const float loss = read_step_scalars(kEvaluationScalars).last_mean_loss;
  sample_memory();
  return loss;
}

template <typename T_>
void CudaModel<T_>::zero_grad() {
  if (buffers_[kGrads] == nullptr) return;  // inference only: no gradients to zero
  GPT2_CUDA_CHECK(cudaMemsetAsync(buffers_[kGrads], 0, plan_.items[kGrads].bytes, ctx_->stream()));
  GPT2_CUDA_CHECK(cudaMemsetAsync(step_scalars(kTrainingScalars), 0, sizeof(gpu::StepScalars),
                                  ctx_->stream()));
  if (dp_) dp_->begin_step();
  grads_reduced_ = false;
}

template <typename T_>
void CudaModel<T_>::expect_last_micro_batch() {
  check_training("expect_last_micro_batch");
  if (dp_) dp_->arm();  // a no-op without overlap
}

template <typename T_>
void CudaModel<T_>::check_parameters_whole(const char* call) const {
  if (dp_ && dp_->gather_pending())
    GPT2_FAIL(call, " after a ZeRO-1 update whose parameters are gathered during the next "
              "training forward: call synchronize_parameters() on every rank first");
}

template <typename T_>
void CudaModel<T_>::check_reduced(const char* call) const {
  if (dp_ && !grads_reduced_)
    GPT2_FAIL(call, " before reduce_gradients(): the data-parallel gradients are summed over the "
              "ranks first");
}

template <typename T_>
void CudaModel<T_>::reduce_gradients() {
  check_training("reduce_gradients");
  // The last micro-batch ended the reductions when armed; otherwise they all start here.
  if (dp_ && !dp_->reduction_finished()) dp_->finish_reduction();
  grads_reduced_ = true;
}

template <typename T_>
std::optional<Model::CommunicationTime> CudaModel<T_>::last_step_communication() const {
  if (!dp_) return std::nullopt;
  ctx_->synchronize();
  const DataParallelTiming timing = dp_->step_timing();
  return CommunicationTime{timing.collective_ms, timing.exposed_ms};
}

template <typename T_>
template <typename Use>
void CudaModel<T_>::with_update_gradients(Use&& use) const {
  if (!dp_) return use(buf<T_>(kGrads), static_cast<int64_t>(device_layout_.total()));
  const auto count = static_cast<int64_t>(dp_->reduced_count());
  if constexpr (std::is_same_v<T_, bf16>) {
    if (dp_->reduces_in_bf16()) return use(static_cast<const bf16*>(dp_->reduced()), count);
  }
  use(static_cast<const float*>(dp_->reduced()), count);
}

template <typename T_>
float CudaModel<T_>::grad_norm() {
  check_training("grad_norm");
  if (dp_) check_reduced("grad_norm");
  double squared = 0.0;
  with_update_gradients([&](const auto* grads, int64_t count) {
    squared = gpu::global_norm_squared_to_host(grads, count, buf<float>(kNormPartials),
                                               buf<double>(kNormResult), ctx_->stream());
  });
  // ZeRO-1: each rank squared its shard, added over the ranks in rank order; ZeRO-0: every rank
  // holds all of the summed gradient (the same bits everywhere).
  if (dp_ && dp_->sharded()) squared = sum_in_rank_order(dp_->comm(), squared);
  return static_cast<float>(std::sqrt(squared));
}

template <typename T_>
void CudaModel<T_>::adamw_step(const AdamWHyper& hyper, int step, float grad_scale) {
  check_training("adamw_step");
  GPT2_CHECK(step >= 1, "AdamW steps are 1-based (got ", step, ")");
  if (dp_) check_reduced("adamw_step");
  if (adamw_table_.has_amax) fp8_->zero_weight_amaxes();
  with_update_gradients([&](const auto* grads, int64_t) {
    gpu::adamw_update_segments(buf<T_>(kParams), buf<float>(kMaster), grads, buf<float>(kAdamM),
                               buf<float>(kAdamV), adamw_table_, hyper, step, grad_scale,
                               ctx_->stream());
  });
  if (dp_) dp_->parameters_updated();
  update_fp8_scales();
  ctx_->synchronize();
  sample_memory();
}

template <typename T_>
void CudaModel<T_>::update_fp8_scales(uint32_t* saturated) {
  if (!fp8_) return;
  fp8_->update_scales(saturated);
  if (fp8_classifier_) fp8_classifier_->update_scales(saturated);
  fp8_weights_stale_ = true;
  fp8_amaxes_recorded_ = adamw_table_.has_amax;  // this update raised them
}

template <typename T_>
Model::StepOutcome CudaModel<T_>::finish_step(const AdamWHyper& hyper, int step,
                                              float grad_clip, int micro_batches) {
  check_training("finish_step");
  GPT2_CHECK(step >= 1, "AdamW steps are 1-based (got ", step, ")");
  if (dp_) check_reduced("finish_step");
  cudaStream_t stream = ctx_->stream();
  gpu::StepScalars* scalars = step_scalars(kTrainingScalars);
  // The norm, the decision and the update on the device: the same arithmetic as the host path
  // (step_scalars.cuh), with one wait at the end for the values the metrics need. Data
  // parallel: the loss sum and (ZeRO-1) the norm's squares over the ranks in rank order, as
  // sum_in_rank_order adds them, then this rank's segments of the update.
  with_update_gradients([&](const auto* grads, int64_t count) {
    gpu::global_norm_squared(&scalars->norm_squared, grads, count, buf<float>(kNormPartials),
                             stream);
  });
  if (dp_) dp_->sum_step_scalars(scalars);
  gpu::clip_decision(scalars, micro_batches, grad_clip, stream);
  if (adamw_table_.has_amax) fp8_->zero_weight_amaxes();
  with_update_gradients([&](const auto* grads, int64_t) {
    gpu::adamw_update_segments(buf<T_>(kParams), buf<float>(kMaster), grads, buf<float>(kAdamM),
                               buf<float>(kAdamV), adamw_table_, hyper, step, 1.0f, stream,
                               &scalars->control);
  });
  if (dp_) dp_->parameters_updated();
  update_fp8_scales(&scalars->fp8_saturated);
  const gpu::StepScalars host = read_step_scalars(kTrainingScalars);
  sample_memory();
  StepOutcome outcome;
  outcome.loss = static_cast<float>(host.loss_sum / micro_batches);
  outcome.grad_norm = host.grad_norm;
  outcome.applied = host.control.skip == 0;
  if (fp8_) outcome.fp8_saturated = static_cast<int>(host.fp8_saturated);
  return outcome;
}

template class CudaModel<float>;
template class CudaModel<bf16>;

}  // namespace gpt2::cuda_model_detail
