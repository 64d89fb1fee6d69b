/**
 * @file config.h
 * @brief GPT-2 model configuration and its presets.
 *
 * Presets: "dN" = N layers, 64*N channels, N heads (head size 64), as llm.c;
 * "gpt2" (d12, 124M), "gpt2-medium" (24 layers, 1024 channels, 16 heads, 350M),
 * "gpt2-large" (36, 1280, 20, 774M), "gpt2-xl" (48, 1600, 25, 1558M).
 * Vocabulary 50257, padded to a multiple of 128 (50304) for the embedding/classifier.
 * max_seq_len sizes the position embedding and may be far beyond 1024 (e.g. 131072).
 */
#pragma once

#include <string>

namespace gpt2 {

constexpr int kGpt2VocabSize = 50257;
constexpr int kVocabPadMultiple = 128;

struct ModelConfig {
  int max_seq_len = 1024;       // maxT: rows of the position embedding
  int vocab_size = kGpt2VocabSize;       // V
  int padded_vocab_size = 50304;         // Vp
  int num_layers = 12;          // L
  int num_heads = 12;           // NH
  int channels = 768;           // C
  int head_size() const { return channels / num_heads; }  // HS
  bool operator==(const ModelConfig& o) const;
  bool operator!=(const ModelConfig& o) const { return !(*this == o); }
  std::string describe() const;  // "L=12 C=768 NH=12 HS=64 maxT=1024 V=50257 Vp=50304"
};

/// Rounds V up to a multiple of kVocabPadMultiple.
int padded_vocab(int vocab_size);

/// True when name is a preset name ("d12", "gpt2-xl", ...).
bool is_model_preset(const std::string& name);

/// Config of a preset; throws gpt2::UsageError for an unknown name or bad max_seq_len.
ModelConfig model_config_from_preset(const std::string& name, int max_seq_len);

/// Throws gpt2::Error describing the first inconsistency (non-positive sizes, C % NH, ...).
void validate_config(const ModelConfig& config);

}  // namespace gpt2
