/**
 * @file generation.h
 * @brief Text generation through a Model's generation session (model.h): a batch of sequences
 *        decoded together, sampled per sequence, stopped per sequence; and the UTF-8-safe
 *        streaming of their bytes. gpt2-generate and the trainer's --sample-every both run it.
 *
 * generate() prefills every sequence with the same prompt, then repeats: sample one token per
 * live sequence (TokenSampler, from that sequence's own Rng), report it, end the sequence when
 * it is <|endoftext|> (with stop_at_end_of_text), and feed the new tokens to one decode step.
 * A sequence that has ended still takes part in the batch's decode steps, fed its last token,
 * but nothing is drawn or reported for it, so each sequence's tokens depend only on the
 * parameters, the prompt, the options and its own Rng: sequence i of a batch equals generating
 * it alone with the same Rng (tested).
 * Per-sequence streams: sequence_rngs(seed, n)[i] is Rng(seed) advanced by i jumps of 2^128
 * draws (Rng::jump), so sequence 0 of any batch draws what a single sequence with that seed does.
 * Length: producing N tokens after a P-token prompt needs P + N - 1 positions (the last token
 * is never fed back), at most the model's options().seq_len; more is an error, unless
 * slide_window is set (training samples): the model then sees the latest seq_len tokens, the
 * cache filled by one prefill of that window whenever the sequences outgrow it (each further
 * token costs a full-window forward, as recomputation did).
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/rng.h"
#include "model/model.h"
#include "inference/sampling.h"

namespace gpt2 {

struct GenerationOptions {
  int max_new_tokens = 64;          // N >= 1 per sequence
  SamplingOptions sampling;
  bool stop_at_end_of_text = true;  // a sequence ends with the <|endoftext|> it produced
                                    // (that token included in its output)
  bool slide_window = false;        // see the file comment
};

struct GenerationStats {
  int sequences = 0;
  int prompt_tokens = 0;         // per sequence (the fed window when it slides)
  double prefill_seconds = 0.0;  // the first prefill (model time)
  int64_t decode_steps = 0;      // decode steps and window re-prefills
  double decode_seconds = 0.0;   // their model time
  int64_t generated_tokens = 0;  // tokens reported, all sequences together
};

/// Called for every token as it is produced: step by step, within a step by sequence index.
using TokenCallback = std::function<void(int sequence, int token)>;

/// rngs[i] = Rng(seed) jumped i times, for i < count.
std::vector<Rng> sequence_rngs(uint64_t seed, int count);

/// One sequence per element of rngs (1 <= rngs.size() <= model.options().batch_size), each
/// continuing prompt (>= 1 token). Returns each sequence's produced tokens (the prompt
/// excluded), max_new_tokens of them unless it stopped at <|endoftext|>. The Rngs are advanced
/// by what was drawn (one uniform() per token unless greedy). Throws gpt2::Error for a prompt
/// and length that do not fit (see the file comment).
std::vector<std::vector<int>> generate(Model& model, const std::vector<int>& prompt,
                                       const GenerationOptions& options, std::vector<Rng>& rngs,
                                       const TokenCallback& on_token = nullptr,
                                       GenerationStats* stats = nullptr);

/// The trainer's sample: num_tokens tokens after <|endoftext|> at temperature 1, no stopping,
/// the window sliding past the model's seq_len; one rng.uniform() per token, so the text depends
/// only on the parameters and the RNG state (saved in the training state for bitwise resume).
std::vector<int> generate_training_sample(Model& model, int num_tokens, Rng& rng);

/// Byte-level tokens can end in the middle of a UTF-8 character: push() returns the bytes
/// that end on a character boundary and holds back an incomplete trailing character (at most
/// 3 bytes) until the next push; finish() returns what is held. The concatenation of all
/// returned pieces is exactly the concatenation of the pushed bytes; bytes that are not valid
/// UTF-8 are passed through, never held for good.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string finish();

 private:
  std::string pending_;
};

}  // namespace gpt2
