/**
 * @file cpu_model.cpp
 * @brief CpuGpt2 forward/backward over kernels/cpu, and the CpuModel backend.
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
#include "model/cpu_model.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>

#include "base/bf16.h"
#include "base/error.h"
#include "base/file_io.h"
#include "kernels/cpu/crossentropy.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/global_norm.h"
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

namespace {

// std::vector allocation that reports which buffer did not fit instead of std::bad_alloc.
template <typename T>
void allocate(std::vector<T>& buffer, size_t elements, const std::string& name) {
  try {
    buffer.assign(elements, T(0));
  } catch (const std::bad_alloc&) {
    GPT2_FAIL("out of CPU memory allocating ", name, " (", elements * sizeof(T), " bytes, ",
              format_bytes(elements * sizeof(T)), ")");
  }
}

}  // namespace

template <typename Real>
CpuGpt2<Real>::CpuGpt2(const ModelConfig& config, int B, int T, AttentionKind attention,
                       cpu::FlashBlocks blocks, bool training)
    : config_(config), B_(B), T_(T), attention_(attention), blocks_(blocks) {
  validate_config(config_);
  GPT2_CHECK(B >= 1 && T >= 1 && T <= config_.max_seq_len, "B=", B, " T=", T,
             " maxT=", config_.max_seq_len);
  GPT2_CHECK(blocks.block_q >= 1 && blocks.block_k >= 1);
  layout_ = ParameterLayout::for_config(config_);
  allocate(params_, layout_.total, "parameters");
  if (training) allocate(grads_, layout_.total, "gradients");
  const std::vector<CpuBufferSpec> specs = cpu_buffer_specs(config_, B, T, attention, training);
  buffers_.resize(kNumCpuBuffers);
  for (int id = 0; id < kNumCpuBuffers; ++id) allocate(buffers_[id], specs[id].elements, specs[id].name);
  const size_t BT = static_cast<size_t>(B) * T;
  allocate(inputs_, BT, "inputs (B,T)");
  allocate(targets_, BT, "targets (B,T)");
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
  const size_t rows = static_cast<size_t>(T_) * config_.channels;
  allocate(wpe_rows_, rows, "wpe at the shared positions (T,C)");
  if (training()) allocate(dwpe_rows_, rows, "their gradient (T,C)");
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
    std::copy(targets, targets + BT, targets_.begin());
  else
    std::fill(targets_.begin(), targets_.begin() + BT, 0);
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
  cpu::crossentropy_forward(buf(kBufLosses), buf(kBufProbs), buf(kBufLogits), targets_.data(), B,
                            T, V, Vp);
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
  std::copy(inputs, inputs + BT, inputs_.begin());
  const int C = config_.channels, L = config_.num_layers, NH = config_.num_heads;
  const size_t Cs = C, att_rows = static_cast<size_t>(B) * NH * T;
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
  cpu::encoder_forward(buf(kBufEncoded), inputs_.data(), param(kWte), wpe, B, T, C);
  for (int l = 0; l < L; ++l) {
    const Real* residual = l == 0 ? buf(kBufEncoded) : buf(kBufResidual3) + (l - 1) * BT * Cs;
    Real* ln1 = buf(kBufLn1) + l * BT * Cs;
    Real* ln1_mean = buf(kBufLn1Mean) + l * BT;
    Real* ln1_rstd = buf(kBufLn1Rstd) + l * BT;
    Real* qkv = buf(kBufQkv) + l * BT * 3 * Cs;
    Real* atty = buf(kBufAtty) + l * BT * Cs;
    Real* attproj = buf(kBufAttproj) + l * BT * Cs;
    Real* residual2 = buf(kBufResidual2) + l * BT * Cs;
    Real* ln2 = buf(kBufLn2) + l * BT * Cs;
    Real* ln2_mean = buf(kBufLn2Mean) + l * BT;
    Real* ln2_rstd = buf(kBufLn2Rstd) + l * BT;
    Real* fch = buf(kBufFch) + l * BT * 4 * Cs;
    Real* fch_gelu = buf(kBufFchGelu) + l * BT * 4 * Cs;
    Real* fcproj = buf(kBufFcproj) + l * BT * Cs;
    Real* residual3 = buf(kBufResidual3) + l * BT * Cs;

    cpu::layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, param(kLn1w) + l * Cs,
                           param(kLn1b) + l * Cs, B, T, C);
    cpu::matmul_forward(qkv, ln1, param(kQkvw) + l * 3 * Cs * Cs, param(kQkvb) + l * 3 * Cs, B,
                        T, C, 3 * C);
    if (mode != BlockMode::kFull)
      cpu::attention_kv_cache_write(k_cache_.data() + l * cache_layer,
                                    v_cache_.data() + l * cache_layer, qkv, B, T, C, NH, pos,
                                    gen_max_len_);
    if (mode == BlockMode::kDecode)
      cpu::attention_decode_forward(atty, qkv, k_cache_.data() + l * cache_layer,
                                    v_cache_.data() + l * cache_layer, B, C, NH, pos + 1,
                                    gen_max_len_);
    else if (shared)
      share_->attend(atty, buf(kBufAttLse) + l * att_rows, qkv);
    else if (attention_ == AttentionKind::kNaive)
      cpu::attention_naive_forward(atty, buf(kBufAttProbs) + l * att_rows * T, qkv, B, T, C, NH);
    else
      cpu::attention_flash_forward(atty, buf(kBufAttLse) + l * att_rows, qkv, B, T, C, NH,
                                   blocks_);
    cpu::matmul_forward(attproj, atty, param(kAttprojw) + l * Cs * Cs, param(kAttprojb) + l * Cs,
                        B, T, C, C);
    cpu::residual_forward(residual2, residual, attproj, static_cast<int64_t>(BT * Cs));
    cpu::layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, param(kLn2w) + l * Cs,
                           param(kLn2b) + l * Cs, B, T, C);
    cpu::matmul_forward(fch, ln2, param(kFcw) + l * 4 * Cs * Cs, param(kFcb) + l * 4 * Cs, B, T,
                        C, 4 * C);
    cpu::gelu_forward(fch_gelu, fch, static_cast<int64_t>(BT * 4 * Cs));
    cpu::matmul_forward(fcproj, fch_gelu, param(kFcprojw) + l * Cs * 4 * Cs,
                        param(kFcprojb) + l * Cs, B, T, 4 * C, C);
    cpu::residual_forward(residual3, residual2, fcproj, static_cast<int64_t>(BT * Cs));
  }
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
  const size_t Cs = C, att_rows = static_cast<size_t>(B) * NH * T;

  // d(loss_scale * mean loss) / d losses[bt]
  const Real dloss = static_cast<Real>(static_cast<double>(loss_scale) / loss_count(B, T));
  std::fill(buf(kBufDLosses), buf(kBufDLosses) + BT, dloss);
  cpu::crossentropy_backward(buf(kBufDLogits), buf(kBufDLosses), buf(kBufProbs), targets_.data(),
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
    const Real* residual = l == 0 ? buf(kBufEncoded) : buf(kBufResidual3) + (l - 1) * BT * Cs;
    const Real* ln1 = buf(kBufLn1) + l * BT * Cs;
    const Real* qkv = buf(kBufQkv) + l * BT * 3 * Cs;
    const Real* atty = buf(kBufAtty) + l * BT * Cs;
    const Real* residual2 = buf(kBufResidual2) + l * BT * Cs;
    const Real* ln2 = buf(kBufLn2) + l * BT * Cs;
    const Real* fch = buf(kBufFch) + l * BT * 4 * Cs;
    const Real* fch_gelu = buf(kBufFchGelu) + l * BT * 4 * Cs;

    // dresidual holds d(residual3): both the fcproj branch and the skip to residual2 get it.
    cpu::matmul_backward(dfch_gelu, grad(kFcprojw) + l * Cs * 4 * Cs, grad(kFcprojb) + l * Cs,
                         dresidual, fch_gelu, param(kFcprojw) + l * Cs * 4 * Cs, B, T, 4 * C, C);
    cpu::gelu_backward(dfch, fch, dfch_gelu, static_cast<int64_t>(BT * 4 * Cs));
    cpu::matmul_backward(dln2, grad(kFcw) + l * 4 * Cs * Cs, grad(kFcb) + l * 4 * Cs, dfch, ln2,
                         param(kFcw) + l * 4 * Cs * Cs, B, T, C, 4 * C);
    cpu::layernorm_backward(dresidual, grad(kLn2w) + l * Cs, grad(kLn2b) + l * Cs, dln2,
                            residual2, param(kLn2w) + l * Cs, buf(kBufLn2Mean) + l * BT,
                            buf(kBufLn2Rstd) + l * BT, B, T, C);
    // Now d(residual2): the attproj branch and the skip to the block input get it.
    cpu::matmul_backward(datty, grad(kAttprojw) + l * Cs * Cs, grad(kAttprojb) + l * Cs,
                         dresidual, atty, param(kAttprojw) + l * Cs * Cs, B, T, C, C);
    if (share_)
      share_->attend_backward(dqkv, datty, qkv, atty, buf(kBufAttLse) + l * att_rows);
    else if (attention_ == AttentionKind::kNaive)
      cpu::attention_naive_backward(dqkv, datty, qkv, buf(kBufAttProbs) + l * att_rows * T, B, T,
                                    C, NH);
    else
      cpu::attention_flash_backward(dqkv, datty, qkv, atty, buf(kBufAttLse) + l * att_rows, B, T,
                                    C, NH, blocks_);
    cpu::matmul_backward(dln1, grad(kQkvw) + l * 3 * Cs * Cs, grad(kQkvb) + l * 3 * Cs, dqkv, ln1,
                         param(kQkvw) + l * 3 * Cs * Cs, B, T, C, 3 * C);
    cpu::layernorm_backward(dresidual, grad(kLn1w) + l * Cs, grad(kLn1b) + l * Cs, dln1, residual,
                            param(kLn1w) + l * Cs, buf(kBufLn1Mean) + l * BT,
                            buf(kBufLn1Rstd) + l * BT, B, T, C);
  }
  if (!share_) {
    cpu::encoder_backward(grad(kWte), grad(kWpe), dresidual, inputs_.data(), B, T, C);
    return;
  }
  // wpe's gradient at the shared positions: into rows of its own, then added at theirs.
  std::fill(dwpe_rows_.begin(), dwpe_rows_.end(), Real(0));
  cpu::encoder_backward(grad(kWte), dwpe_rows_.data(), dresidual, inputs_.data(), B, T, C);
  for (size_t t = 0; t < static_cast<size_t>(T); ++t) {
    Real* dwpe = grad(kWpe) + share_->positions[t] * Cs;
    for (size_t c = 0; c < Cs; ++c) dwpe[c] += dwpe_rows_[t * Cs + c];
  }
}

template class CpuGpt2<float>;
template class CpuGpt2<double>;

// ----------------------------------------------------------------------------------------------
// CpuModel

MemoryPlan plan_cpu_model_memory(const ModelOptions& options) {
  const ModelConfig& config = options.config;
  validate_config(config);
  if (options.batch_size < 1) GPT2_USAGE_FAIL("batch size must be >= 1 (got ", options.batch_size, ")");
  if (options.seq_len < 1 || options.seq_len > config.max_seq_len)
    GPT2_USAGE_FAIL("sequence length must be in [1, maxT=", config.max_seq_len, "] (got ",
                    options.seq_len, ")");
  if (options.precision != Precision::kFp32)
    GPT2_USAGE_FAIL("precision ", to_string(options.precision),
                    " is not available on the CPU backend (it computes in fp32)");
  if (options.zero_stage != 0 && options.zero_stage != 1)
    GPT2_USAGE_FAIL("ZeRO stage must be 0 or 1 (got ", options.zero_stage, ")");
  if (options.comm != nullptr && options.comm->memory_space() != MemorySpace::kHost)
    GPT2_FAIL("the CPU model needs a host communicator, not ", options.comm->backend());
  const bool context_parallel = options.context_size() > 1;
  if (context_parallel && options.attention != AttentionKind::kFlash)
    GPT2_USAGE_FAIL("context parallelism needs --attn flash: naive attention exists to "
                    "materialize each sequence's whole T x T scores, which no rank holds");
  const size_t num_params = ParameterLayout::for_config(config).total;
  const size_t param_bytes = num_params * sizeof(float);
  MemoryPlan plan;
  plan.add("parameters", "parameters (fp32)", param_bytes);
  const int world = options.world_size();
  if (options.training) {
    plan.add("gradients", "gradients (fp32)", param_bytes);
    if (world > 1 && options.zero_stage == 1) {
      const ShardPlan shards = gradient_bucket_plan(config, DeviceKind::kCpu,
                                                    options.bucket_elements, world,
                                                    options.comm->rank());
      const size_t shard_bytes = shards.local_elements() * sizeof(float);
      const std::string shard = str_cat("ZeRO-1 shard, ", shards.local_elements(), " of ",
                                        num_params, ")");
      plan.add("optimizer", "AdamW m (fp32, " + shard, shard_bytes);
      plan.add("optimizer", "AdamW v (fp32, " + shard, shard_bytes);
    } else {
      plan.add("optimizer", "AdamW m (fp32)", param_bytes);
      plan.add("optimizer", "AdamW v (fp32)", param_bytes);
    }
    if (world > 1) {
      const ShardPlan shards = gradient_bucket_plan(config, DeviceKind::kCpu,
                                                    options.bucket_elements, world,
                                                    options.comm->rank());
      const GradientBucket& last = shards.buckets().back();
      if (last.size > last.valid)
        plan.add("workspace", "data-parallel staging of the padded last bucket",
                 last.size * sizeof(float));
      if (options.grad_reduce == GradReduce::kBf16)
        plan.add("workspace", "data-parallel bucket in bf16 (--grad-reduce bf16)",
                 shards.max_bucket_size() * sizeof(uint16_t));
    }
  }
  const int T = options.local_seq_len();
  for (const CpuBufferSpec& spec : cpu_buffer_specs(config, options.batch_size, T,
                                                    options.attention, options.training))
    if (spec.elements > 0) plan.add(spec.group, spec.name, spec.elements * sizeof(float));
  if (context_parallel) {
    const ContextShard shard =
        context_shard(options.seq_len, options.context_size(), options.context_comm->rank());
    plan.add("attention", str_cat("context parallel: the group's keys and values, sent, "
                                  "received and whole (", shard.size, " ranks of up to ",
                                  shard.max_local, " of ", shard.seq_len, " positions)"),
             CpuContextAttention::buffer_elements(shard, options.batch_size,
                                                  config.channels) * sizeof(float));
    plan.add("activations", "wpe at this rank's positions and its gradient (T,C) x 2",
             2 * static_cast<size_t>(T) * config.channels * sizeof(float));
  }
  const size_t tokens = static_cast<size_t>(options.batch_size) * T;
  plan.add("workspace", "inputs and targets (2,B,T) int32", 2 * tokens * sizeof(int));
  return plan;
}

void check_memory_fits(const MemoryPlan& plan, size_t available_bytes, const char* source) {
  if (available_bytes == 0 || plan.total() <= available_bytes) return;
  const MemoryItem* largest = nullptr;
  for (const MemoryItem& item : plan.items)
    if (!largest || item.bytes > largest->bytes) largest = &item;
  GPT2_FAIL("not enough CPU memory: the model needs ", plan.total(), " bytes (",
            format_bytes(plan.total()), ") in total but only ", available_bytes, " bytes (",
            format_bytes(available_bytes), ") are free (", source, "); the largest buffer, ",
            largest->name, ", needs ", largest->bytes, " bytes (", format_bytes(largest->bytes),
            ")");
}

size_t available_host_memory_bytes() {
  std::string meminfo;
  try {
    meminfo = read_file_text("/proc/meminfo");
  } catch (const Error&) {
    return 0;
  }
  std::istringstream lines(meminfo);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    unsigned long long kib = 0;
    if (fields >> kib) return static_cast<size_t>(kib) * 1024;
  }
  return 0;
}

CpuModel::CpuModel(const ModelOptions& options)
    : options_(options), plan_(plan_cpu_model_memory(options)) {
  check_memory_fits(plan_, available_host_memory_bytes(), "MemAvailable in /proc/meminfo");
  gpt2_ = std::make_unique<CpuGpt2<float>>(options.config, options.batch_size,
                                           options.local_seq_len(), options.attention,
                                           cpu::FlashBlocks{}, options.training);
  if (options.context_size() > 1) {
    const ModelConfig& config = options.config;
    context_ = std::make_unique<CpuContextAttention>(
        *options.context_comm,
        context_shard(options.seq_len, options.context_size(), options.context_comm->rank()),
        options.batch_size, config.channels, config.num_heads);
    SequenceShare<float> share;
    share.positions = context_->shard().positions;
    share.seq_len = options.seq_len;
    share.attend = [this](float* out, float* lse, const float* qkv) {
      context_->forward(out, lse, qkv);
    };
    share.attend_backward = [this](float* dqkv, const float* dout, const float* qkv,
                                   const float* out, const float* lse) {
      context_->backward(dqkv, dout, qkv, out, lse);
    };
    gpt2_->share_sequences(std::move(share));
  }
  if (options.training) {
    const int world = options.world_size();
    comm_ = options.comm;
    shards_ = gradient_bucket_plan(options.config, DeviceKind::kCpu, options.bucket_elements,
                                   world, comm_ != nullptr ? comm_->rank() : 0);
    const size_t moments = sharded() ? shards_.local_elements() : gpt2_->num_parameters();
    allocate(adam_m_, moments, "AdamW m");
    allocate(adam_v_, moments, "AdamW v");
    const GradientBucket& last = shards_.buckets().back();
    if (data_parallel() && last.size > last.valid)
      allocate(staging_, last.size, "data-parallel staging of the padded last bucket");
    if (data_parallel() && options.grad_reduce == GradReduce::kBf16)
      allocate(bf16_bucket_, shards_.max_bucket_size(), "data-parallel bucket in bf16");
  }
}

void CpuModel::check_reduced(const char* call) const {
  if (data_parallel() && !grads_reduced_)
    GPT2_FAIL(call, " before reduce_gradients(): with ", comm_->world_size(),
              " ranks the gradients are summed over the ranks first");
}

void CpuModel::check_training(const char* call) const {
  if (!options_.training)
    GPT2_FAIL(call, " on an inference-only model (built with training off: no gradients or "
              "optimizer state)");
}

std::string CpuModel::device_name() const {
  return str_cat("CPU (", omp_get_max_threads(), " threads)");
}

void CpuModel::set_parameters(const float* params) {
  std::copy(params, params + gpt2_->num_parameters(), gpt2_->params());
}

void CpuModel::get_parameters(float* params) const {
  const CpuGpt2<float>& model = *gpt2_;
  std::copy(model.params(), model.params() + model.num_parameters(), params);
}

void CpuModel::zero_grad() {
  gpt2_->zero_grad();
  grads_reduced_ = false;
}

float CpuModel::forward_backward(const int* inputs, const int* targets, float loss_scale) {
  check_training("forward_backward");
  GPT2_CHECK(targets != nullptr);
  grads_reduced_ = false;
  const float loss = gpt2_->forward(inputs, targets);
  gpt2_->backward(loss_scale);
  return loss;
}

float CpuModel::evaluate(const int* inputs, const int* targets) {
  GPT2_CHECK(targets != nullptr);
  return gpt2_->forward(inputs, targets);
}

void CpuModel::start_generation(int batch, int max_len) {
  gpt2_->start_generation(batch, max_len);
}

namespace {
// (B,Vp) rows -> (B,V): the padding columns dropped.
void copy_logits(float* out, const float* logits, int B, int V, int Vp) {
  for (size_t b = 0; b < static_cast<size_t>(B); ++b)
    std::copy(logits + b * Vp, logits + b * Vp + V, out + b * V);
}
}  // namespace

void CpuModel::prefill(const int* prompts, int length, float* logits) {
  const float* rows = gpt2_->prefill(prompts, length);
  copy_logits(logits, rows, gpt2_->generation_batch_size(), options_.config.vocab_size,
              options_.config.padded_vocab_size);
}

void CpuModel::decode_step(const int* next_tokens, float* logits) {
  const float* rows = gpt2_->decode_step(next_tokens);
  copy_logits(logits, rows, gpt2_->generation_batch_size(), options_.config.vocab_size,
              options_.config.padded_vocab_size);
}

int CpuModel::generation_length() const { return gpt2_->generation_length(); }

void CpuModel::bf16_bucket_sum(BucketOp op, size_t k, float* flat) const {
  const GradientBucket& bucket = shards_.buckets()[k];
  const size_t own = static_cast<size_t>(comm_->rank()) * bucket.shard;
  float* data = flat + bucket.begin;
  uint16_t* bits = bf16_bucket_.data();
  for (size_t i = 0; i < bucket.size; ++i)
    bits[i] = i < bucket.valid ? float_to_bf16_bits(data[i]) : 0;  // zero in the padded tail
  size_t first = 0, count = bucket.valid;  // the widened range of the bucket
  if (op == BucketOp::kAllReduce) {
    comm_->all_reduce_sum_bf16(bits, bucket.size);
  } else {
    comm_->reduce_scatter_sum_bf16(bits, bits + own, bucket.shard);
    first = own;
    count = own < bucket.valid ? std::min(bucket.shard, bucket.valid - own) : 0;
  }
  for (size_t i = first; i < first + count; ++i) data[i] = bf16_bits_to_float(bits[i]);
}

void CpuModel::bucket_collective(BucketOp op, size_t k, float* flat) const {
  if (op != BucketOp::kAllGather && options_.grad_reduce == GradReduce::kBf16)
    return bf16_bucket_sum(op, k, flat);
  const GradientBucket& bucket = shards_.buckets()[k];
  const size_t own = static_cast<size_t>(comm_->rank()) * bucket.shard;
  // The last bucket runs past N: it goes through staging_, zero past the valid elements.
  const bool staged = bucket.size > bucket.valid;
  float* data = flat + bucket.begin;
  if (staged) {
    std::copy(data, data + bucket.valid, staging_.begin());
    std::fill(staging_.begin() + static_cast<std::ptrdiff_t>(bucket.valid), staging_.end(), 0.0f);
    data = staging_.data();
  }
  switch (op) {
    case BucketOp::kAllReduce: comm_->all_reduce(data, bucket.size, ReduceOp::kSum); break;
    case BucketOp::kReduceScatter: comm_->reduce_scatter_sum(data, data + own, bucket.shard); break;
    case BucketOp::kAllGather: comm_->all_gather(data + own, data, bucket.shard); break;
  }
  if (!staged) return;
  if (op == BucketOp::kReduceScatter) {
    // Only this rank's block holds the sum; the rest of the bucket is unspecified anyway.
    if (own < bucket.valid) {
      const size_t count = std::min(bucket.shard, bucket.valid - own);
      std::copy(data + own, data + own + count, flat + bucket.begin + own);
    }
  } else {
    std::copy(data, data + bucket.valid, flat + bucket.begin);
  }
}

void CpuModel::gather_shards(const float* local, float* full) const {
  for (size_t k = 0; k < shards_.buckets().size(); ++k) {
    const GradientBucket& bucket = shards_.buckets()[k];
    if (bucket.size == bucket.valid) {
      comm_->all_gather(local + bucket.local_begin, full + bucket.begin, bucket.shard);
    } else {
      comm_->all_gather(local + bucket.local_begin, staging_.data(), bucket.shard);
      std::copy(staging_.begin(), staging_.begin() + static_cast<std::ptrdiff_t>(bucket.valid),
                full + bucket.begin);
    }
  }
}

void CpuModel::reduce_gradients() {
  check_training("reduce_gradients");
  if (data_parallel()) {
    const BucketOp op = sharded() ? BucketOp::kReduceScatter : BucketOp::kAllReduce;
    for (size_t k = 0; k < shards_.buckets().size(); ++k) bucket_collective(op, k, gpt2_->grads());
  }
  grads_reduced_ = true;
}

float CpuModel::grad_norm() {
  check_training("grad_norm");
  if (!data_parallel()) {
    return static_cast<float>(std::sqrt(cpu::global_norm_squared(
        gpt2_->grads(), static_cast<int64_t>(gpt2_->num_parameters()))));
  }
  check_reduced("grad_norm");
  double local = 0.0;
  for (size_t k = 0; k < shards_.buckets().size(); ++k) {
    const ShardRange range = shards_.local_range(k);
    if (range.count > 0)
      local += cpu::global_norm_squared(gpt2_->grads() + range.begin,
                                        static_cast<int64_t>(range.count));
  }
  return static_cast<float>(std::sqrt(sum_in_rank_order(*comm_, local)));
}

void CpuModel::adamw_range(size_t begin, size_t count, float* m, float* v,
                           const cpu::AdamWHyper& hyper, int step, float grad_scale) {
  const ParameterLayout& layout = gpt2_->layout();
  const size_t end = begin + count;
  for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
    const size_t lo = std::max(begin, layout.offsets[tensor]);
    const size_t hi = std::min(end, layout.offsets[tensor] + layout.sizes[tensor]);
    if (lo >= hi) continue;
    cpu::AdamWHyper tensor_hyper = hyper;
    if (!ParameterLayout::decays(tensor)) tensor_hyper.weight_decay = 0.0f;
    cpu::adamw_update(gpt2_->params() + lo, gpt2_->grads() + lo, m + (lo - begin),
                      v + (lo - begin), static_cast<int64_t>(hi - lo), tensor_hyper, step,
                      grad_scale);
  }
}

void CpuModel::adamw_step(const cpu::AdamWHyper& hyper, int step, float grad_scale) {
  check_training("adamw_step");
  GPT2_CHECK(step >= 1, "AdamW steps are 1-based (got ", step, ")");
  check_reduced("adamw_step");
  if (!sharded()) {
    adamw_range(0, gpt2_->num_parameters(), adam_m_.data(), adam_v_.data(), hyper, step,
                grad_scale);
    return;
  }
  for (size_t k = 0; k < shards_.buckets().size(); ++k) {
    const ShardRange range = shards_.local_range(k);
    if (range.count > 0)
      adamw_range(range.begin, range.count, adam_m_.data() + range.local,
                  adam_v_.data() + range.local, hyper, step, grad_scale);
  }
  for (size_t k = 0; k < shards_.buckets().size(); ++k)
    bucket_collective(BucketOp::kAllGather, k, gpt2_->params());
}

void CpuModel::get_optimizer_state(float* m, float* v) const {
  check_training("get_optimizer_state");
  if (sharded()) {
    gather_shards(adam_m_.data(), m);
    gather_shards(adam_v_.data(), v);
    return;
  }
  std::copy(adam_m_.begin(), adam_m_.end(), m);
  std::copy(adam_v_.begin(), adam_v_.end(), v);
}

void CpuModel::set_optimizer_state(const float* m, const float* v) {
  check_training("set_optimizer_state");
  if (sharded()) {
    for (size_t k = 0; k < shards_.buckets().size(); ++k) {
      const ShardRange range = shards_.local_range(k);
      std::copy(m + range.begin, m + range.begin + range.count, adam_m_.begin() + range.local);
      std::copy(v + range.begin, v + range.begin + range.count, adam_v_.begin() + range.local);
    }
    return;
  }
  std::copy(m, m + adam_m_.size(), adam_m_.begin());
  std::copy(v, v + adam_v_.size(), adam_v_.begin());
}

size_t CpuModel::peak_memory_bytes() const {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::unique_ptr<Model> make_cpu_model(const ModelOptions& options) {
  return std::make_unique<CpuModel>(options);
}

}  // namespace gpt2
