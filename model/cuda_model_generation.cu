/**
 * @file cuda_model_generation.cu
 * @brief CudaModel<T_>'s generation: prefill and decode steps over a key/value cache.
 *
 * The session keeps a key/value cache per layer, (gen_B, NH, max_len, HS) in the storage type,
 * in buffers a session may overwrite: the key caches in ln1, the value caches in ln2 (each
 * L*B*T*C elements, the caches' size at max_len = T). Prefill runs the blocks over the prompt,
 * then copies each layer's keys and values from its kept qkv into the caches (after the forward,
 * which writes ln1/ln2), and computes lnf + classifier for the B last positions only. A decode
 * step runs B rows (T = 1) through the same blocks, attention being a cache write and
 * gpu::attention_decode_forward, its ln1/ln2 rows in the lnf buffer; the embedding of position
 * pos is wpe + pos*C. Generation stays local to a rank (positions from 0). Logits go to the host
 * as fp32 (B,V); each call synchronizes.
 */
#include <cstddef>
#include <vector>

#include "model/cuda_model_impl.cuh"

namespace gpt2::cuda_model_detail {

template <typename T_>
void CudaModel<T_>::start_generation(int batch, int max_len) {
  GPT2_CHECK(batch >= 1 && batch <= options_.batch_size, "generation batch ", batch,
             " with buffers for B=", options_.batch_size);
  GPT2_CHECK(max_len >= 1 && max_len <= attention_.T, "generation max_len ", max_len,
             " with buffers for T=", attention_.T);
  check_parameters_whole("start_generation");
  gen_B_ = batch;
  gen_max_len_ = max_len;
  gen_length_ = 0;
  have_targets_ = false;  // the session overwrites the activations a backward would need
}

// The key cache of layer l fills the ln1 buffer's first L*gen_B_*gen_max_len_*C elements (of
// L*B*T*C) at a pitch of one layer's cache, the value cache the ln2 buffer's. Both are free
// during a session: prefill writes the caches after its forward (which wrote ln1 and ln2) is
// done, and decode steps put their ln1 / ln2 rows in the lnf buffer instead. A --precision fp8
// training model keeps one layer of ln1 (and of ln2) only: its caches fill the FP8 inputs
// buffer instead (L*7C*B*T bytes; the caches need 4*L*gen_B_*gen_max_len_*C), which only a
// training forward writes, and a training call ends the session.
template <typename T_>
T_* CudaModel<T_>::key_cache(int l) const {
  const size_t layer = static_cast<size_t>(gen_B_) * gen_max_len_ * config_.channels;
  if (fp8_) return buf<T_>(kFp8Inputs) + static_cast<size_t>(l) * layer;
  return act(kLn1) + static_cast<size_t>(l) * layer;
}

template <typename T_>
T_* CudaModel<T_>::value_cache(int l) const {
  const size_t layer = static_cast<size_t>(gen_B_) * gen_max_len_ * config_.channels;
  if (fp8_) return buf<T_>(kFp8Inputs) + static_cast<size_t>(config_.num_layers + l) * layer;
  return act(kLn2) + static_cast<size_t>(l) * layer;
}

template <typename T_>
void CudaModel<T_>::prefill(const int* prompts, int length, float* logits) {
  GPT2_CHECK(gen_length_ >= 0, "prefill without a generation session (start_generation)");
  GPT2_CHECK(length >= 1 && length <= gen_max_len_, "prefill of ", length,
             " tokens in a session of max_len ", gen_max_len_);
  check_parameters_whole("prefill");
  cudaStream_t stream = ctx_->stream();
  const int B = gen_B_, C = config_.channels, L = config_.num_layers, NH = config_.num_heads;
  const size_t BT = static_cast<size_t>(B) * length, Cs = C;
  upload_tokens(prompts, nullptr, B, length);  // checks the ids first
  gen_length_ = -1;  // no valid session should this throw half way
  forward_blocks(B, length, /*shared=*/false);  // generation stays local, from position 0
  // Every layer's qkv (L,B,length,3C) is still there: its keys and values into the caches.
  for (int l = 0; l < L; ++l)
    gpu::attention_kv_cache_write(key_cache(l), value_cache(l), act(kQkv) + l * BT * 3 * Cs, B,
                                  length, C, NH, 0, gen_max_len_, stream);
  // Row length-1 of each sequence in the last block's output, gathered into B rows.
  T_* last_rows = act(kProj);
  GPT2_CUDA_CHECK(cudaMemcpy2DAsync(
      last_rows, Cs * sizeof(T_), act(kResidual3) + (L - 1) * BT * Cs + (length - 1) * Cs,
      static_cast<size_t>(length) * Cs * sizeof(T_), Cs * sizeof(T_), B, cudaMemcpyDeviceToDevice,
      stream));
  generation_logits(last_rows, logits);
  gen_length_ = length;
}

template <typename T_>
void CudaModel<T_>::decode_step(const int* next_tokens, float* logits) {
  GPT2_CHECK(gen_length_ >= 1, gen_length_ < 0 ? "decode_step without a generation session"
                                               : "decode_step before prefill");
  GPT2_CHECK(gen_length_ < gen_max_len_, "decode_step past max_len: the sequences hold ",
             gen_length_, " of ", gen_max_len_, " tokens");
  check_parameters_whole("decode_step");
  const gpu::Context& ctx = *ctx_;
  cudaStream_t stream = ctx.stream();
  const int B = gen_B_, C = config_.channels, L = config_.num_layers, NH = config_.num_heads;
  const int pos = gen_length_;  // of the new tokens
  const size_t Cs = C;
  upload_tokens(next_tokens, nullptr, B, 1);  // checks the ids first
  gen_length_ = -1;  // no valid session should this throw half way
  // Position pos: wpe's row pos is row 0 of wpe + pos*C.
  gpu::encoder_forward(act(kEncoded), buf<int>(kInputs), param(kWte), param(kWpe) + pos * Cs, B,
                       1, C, stream);
  const auto decode_activations = [&](int l) {
    BlockActivations<T_> a = block_activations(l, static_cast<size_t>(B));
    a.ln1 = a.ln2 = act(kLnf);  // ln1 and ln2 hold the caches
    return a;
  };
  const FollowingLayerNorm<T_> first = ln1_of(0, decode_activations(0));
  gpu::layernorm_forward(first.out, first.mean, first.rstd, act(kEncoded), first.weight,
                         first.bias, B, 1, C, stream);
  for (int l = 0; l < L; ++l) {
    const BlockActivations<T_> a = decode_activations(l);
    // After the last block, generation_logits normalizes the rows it keeps.
    const FollowingLayerNorm<T_> next =
        l + 1 < L ? ln1_of(l + 1, decode_activations(l + 1)) : FollowingLayerNorm<T_>{};
    block_forward(l, a, B, 1, [&] {
      gpu::attention_kv_cache_write(key_cache(l), value_cache(l), a.qkv, B, 1, C, NH, pos,
                                    gen_max_len_, stream);
      gpu::attention_decode_forward(a.atty, a.qkv, key_cache(l), value_cache(l), B, C, NH,
                                    pos + 1, gen_max_len_, buf<float>(kDecodePartials), stream);
    }, next);
  }
  generation_logits(act(kResidual3) + (L - 1) * static_cast<size_t>(B) * Cs, logits);
  gen_length_ = pos + 1;
}

template <typename T_>
void CudaModel<T_>::generation_logits(const T_* rows, float* logits) {
  const gpu::Context& ctx = *ctx_;
  const int B = gen_B_, C = config_.channels;
  const int V = config_.vocab_size, Vp = config_.padded_vocab_size;
  // (B,1) rows through lnf and the classifier: the logits buffer holds at least batch_size rows.
  gpu::layernorm_forward(act(kLnf), buf<float>(kLnfMean), buf<float>(kLnfRstd), rows,
                         param(kLnfw), param(kLnfb), B, 1, C, ctx.stream());
  gpu::matmul_forward(act(kLogits), act(kLnf), param(kWte), static_cast<const T_*>(nullptr), B, 1,
                      C, Vp, ctx);
  std::vector<T_> host(static_cast<size_t>(B) * Vp);
  GPT2_CUDA_CHECK(cudaMemcpyAsync(host.data(), act(kLogits), host.size() * sizeof(T_),
                                  cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
  for (size_t b = 0; b < static_cast<size_t>(B); ++b)
    for (int v = 0; v < V; ++v) logits[b * V + v] = host_float(host[b * Vp + v]);
  sample_memory();
}

template class CudaModel<float>;
template class CudaModel<bf16>;

}  // namespace gpt2::cuda_model_detail
