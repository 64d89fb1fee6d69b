/**
 * @file cpu_gpt2.cpp
 * @brief CpuGpt2 forward/backward over kernels/cpu.
 *
 * Per-layer activations are slices of one buffer per kind: layer l of a (L,B,T,X) buffer
 * starts at l*B*T*X for the (B,T) of the current forward, so a shorter forward packs its
 * layers tighter inside the same allocation. Backward walks the layers in reverse with the
 * residual-stream gradient in one buffer (kBufDResidual): it is zeroed once, receives
 * lnf's gradient, and every block then reads it as the gradient of its output and has its
 * two LayerNorms add the block input's gradient back into it. All sizes are size_t.
 * Training, prefill and decode share forward_blocks(): the same ops, with the attention step
 * full (training), full plus the key/value cache write (prefill) or one position over the cache
 * (decode, on the (B,1) slices of the same buffers, the position embedding read from row pos).
 */
#include "model/cpu_gpt2.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "base/error.h"
#include "kernels/cpu/crossentropy.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/residual.h"

namespace gpt2 {

std::vector<CpuBufferSpec> cpu_buffer_specs(const ModelConfig& config, int B_in, int T_in,
                                            AttentionKind attention, bool training) {
  const size_t B = B_in, T = T_in, C = config.channels, L = config.num_layers;
  const size_t NH = config.num_heads, Vp = config.padded_vocab_size;
  const size_t BT = B * T;
  const bool naive = attention == AttentionKind::kNaive;
  std::vector<CpuBufferSpec> specs(kNumCpuBuffers);
  auto set = [&specs](CpuBuffer id, const char* group, const char* name, size_t elements) {
    specs[id] = {group, name, elements};
  };
  set(kBufEncoded, "activations", "encoded (B,T,C)", BT * C);
  set(kBufLn1, "activations", "ln1 (L,B,T,C)", L * BT * C);
  set(kBufLn1Mean, "activations", "ln1 mean (L,B,T)", L * BT);
  set(kBufLn1Rstd, "activations", "ln1 rstd (L,B,T)", L * BT);
  set(kBufQkv, "activations", "qkv (L,B,T,3C)", L * BT * 3 * C);
  set(kBufAtty, "attention", "attention output (L,B,T,C)", L * BT * C);
  set(kBufAttProbs, "attention", "attention probabilities (L,B,NH,T,T)",
      naive ? L * B * NH * T * T : 0);
  set(kBufAttLse, "attention", "attention log-sum-exp (L,B,NH,T)", naive ? 0 : L * B * NH * T);
  set(kBufAttproj, "activations", "attproj (L,B,T,C)", L * BT * C);
  set(kBufResidual2, "activations", "residual2 (L,B,T,C)", L * BT * C);
  set(kBufLn2, "activations", "ln2 (L,B,T,C)", L * BT * C);
  set(kBufLn2Mean, "activations", "ln2 mean (L,B,T)", L * BT);
  set(kBufLn2Rstd, "activations", "ln2 rstd (L,B,T)", L * BT);
  set(kBufFch, "activations", "fch (L,B,T,4C)", L * BT * 4 * C);
  set(kBufFchGelu, "activations", "fch_gelu (L,B,T,4C)", L * BT * 4 * C);
  set(kBufFcproj, "activations", "fcproj (L,B,T,C)", L * BT * C);
  set(kBufResidual3, "activations", "residual3 (L,B,T,C)", L * BT * C);
  set(kBufLnf, "activations", "lnf (B,T,C)", BT * C);
  set(kBufLnfMean, "activations", "lnf mean (B,T)", BT);
  set(kBufLnfRstd, "activations", "lnf rstd (B,T)", BT);
  set(kBufLogits, "activations", "logits (B,T,Vp)", BT * Vp);
  set(kBufProbs, "activations", "probs (B,T,Vp)", BT * Vp);
  set(kBufLosses, "activations", "losses (B,T)", BT);
  set(kBufDLosses, "workspace", "dlosses (B,T)", BT);
  set(kBufDLogits, "workspace", "dlogits (B,T,Vp)", BT * Vp);
  set(kBufDLnf, "workspace", "dlnf (B,T,C)", BT * C);
  set(kBufDResidual, "workspace", "dresidual (B,T,C)", BT * C);
  set(kBufDFchGelu, "workspace", "dfch_gelu (B,T,4C)", BT * 4 * C);
  set(kBufDFch, "workspace", "dfch (B,T,4C)", BT * 4 * C);
  set(kBufDLn2, "workspace", "dln2 (B,T,C)", BT * C);
  set(kBufDAtty, "workspace", "datty (B,T,C)", BT * C);
  set(kBufDQkv, "workspace", "dqkv (B,T,3C)", BT * 3 * C);
  set(kBufDLn1, "workspace", "dln1 (B,T,C)", BT * C);
  if (!training)
    for (int id = kBufDLosses; id < kNumCpuBuffers; ++id) specs[id].elements = 0;
  return specs;
}

std::vector<CpuBufferSpec> cpu_storage_specs(const ModelConfig& config, int B, int T,
                                             bool training, bool shared) {
  const size_t num_params = ParameterLayout::for_config(config).total;
  const size_t rows = static_cast<size_t>(T) * config.channels;
  std::vector<CpuBufferSpec> specs(kNumCpuStorage);
  specs[kStoreParams] = {"parameters", "parameters (fp32)", num_params};
  specs[kStoreGrads] = {"gradients", "gradients (fp32)", training ? num_params : 0};
  specs[kStoreWpeRows] = {"activations",
                          training ? "wpe at this rank's positions and its gradient (T,C) x 2"
                                   : "wpe at this rank's positions (T,C)",
                          shared ? (training ? 2 : 1) * rows : 0};
  specs[kStoreTokens] = {"workspace", "inputs and targets (2,B,T) int32",
                         2 * static_cast<size_t>(B) * T, sizeof(int)};
  return specs;
}


template <typename Real>
CpuGpt2<Real>::CpuGpt2(const ModelConfig& config, int B, int T, AttentionKind attention,
                       cpu::FlashBlocks blocks, bool training)
    : config_(config), B_(B), T_(T), attention_(attention), blocks_(blocks) {
  validate_config(config_);
  GPT2_CHECK(B >= 1 && T >= 1 && T <= config_.max_seq_len, "B=", B, " T=", T,
             " maxT=", config_.max_seq_len);
  GPT2_CHECK(blocks.block_q >= 1 && blocks.block_k >= 1);
  layout_ = ParameterLayout::for_config(config_);
  const std::vector<CpuBufferSpec> storage =
      cpu_storage_specs(config_, B, T, training, /*shared=*/false);
  allocate(params_, storage[kStoreParams].elements, storage[kStoreParams].name);
  allocate(grads_, storage[kStoreGrads].elements, storage[kStoreGrads].name);
  allocate(tokens_, storage[kStoreTokens].elements, storage[kStoreTokens].name);
  const std::vector<CpuBufferSpec> specs = cpu_buffer_specs(config_, B, T, attention, training);
  buffers_.resize(kNumCpuBuffers);
  for (int id = 0; id < kNumCpuBuffers; ++id)
    allocate(buffers_[id], specs[id].elements, specs[id].name);
}

template <typename Real>
void CpuGpt2<Real>::share_sequences(SequenceShare<Real> share) {
  GPT2_CHECK(attention_ == AttentionKind::kFlash, "context parallelism needs flash attention");
  GPT2_CHECK(static_cast<int>(share.positions.size()) == T_, share.positions.size(),
             " shared positions for T=", T_);
  GPT2_CHECK(share.seq_len <= config_.max_seq_len, "sequences of ", share.seq_len,
             " with maxT=", config_.max_seq_len);
  for (const int p : share.positions)
    GPT2_CHECK(p >= 0 && p < share.seq_len, "position ", p, " of ", share.seq_len);
  const CpuBufferSpec wpe_rows =
      cpu_storage_specs(config_, B_, T_, training(), /*shared=*/true)[kStoreWpeRows];
  allocate(wpe_rows_, wpe_rows.elements, wpe_rows.name);
  share_ = std::move(share);
}

template <typename Real>
void CpuGpt2<Real>::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), Real(0));
}

template <typename Real>
void CpuGpt2<Real>::check_tokens(const int* tokens, size_t n) const {
  // Token ids index embedding rows: an out-of-range id would read outside wte.
  const int V = config_.vocab_size;
  for (size_t i = 0; i < n; ++i)
    GPT2_CHECK(tokens[i] >= 0 && tokens[i] < V, "input token ", tokens[i], " at ", i, ", V=", V);
}

template <typename Real>
Real CpuGpt2<Real>::forward(const int* inputs, const int* targets, int B, int T) {
  GPT2_CHECK(B >= 1 && B <= B_ && T >= 1 && T <= T_, "forward on B=", B, " T=", T,
             " with buffers for B=", B_, " T=", T_);
  const size_t BT = static_cast<size_t>(B) * T;
  const int V = config_.vocab_size;
  check_tokens(inputs, BT);
  for (size_t i = 0; i < BT; ++i)
    GPT2_CHECK(!targets || (targets[i] >= 0 && targets[i] < V), "target token ", targets[i],
               " at ", i, ", V=", V);
  // Without targets, class 0 stands in so crossentropy still writes probs.
  if (targets)
    std::copy(targets, targets + BT, token_targets());
  else
    std::fill(token_targets(), token_targets() + BT, 0);
  gen_length_ = -1;  // the buffers the session's logits lived in are about to change
  GPT2_CHECK(!share_ || (B == B_ && T == T_), "a shared model's forward is over B=", B_, " T=",
             T_, " (got B=", B, " T=", T, ")");
  forward_blocks(inputs, B, T, 0, BlockMode::kFull);
  cur_B_ = B;
  cur_T_ = T;
  have_targets_ = targets != nullptr;

  const int C = config_.channels, L = config_.num_layers, Vp = config_.padded_vocab_size;
  const Real* last_residual = buf(kBufResidual3) + (L - 1) * BT * C;
  cpu::layernorm_forward(buf(kBufLnf), buf(kBufLnfMean), buf(kBufLnfRstd), last_residual,
                         param(kLnfw), param(kLnfb), B, T, C);
  cpu::matmul_forward(buf(kBufLogits), buf(kBufLnf), param(kWte), static_cast<const Real*>(nullptr),
                      B, T, C, Vp);
  cpu::crossentropy_forward(buf(kBufLosses), buf(kBufProbs), buf(kBufLogits), token_targets(),
                            B, T, V, Vp);
  if (!targets) return std::numeric_limits<Real>::quiet_NaN();
  double sum = 0.0;
  const Real* losses = buf(kBufLosses);
  for (size_t i = 0; i < BT; ++i) sum += losses[i];
  return static_cast<Real>(sum / loss_count(B, T));
}

template <typename Real>
double CpuGpt2<Real>::loss_count(int B, int T) const {
  // A shared model's rows are part of sequences of share_->seq_len: their losses over the
  // whole sequences' count, so that the group's sum is the mean.
  return static_cast<double>(B) * (share_ ? share_->seq_len : T);
}

template <typename Real>
void CpuGpt2<Real>::forward_blocks(const int* inputs, int B, int T, int pos, BlockMode mode) {
  const size_t BT = static_cast<size_t>(B) * T;
  std::copy(inputs, inputs + BT, token_inputs());
  const int C = config_.channels, L = config_.num_layers, NH = config_.num_heads;
  const size_t Cs = C;
  const size_t cache_layer = static_cast<size_t>(gen_B_) * gen_max_len_ * Cs;  // (B,NH,max,HS)

  // Rows of wpe from pos on: position pos + t for the t-th token; a shared model's rows at its
  // positions.
  const bool shared = share_ && mode == BlockMode::kFull;
  const Real* wpe = param(kWpe) + pos * Cs;
  if (shared) {
    for (size_t t = 0; t < static_cast<size_t>(T); ++t)
      std::copy(param(kWpe) + share_->positions[t] * Cs,
                param(kWpe) + (share_->positions[t] + 1) * Cs, wpe_rows_.begin() + t * Cs);
    wpe = wpe_rows_.data();
  }
  cpu::encoder_forward(buf(kBufEncoded), token_inputs(), param(kWte), wpe, B, T, C);
  for (int l = 0; l < L; ++l) {
    const LayerActivations a = layer_activations(l, B, T);
    const LayerTensors<Real> w = layer_params(l);
    cpu::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.residual, w.ln1w, w.ln1b, B, T, C);
    cpu::matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb, B, T, C, 3 * C);
    if (mode != BlockMode::kFull)
      cpu::attention_kv_cache_write(k_cache_.data() + l * cache_layer,
                                    v_cache_.data() + l * cache_layer, a.qkv, B, T, C, NH, pos,
                                    gen_max_len_);
    if (mode == BlockMode::kDecode)
      cpu::attention_decode_forward(a.atty, a.qkv, k_cache_.data() + l * cache_layer,
                                    v_cache_.data() + l * cache_layer, B, C, NH, pos + 1,
                                    gen_max_len_);
    else if (shared)
      share_->attend(a.atty, a.att_lse, a.qkv);
    else if (attention_ == AttentionKind::kNaive)
      cpu::attention_naive_forward(a.atty, a.att_probs, a.qkv, B, T, C, NH);
    else
      cpu::attention_flash_forward(a.atty, a.att_lse, a.qkv, B, T, C, NH, blocks_);
    cpu::matmul_forward(a.attproj, a.atty, w.attprojw, w.attprojb, B, T, C, C);
    cpu::residual_forward(a.residual2, a.residual, a.attproj, static_cast<int64_t>(BT * Cs));
    cpu::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2w, w.ln2b, B, T, C);
    cpu::matmul_forward(a.fch, a.ln2, w.fcw, w.fcb, B, T, C, 4 * C);
    cpu::gelu_forward(a.fch_gelu, a.fch, static_cast<int64_t>(BT * 4 * Cs));
    cpu::matmul_forward(a.fcproj, a.fch_gelu, w.fcprojw, w.fcprojb, B, T, 4 * C, C);
    cpu::residual_forward(a.residual3, a.residual2, a.fcproj, static_cast<int64_t>(BT * Cs));
  }
}

template <typename Real>
typename CpuGpt2<Real>::LayerActivations CpuGpt2<Real>::layer_activations(int l, int B, int T) {
  const size_t BT = static_cast<size_t>(B) * T, Cs = config_.channels;
  const size_t att_rows = static_cast<size_t>(B) * config_.num_heads * T;  // (B,NH,T)
  LayerActivations a;
  a.residual = l == 0 ? buf(kBufEncoded) : buf(kBufResidual3) + (l - 1) * BT * Cs;
  a.ln1 = buf(kBufLn1) + l * BT * Cs;
  a.ln1_mean = buf(kBufLn1Mean) + l * BT;
  a.ln1_rstd = buf(kBufLn1Rstd) + l * BT;
  a.qkv = buf(kBufQkv) + l * BT * 3 * Cs;
  a.atty = buf(kBufAtty) + l * BT * Cs;
  // Only one of the two attention buffers is allocated (the attention kind's).
  a.att_probs = buffers_[kBufAttProbs].empty() ? nullptr : buf(kBufAttProbs) + l * att_rows * T;
  a.att_lse = buffers_[kBufAttLse].empty() ? nullptr : buf(kBufAttLse) + l * att_rows;
  a.attproj = buf(kBufAttproj) + l * BT * Cs;
  a.residual2 = buf(kBufResidual2) + l * BT * Cs;
  a.ln2 = buf(kBufLn2) + l * BT * Cs;
  a.ln2_mean = buf(kBufLn2Mean) + l * BT;
  a.ln2_rstd = buf(kBufLn2Rstd) + l * BT;
  a.fch = buf(kBufFch) + l * BT * 4 * Cs;
  a.fch_gelu = buf(kBufFchGelu) + l * BT * 4 * Cs;
  a.fcproj = buf(kBufFcproj) + l * BT * Cs;
  a.residual3 = buf(kBufResidual3) + l * BT * Cs;
  return a;
}

template <typename Real>
void CpuGpt2<Real>::last_position_logits(int B, int T) {
  const size_t C = config_.channels, BT = static_cast<size_t>(B) * T;
  const Real* last_residual = buf(kBufResidual3) + (config_.num_layers - 1) * BT * C;
  // lnf of row (b, T-1) into row b of lnf: the rows are independent, so this equals the full
  // forward's lnf at those rows; then the classifier on the (B,1) rows only.
  for (size_t b = 0; b < static_cast<size_t>(B); ++b)
    cpu::layernorm_forward(buf(kBufLnf) + b * C, buf(kBufLnfMean) + b, buf(kBufLnfRstd) + b,
                           last_residual + (b * T + T - 1) * C, param(kLnfw), param(kLnfb), 1, 1,
                           config_.channels);
  cpu::matmul_forward(buf(kBufLogits), buf(kBufLnf), param(kWte), static_cast<const Real*>(nullptr),
                      B, 1, config_.channels, config_.padded_vocab_size);
}

template <typename Real>
void CpuGpt2<Real>::start_generation(int B, int max_len) {
  GPT2_CHECK(B >= 1 && B <= B_, "generation batch ", B, " with buffers for B=", B_);
  GPT2_CHECK(max_len >= 1 && max_len <= T_, "generation max_len ", max_len,
             " with buffers for T=", T_);
  const size_t elements = static_cast<size_t>(config_.num_layers) * B * max_len * config_.channels;
  allocate(k_cache_, elements, "key cache (L,B,NH,max_len,HS)");
  allocate(v_cache_, elements, "value cache (L,B,NH,max_len,HS)");
  gen_B_ = B;
  gen_max_len_ = max_len;
  gen_length_ = 0;
  have_targets_ = false;  // the session overwrites the activations a backward would need
}

template <typename Real>
const Real* CpuGpt2<Real>::prefill(const int* tokens, int length) {
  GPT2_CHECK(gen_length_ >= 0, "prefill without a generation session (start_generation)");
  GPT2_CHECK(length >= 1 && length <= gen_max_len_, "prefill of ", length,
             " tokens in a session of max_len ", gen_max_len_);
  check_tokens(tokens, static_cast<size_t>(gen_B_) * length);
  gen_length_ = -1;  // no valid session should this throw half way
  forward_blocks(tokens, gen_B_, length, 0, BlockMode::kPrefill);
  last_position_logits(gen_B_, length);
  gen_length_ = length;
  return buf(kBufLogits);
}

template <typename Real>
const Real* CpuGpt2<Real>::decode_step(const int* tokens) {
  GPT2_CHECK(gen_length_ >= 1, gen_length_ < 0 ? "decode_step without a generation session"
                                               : "decode_step before prefill");
  GPT2_CHECK(gen_length_ < gen_max_len_, "decode_step past max_len: the sequences hold ",
             gen_length_, " of ", gen_max_len_, " tokens");
  check_tokens(tokens, static_cast<size_t>(gen_B_));
  const int pos = gen_length_;
  gen_length_ = -1;
  forward_blocks(tokens, gen_B_, 1, pos, BlockMode::kDecode);
  last_position_logits(gen_B_, 1);
  gen_length_ = pos + 1;
  return buf(kBufLogits);
}

template <typename Real>
void CpuGpt2<Real>::backward(Real loss_scale) {
  GPT2_CHECK(training(), "backward on a model built without training (no gradients)");
  GPT2_CHECK(have_targets_, "backward needs a forward with targets");
  const int B = cur_B_, T = cur_T_;
  const size_t BT = static_cast<size_t>(B) * T;
  const int C = config_.channels, L = config_.num_layers, NH = config_.num_heads;
  const int V = config_.vocab_size, Vp = config_.padded_vocab_size;
  const size_t Cs = C;

  // d(loss_scale * mean loss) / d losses[bt]
  const Real dloss = static_cast<Real>(static_cast<double>(loss_scale) / loss_count(B, T));
  std::fill(buf(kBufDLosses), buf(kBufDLosses) + BT, dloss);
  cpu::crossentropy_backward(buf(kBufDLogits), buf(kBufDLosses), buf(kBufProbs), token_targets(),
                             B, T, V, Vp);
  cpu::matmul_backward(buf(kBufDLnf), grad(kWte), static_cast<Real*>(nullptr), buf(kBufDLogits),
                       buf(kBufLnf), param(kWte), B, T, C, Vp);
  Real* dresidual = buf(kBufDResidual);
  std::fill(dresidual, dresidual + BT * Cs, Real(0));  // layernorm_backward accumulates into it
  cpu::layernorm_backward(dresidual, grad(kLnfw), grad(kLnfb), buf(kBufDLnf),
                          buf(kBufResidual3) + (L - 1) * BT * Cs, param(kLnfw),
                          buf(kBufLnfMean), buf(kBufLnfRstd), B, T, C);

  Real* dfch_gelu = buf(kBufDFchGelu);
  Real* dfch = buf(kBufDFch);
  Real* dln2 = buf(kBufDLn2);
  Real* datty = buf(kBufDAtty);
  Real* dqkv = buf(kBufDQkv);
  Real* dln1 = buf(kBufDLn1);
  for (int l = L - 1; l >= 0; --l) {
    const LayerActivations a = layer_activations(l, B, T);
    const LayerTensors<Real> w = layer_params(l);
    const LayerTensors<Real> dw = layer_grads(l);
    // dresidual holds d(residual3): both the fcproj branch and the skip to residual2 get it.
    cpu::matmul_backward(dfch_gelu, dw.fcprojw, dw.fcprojb, dresidual, a.fch_gelu, w.fcprojw, B,
                         T, 4 * C, C);
    cpu::gelu_backward(dfch, a.fch, dfch_gelu, static_cast<int64_t>(BT * 4 * Cs));
    cpu::matmul_backward(dln2, dw.fcw, dw.fcb, dfch, a.ln2, w.fcw, B, T, C, 4 * C);
    cpu::layernorm_backward(dresidual, dw.ln2w, dw.ln2b, dln2, a.residual2, w.ln2w, a.ln2_mean,
                            a.ln2_rstd, B, T, C);
    // Now d(residual2): the attproj branch and the skip to the block input get it.
    cpu::matmul_backward(datty, dw.attprojw, dw.attprojb, dresidual, a.atty, w.attprojw, B, T, C,
                         C);
    if (share_)
      share_->attend_backward(dqkv, datty, a.qkv, a.atty, a.att_lse);
    else if (attention_ == AttentionKind::kNaive)
      cpu::attention_naive_backward(dqkv, datty, a.qkv, a.att_probs, B, T, C, NH);
    else
      cpu::attention_flash_backward(dqkv, datty, a.qkv, a.atty, a.att_lse, B, T, C, NH, blocks_);
    cpu::matmul_backward(dln1, dw.qkvw, dw.qkvb, dqkv, a.ln1, w.qkvw, B, T, C, 3 * C);
    cpu::layernorm_backward(dresidual, dw.ln1w, dw.ln1b, dln1, a.residual, w.ln1w, a.ln1_mean,
                            a.ln1_rstd, B, T, C);
  }
  if (!share_) {
    cpu::encoder_backward(grad(kWte), grad(kWpe), dresidual, token_inputs(), B, T, C);
    return;
  }
  // wpe's gradient at the shared positions: into rows of its own, then added at theirs.
  Real* dwpe_rows = wpe_rows_.data() + static_cast<size_t>(T) * Cs;  // after wpe's rows
  std::fill(dwpe_rows, dwpe_rows + static_cast<size_t>(T) * Cs, Real(0));
  cpu::encoder_backward(grad(kWte), dwpe_rows, dresidual, token_inputs(), B, T, C);
  for (size_t t = 0; t < static_cast<size_t>(T); ++t) {
    Real* dwpe = grad(kWpe) + share_->positions[t] * Cs;
    for (size_t c = 0; c < Cs; ++c) dwpe[c] += dwpe_rows[t * Cs + c];
  }
}

template class CpuGpt2<float>;
template class CpuGpt2<double>;

}  // namespace gpt2
