#include "model/parameters.h"

#include <cmath>

#include "base/rng.h"

namespace gpt2 {

namespace {
constexpr const char* kNames[kNumParamTensors] = {
    "wte",  "wpe",  "ln1w", "ln1b", "qkvw", "qkvb",    "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",  "lnfb"};
}  // namespace

ParameterLayout ParameterLayout::for_config(const ModelConfig& cfg) {
  const size_t Vp = cfg.padded_vocab_size, C = cfg.channels, L = cfg.num_layers;
  const size_t maxT = cfg.max_seq_len;
  ParameterLayout layout;
  layout.num_layers = cfg.num_layers;
  layout.sizes = {Vp * C,        maxT * C,  L * C,     L * C,         L * 3 * C * C, L * 3 * C,
                  L * C * C,     L * C,     L * C,     L * C,         L * 4 * C * C, L * 4 * C,
                  L * C * 4 * C, L * C,     C,         C};
  size_t offset = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    layout.offsets[i] = offset;
    offset += layout.sizes[i];
  }
  layout.total = offset;
  return layout;
}

const char* ParameterLayout::name(int tensor) { return kNames[tensor]; }

bool ParameterLayout::decays(int tensor) {
  return tensor == kWte || tensor == kWpe || tensor == kQkvw || tensor == kAttprojw ||
         tensor == kFcw || tensor == kFcprojw;
}

bool ParameterLayout::is_per_layer(int tensor) {
  return tensor != kWte && tensor != kWpe && tensor != kLnfw && tensor != kLnfb;
}

LayerMajorLayout::LayerMajorLayout(const ModelConfig& config) : num_layers_(config.num_layers) {
  const ParameterLayout llmc = ParameterLayout::for_config(config);
  const size_t L = static_cast<size_t>(config.num_layers);
  size_t offset = 0;
  const auto whole = [&](int tensor) {
    whole_[tensor] = offset;
    slices_.push_back({tensor, -1, offset, llmc.offsets[tensor], llmc.sizes[tensor]});
    offset += llmc.sizes[tensor];
  };
  whole(kWte);
  whole(kWpe);
  first_layer_ = offset;
  for (size_t l = 0; l < L; ++l) {
    for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
      if (!ParameterLayout::is_per_layer(tensor)) continue;
      const size_t per_layer = llmc.sizes[tensor] / L;
      if (l == 0) in_layer_[tensor] = offset - first_layer_;
      slices_.push_back({tensor, static_cast<int>(l), offset,
                         llmc.offsets[tensor] + l * per_layer, per_layer});
      offset += per_layer;
    }
    if (l == 0) layer_size_ = offset - first_layer_;
  }
  whole(kLnfw);
  whole(kLnfb);
  total_ = offset;
}

size_t LayerMajorLayout::offset(int tensor, int layer) const {
  if (!ParameterLayout::is_per_layer(tensor)) return whole_[tensor];
  return layer_begin(layer) + in_layer_[tensor];
}

std::vector<size_t> LayerMajorLayout::bucket_cuts() const {
  std::vector<size_t> cuts = {whole_[kWpe]};
  for (int l = 0; l <= num_layers_; ++l) cuts.push_back(layer_begin(l));
  cuts.push_back(whole_[kLnfb]);
  return cuts;
}

size_t LayerMajorLayout::layer_begin(int layer) const {
  return first_layer_ + static_cast<size_t>(layer) * layer_size_;
}

void init_parameters(float* params, const ModelConfig& config, uint64_t seed) {
  const ParameterLayout layout = ParameterLayout::for_config(config);
  const double residual_scale = 1.0 / std::sqrt(2.0 * config.num_layers);
  for (int tensor = 0; tensor < kNumParamTensors; ++tensor) {
    float* p = params + layout.offsets[tensor];
    const size_t n = layout.sizes[tensor];
    const bool is_layernorm_weight = tensor == kLn1w || tensor == kLn2w || tensor == kLnfw;
    const bool is_bias = tensor == kLn1b || tensor == kQkvb || tensor == kAttprojb ||
                         tensor == kLn2b || tensor == kFcb || tensor == kFcprojb ||
                         tensor == kLnfb;
    if (is_layernorm_weight || is_bias) {
      const float value = is_layernorm_weight ? 1.0f : 0.0f;
      for (size_t i = 0; i < n; ++i) p[i] = value;
      continue;
    }
    // One stream per tensor: a tensor's values do not depend on other tensors' sizes.
    Rng rng(seed ^ (0x5851F42D4C957F2Dull * static_cast<uint64_t>(tensor + 1)));
    const bool residual = tensor == kAttprojw || tensor == kFcprojw;
    const double stddev = 0.02 * (residual ? residual_scale : 1.0);
    size_t count = n;
    if (tensor == kWte) {
      // Rows [V, Vp) pad the classifier; they never receive gradient and stay 0.
      count = static_cast<size_t>(config.vocab_size) * config.channels;
      for (size_t i = count; i < n; ++i) p[i] = 0.0f;
    }
    for (size_t i = 0; i < count; ++i) p[i] = static_cast<float>(stddev * rng.normal());
  }
}

}  // namespace gpt2
