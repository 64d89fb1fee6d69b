#include "model/config.h"

#include <cctype>

#include "base/error.h"

namespace gpt2 {

bool ModelConfig::operator==(const ModelConfig& o) const {
  return max_seq_len == o.max_seq_len && vocab_size == o.vocab_size &&
         padded_vocab_size == o.padded_vocab_size && num_layers == o.num_layers &&
         num_heads == o.num_heads && channels == o.channels;
}

std::string ModelConfig::describe() const {
  return str_cat("L=", num_layers, " C=", channels, " NH=", num_heads, " HS=", head_size(),
                 " maxT=", max_seq_len, " V=", vocab_size, " Vp=", padded_vocab_size);
}

int padded_vocab(int vocab_size) {
  return (vocab_size + kVocabPadMultiple - 1) / kVocabPadMultiple * kVocabPadMultiple;
}

namespace {

struct Preset {
  const char* name;
  int num_layers, channels, num_heads;
};

constexpr Preset kAliases[] = {
    {"gpt2", 12, 768, 12},
    {"gpt2-medium", 24, 1024, 16},
    {"gpt2-large", 36, 1280, 20},
    {"gpt2-xl", 48, 1600, 25},
};

// "d12" -> 12; -1 when name is not of the form d<positive integer>.
int depth_preset(const std::string& name) {
  if (name.size() < 2 || name.size() > 4 || name[0] != 'd') return -1;
  for (size_t i = 1; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  const int depth = std::stoi(name.substr(1));
  return depth >= 1 ? depth : -1;
}

}  // namespace

bool is_model_preset(const std::string& name) {
  if (depth_preset(name) > 0) return true;
  for (const Preset& p : kAliases)
    if (name == p.name) return true;
  return false;
}

ModelConfig model_config_from_preset(const std::string& name, int max_seq_len) {
  if (max_seq_len < 1) GPT2_USAGE_FAIL("--max-seq-len must be >= 1 (got ", max_seq_len, ")");
  ModelConfig config;
  config.max_seq_len = max_seq_len;
  config.vocab_size = kGpt2VocabSize;
  config.padded_vocab_size = padded_vocab(kGpt2VocabSize);
  if (const int depth = depth_preset(name); depth > 0) {
    config.num_layers = depth;
    config.channels = 64 * depth;
    config.num_heads = depth;
    return config;
  }
  for (const Preset& p : kAliases) {
    if (name == p.name) {
      config.num_layers = p.num_layers;
      config.channels = p.channels;
      config.num_heads = p.num_heads;
      return config;
    }
  }
  GPT2_USAGE_FAIL("unknown model '", name,
                  "': expected dN (e.g. d12), gpt2, gpt2-medium, gpt2-large, gpt2-xl or a "
                  "checkpoint path");
}

void validate_config(const ModelConfig& c) {
  if (c.max_seq_len < 1) GPT2_FAIL("model config: maxT must be >= 1 (got ", c.max_seq_len, ")");
  if (c.vocab_size < 1) GPT2_FAIL("model config: V must be >= 1 (got ", c.vocab_size, ")");
  if (c.padded_vocab_size < c.vocab_size)
    GPT2_FAIL("model config: Vp (", c.padded_vocab_size, ") must be >= V (", c.vocab_size, ")");
  if (c.num_layers < 1) GPT2_FAIL("model config: L must be >= 1 (got ", c.num_layers, ")");
  if (c.num_heads < 1) GPT2_FAIL("model config: NH must be >= 1 (got ", c.num_heads, ")");
  if (c.channels < 1 || c.channels % c.num_heads != 0)
    GPT2_FAIL("model config: C (", c.channels, ") must be a positive multiple of NH (",
              c.num_heads, ")");
}

}  // namespace gpt2
