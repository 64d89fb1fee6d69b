/**
 * @file cpu_gpt2.h
 * @brief CpuGpt2<Real>: the templated reference GPT-2 (float / double), the tests' oracle and
 *        the engine of the CPU backend (model/cpu_model.h).
 *
 * llm.c's structure over kernels/cpu: encoder -> L x [ln1, qkv, attention, attproj, residual,
 * ln2, fc, gelu, fcproj, residual] -> lnf -> classifier with the tied wte ((B,T,Vp) logits) ->
 * crossentropy. Attention is naive (keeps probs (B,NH,T,T) per layer) or flash (keeps out + lse
 * per layer), chosen at construction. Backward shares one residual-gradient buffer across the
 * stream: layernorm_backward adds into it (+=), matmul / attention / gelu overwrite (=) their
 * activation gradients, parameter gradients accumulate (+=).
 * Buffers are sized for (B,T) at construction; a forward may use a smaller B and T (a prefix),
 * and backward uses the shapes of the last forward. Parameters and gradients start at zero.
 * Generation (model.h's contract) keeps per-layer key and value caches (L,B,NH,max_len,HS),
 * allocated by start_generation: prefill is the forward above over the prompt (any attention
 * kind), with each layer's keys and values copied into the caches and only the last position
 * through lnf and the classifier; a decode step runs one position per sequence through the
 * same ops on the (B,1) slices of the buffers, with attention_decode_forward over the cache.
 * Context parallelism (SequenceShare): the rows are some positions of longer sequences, and
 * attention reaches the other ranks' rows through the share.
 */
#pragma once

#include <cstddef>
#include <functional>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/attention.h"
#include "model/config.h"
#include "model/model.h"
#include "model/parameters.h"

namespace gpt2 {

/// std::vector allocation that reports which buffer did not fit instead of std::bad_alloc.
template <typename T>
void allocate(std::vector<T>& buffer, size_t elements, const std::string& name) {
  try {
    buffer.assign(elements, T(0));
  } catch (const std::bad_alloc&) {
    GPT2_FAIL("out of CPU memory allocating ", name, " (", elements * sizeof(T), " bytes, ",
              format_bytes(elements * sizeof(T)), ")");
  }
}

/// Buffers of CpuGpt2 other than parameters and gradients, in allocation order.
enum CpuBuffer : int {
  // forward activations, per layer where the name says L
  kBufEncoded, kBufLn1, kBufLn1Mean, kBufLn1Rstd, kBufQkv, kBufAtty, kBufAttProbs, kBufAttLse,
  kBufAttproj, kBufResidual2, kBufLn2, kBufLn2Mean, kBufLn2Rstd, kBufFch, kBufFchGelu,
  kBufFcproj, kBufResidual3, kBufLnf, kBufLnfMean, kBufLnfRstd, kBufLogits, kBufProbs,
  kBufLosses,
  // backward workspace, reused by every layer
  kBufDLosses, kBufDLogits, kBufDLnf, kBufDResidual, kBufDFchGelu, kBufDFch, kBufDLn2,
  kBufDAtty, kBufDQkv, kBufDLn1,
  kNumCpuBuffers
};

/// Context parallelism (model/context_parallel.h): a CpuGpt2's rows are the positions
/// `positions` of sequences of `seq_len`, and attention reaches the rows of the other ranks
/// through attend / attend_backward (collective), with the contract of
/// CpuContextAttention::forward / backward.
template <typename Real>
struct SequenceShare {
  std::vector<int> positions;
  int seq_len = 0;
  std::function<void(Real* out, Real* lse, const Real* qkv)> attend;
  std::function<void(Real* dqkv, const Real* dout, const Real* qkv, const Real* out,
                     const Real* lse)>
      attend_backward;
};

struct CpuBufferSpec {
  const char* group = "";  // MemoryPlan group: "activations", "attention", "workspace", ...
  std::string name;   // with its shape, e.g. "attention probabilities (L,B,NH,T,T)"
  size_t elements = 0;
  size_t element_bytes = sizeof(float);  // in the CPU model (float; the tokens int32)
  size_t bytes() const { return elements * element_bytes; }
};

/// kNumCpuBuffers specs indexed by CpuBuffer; the attention buffer of the other kind (probs
/// for flash, lse for naive) has 0 elements, and so has the backward workspace (kBufDLosses
/// on) without training.
std::vector<CpuBufferSpec> cpu_buffer_specs(const ModelConfig& config, int B, int T,
                                            AttentionKind attention, bool training = true);

/// CpuGpt2's storage besides its CpuBuffers, in plan order.
enum CpuStorage : int {
  kStoreParams,   // ParameterLayout order
  kStoreGrads,    // training only
  kStoreWpeRows,  // context parallel only: wpe at the shared positions, then its gradient
  kStoreTokens,   // the last forward's inputs, then its targets
  kNumCpuStorage
};

/// kNumCpuStorage specs indexed by CpuStorage, from which both CpuGpt2's allocations and the
/// CPU model's plan (model/cpu_model.h) come; shared: the model's rows are a context-parallel
/// share (SequenceShare).
std::vector<CpuBufferSpec> cpu_storage_specs(const ModelConfig& config, int B, int T,
                                             bool training, bool shared);

template <typename Real>
class CpuGpt2 {
 public:
  /// training false: no gradients and no backward workspace (backward throws).
  CpuGpt2(const ModelConfig& config, int B, int T, AttentionKind attention,
          cpu::FlashBlocks blocks = {}, bool training = true);

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  int batch_size() const { return B_; }
  int seq_len() const { return T_; }
  AttentionKind attention() const { return attention_; }

  bool training() const { return !grads_.empty(); }

  /// Flat buffers of layout().total elements in ParameterLayout order (grads: empty without
  /// training).
  Real* params() { return params_.data(); }
  const Real* params() const { return params_.data(); }
  Real* grads() { return grads_.data(); }
  const Real* grads() const { return grads_.data(); }
  size_t num_parameters() const { return layout_.total; }

  /// Mean loss over (B,T); inputs and targets are (B,T) token ids in [0, V). With targets ==
  /// nullptr only logits and probs are computed (losses are then meaningless) and NaN is
  /// returned; backward needs a forward with targets.
  Real forward(const int* inputs, const int* targets) { return forward(inputs, targets, B_, T_); }
  /// Same on a smaller (B,T): 1 <= B <= batch_size(), 1 <= T <= seq_len().
  Real forward(const int* inputs, const int* targets, int B, int T);
  /// Parameter gradients += gradient of loss_scale * (mean loss of the last forward).
  void backward(Real loss_scale);
  void zero_grad();

  /// Makes this model one rank of a context group (SequenceShare): flash attention only; every
  /// training or evaluation forward is then over (B, seq_len()) rows at share.positions (their
  /// count must be seq_len()), its loss the rows' sum over B * share.seq_len, and backward's
  /// gradients those of that share of the sequences' mean. Generation stays local (positions
  /// from 0).
  void share_sequences(SequenceShare<Real> share);

  /// Generation with a key/value cache, as Model's start_generation / prefill / decode_step:
  /// 1 <= B <= batch_size(), 1 <= max_len <= seq_len(); tokens (B,length) then (B) per step.
  /// Both return the logits (B,Vp) of the new last position (valid until the next call).
  /// A forward (training or evaluation) ends the session; backward needs such a forward.
  void start_generation(int B, int max_len);
  const Real* prefill(const int* tokens, int length);
  const Real* decode_step(const int* tokens);
  /// Tokens per sequence so far; 0 after start_generation, -1 without a session.
  int generation_length() const { return gen_length_; }
  int generation_batch_size() const { return gen_B_; }
  int generation_max_len() const { return gen_max_len_; }

  /// Any buffer, laid out for the (B,T) of the last forward (e.g. logits (B,T,Vp)).
  const Real* buffer(CpuBuffer id) const { return buffers_[id].data(); }
  int current_batch_size() const { return cur_B_; }
  int current_seq_len() const { return cur_T_; }

 private:
  Real* buf(CpuBuffer id) { return buffers_[id].data(); }
  /// wte, wpe, lnfw, lnfb among the parameters and the gradients (ParameterLayout's order).
  Real* param(int tensor) { return params_.data() + layout_.offsets[tensor]; }
  Real* grad(int tensor) { return grads_.data() + layout_.offsets[tensor]; }
  /// Layer l's parameters and their gradients.
  LayerTensors<Real> layer_params(int l) { return layer_tensors(params_.data(), layout_, l); }
  LayerTensors<Real> layer_grads(int l) { return layer_tensors(grads_.data(), layout_, l); }

  /// Layer l's slices of the per-layer buffers in a forward over (B,T) rows: the forward
  /// writes them, the backward reads them (its gradients live in the workspace buffers).
  struct LayerActivations {
    const Real* residual;  // the block's input (B,T,C): the encoder's, or layer l-1's output
    Real* ln1;             // (B,T,C)
    Real* ln1_mean;        // (B,T)
    Real* ln1_rstd;
    Real* qkv;        // (B,T,3C)
    Real* atty;       // (B,T,C)
    Real* att_probs;  // (B,NH,T,T), naive attention
    Real* att_lse;    // (B,NH,T), flash attention
    Real* attproj;    // (B,T,C)
    Real* residual2;
    Real* ln2;
    Real* ln2_mean;
    Real* ln2_rstd;
    Real* fch;       // (B,T,4C)
    Real* fch_gelu;  // (B,T,4C)
    Real* fcproj;    // (B,T,C)
    Real* residual3;  // the block's output (B,T,C)
  };
  LayerActivations layer_activations(int l, int B, int T);

  /// How the blocks attend: the configured full attention (training, evaluation), the same
  /// plus writing keys and values to the caches (prefill), or one position over the caches.
  enum class BlockMode { kFull, kPrefill, kDecode };
  /// Embedding and the L blocks over inputs (B,T) at positions [pos, pos+T) (pos > 0 only for
  /// kDecode): the stream's output is layer L-1 of kBufResidual3.
  void forward_blocks(const int* inputs, int B, int T, int pos, BlockMode mode);
  /// lnf and the classifier on the last position of each of the B sequences of the last
  /// forward_blocks: logits (B,Vp) in kBufLogits.
  void last_position_logits(int B, int T);
  /// The count a forward's loss sum is divided by: B * T, or B * the shared sequences' length.
  double loss_count(int B, int T) const;
  void check_tokens(const int* tokens, size_t n) const;

  ModelConfig config_;
  ParameterLayout layout_;
  int B_, T_;
  AttentionKind attention_;
  cpu::FlashBlocks blocks_;
  std::vector<Real> params_, grads_;
  std::vector<std::vector<Real>> buffers_;  // indexed by CpuBuffer
  std::vector<int> tokens_;  // copies of the last forward's (B,T) inputs, then its targets
  int* token_inputs() { return tokens_.data(); }
  int* token_targets() { return tokens_.data() + tokens_.size() / 2; }
  int cur_B_ = 0, cur_T_ = 0;
  bool have_targets_ = false;
  // Generation session: caches (L,gen_B_,NH,gen_max_len_,HS) each; gen_length_ -1 when none.
  std::vector<Real> k_cache_, v_cache_;
  // Context parallelism: the share, and wpe's rows at its positions and their gradient.
  std::optional<SequenceShare<Real>> share_;
  std::vector<Real> wpe_rows_;  // (T,C), then (training) their gradient (T,C)
  int gen_B_ = 0, gen_max_len_ = 0, gen_length_ = -1;
};

extern template class CpuGpt2<float>;
extern template class CpuGpt2<double>;

}  // namespace gpt2
