/**
 * @file hf_checkpoint.cpp
 * @brief Hugging Face GPT-2 directories <-> ParameterLayout (see hf_checkpoint.h).
 *
 * One table, hf_tensor_slots(), says where every Hugging Face tensor lives in the flat
 * parameter buffer, its shape as stored and whether it is a transposed Conv1D weight; reading
 * and writing both walk it, so the two directions cannot disagree. Reading checks every name,
 * dtype and shape against the table before it allocates or reads anything, then reads the
 * tensors in the file's order (one pass): a transposed weight goes through a scratch matrix of
 * one layer's size; everything else lands in place.
 */
#include "model/hf_checkpoint.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "data/paths.h"
#include "kernels/common/layernorm_eps.h"
#include "model/parameters.h"
#include "model/safetensors.h"

namespace gpt2 {
namespace {

// json, indented as transformers writes it, atomically at path.
void write_json(const std::string& path, const Json& json) {
  const std::string text = json.dump(2) + "\n";
  AtomicFileWriter writer(path);
  writer.write(text.data(), text.size());
  writer.commit();
}

namespace fs = std::filesystem;

constexpr const char* kTransformerPrefix = "transformer.";
constexpr const char* kLmHead = "lm_head.weight";
constexpr int kGpt2EndOfText = 50256;

// Where one Hugging Face tensor lives in the flat parameter buffer.
struct HfTensorSlot {
  std::string name;            // without the "transformer." prefix, e.g. "h.3.mlp.c_fc.weight"
  std::vector<int64_t> shape;  // as stored by transformers
  size_t offset = 0;           // of its first element in ParameterLayout order
  bool transposed = false;     // Conv1D weight: stored (in, out), held here as (out, in)
};

std::vector<HfTensorSlot> hf_tensor_slots(const ModelConfig& config) {
  const ParameterLayout layout = ParameterLayout::for_config(config);
  const int64_t V = config.vocab_size, C = config.channels, maxT = config.max_seq_len;
  const auto at = [&](int tensor, int64_t layer, int64_t per_layer) {
    return layout.offsets[tensor] + static_cast<size_t>(layer * per_layer);
  };
  std::vector<HfTensorSlot> slots;
  slots.push_back({"wte.weight", {V, C}, layout.offsets[kWte], false});
  slots.push_back({"wpe.weight", {maxT, C}, layout.offsets[kWpe], false});
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string h = str_cat("h.", l, ".");
    slots.push_back({h + "ln_1.weight", {C}, at(kLn1w, l, C), false});
    slots.push_back({h + "ln_1.bias", {C}, at(kLn1b, l, C), false});
    slots.push_back({h + "attn.c_attn.weight", {C, 3 * C}, at(kQkvw, l, 3 * C * C), true});
    slots.push_back({h + "attn.c_attn.bias", {3 * C}, at(kQkvb, l, 3 * C), false});
    slots.push_back({h + "attn.c_proj.weight", {C, C}, at(kAttprojw, l, C * C), true});
    slots.push_back({h + "attn.c_proj.bias", {C}, at(kAttprojb, l, C), false});
    slots.push_back({h + "ln_2.weight", {C}, at(kLn2w, l, C), false});
    slots.push_back({h + "ln_2.bias", {C}, at(kLn2b, l, C), false});
    slots.push_back({h + "mlp.c_fc.weight", {C, 4 * C}, at(kFcw, l, 4 * C * C), true});
    slots.push_back({h + "mlp.c_fc.bias", {4 * C}, at(kFcb, l, 4 * C), false});
    slots.push_back({h + "mlp.c_proj.weight", {4 * C, C}, at(kFcprojw, l, 4 * C * C), true});
    slots.push_back({h + "mlp.c_proj.bias", {C}, at(kFcprojb, l, C), false});
  }
  slots.push_back({"ln_f.weight", {C}, layout.offsets[kLnfw], false});
  slots.push_back({"ln_f.bias", {C}, layout.offsets[kLnfb], false});
  return slots;
}

std::string join(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

// config.json is a few hundred bytes; anything near this is not a model's config.
constexpr size_t kMaxConfigBytes = size_t{16} << 20;

// The distinct N of the tensors named "<prefix>h.<N>.<...>": as many as the file has blocks (a
// set no larger than the file's tensor list, whatever the numbers).
std::set<int64_t> layer_indices(const SafetensorsReader& reader, const std::string& prefix) {
  std::set<int64_t> layers;
  const std::string block = prefix + "h.";
  for (const SafetensorsTensor& tensor : reader.tensors()) {
    if (tensor.name.compare(0, block.size(), block) != 0) continue;
    const size_t dot = tensor.name.find('.', block.size());
    const std::string digits = tensor.name.substr(block.size(), dot - block.size());
    if (digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;  // refused by name below
    layers.insert(std::stoll(digits));
  }
  return layers;
}

// ---------------------------------------------------------------------------------------------
// config.json

// A required positive integer field that fits an int.
int positive_int_field(const Json& config, const char* key, const std::string& path) {
  if (!config.contains(key)) GPT2_FAIL(path, ": missing field '", key, "'");
  const Json& value = config.at(key);
  if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > INT_MAX)
    GPT2_FAIL(path, ": field '", key, "' is ", dump_json(value),
              ", expected a positive integer of at most ", INT_MAX);
  return static_cast<int>(value.get<int64_t>());
}

// An optional boolean field that must have the value the model here computes with.
void expect_bool_field(const Json& config, const char* key, bool expected, const std::string& path,
                       const char* why) {
  if (!config.contains(key) || config.at(key).is_null()) return;
  const Json& value = config.at(key);
  if (!value.is_boolean())
    GPT2_FAIL(path, ": field '", key, "' is ", dump_json(value), ", expected true or false");
  if (value.get<bool>() != expected)
    GPT2_FAIL(path, ": field '", key, "' is ", dump_json(value), ": ", why);
}

// Throws for a tensor whose name, dtype or shape is not the table's.
void check_tensor(const SafetensorsReader& reader, const std::string& name,
                  const std::vector<int64_t>& shape, const ModelConfig& config) {
  const SafetensorsTensor* tensor = reader.find(name);
  if (tensor == nullptr) GPT2_FAIL(reader.path(), ": missing tensor '", name, "'");
  if (!converts_to_f32(tensor->dtype))
    GPT2_FAIL(reader.path(), ": tensor '", name, "' has dtype ", to_string(tensor->dtype),
              ", expected F32, F16 or BF16");
  if (tensor->shape != shape)
    GPT2_FAIL(reader.path(), ": tensor '", name, "' has shape ", shape_string(tensor->shape),
              " but config.json (n_embd ", config.channels, ", n_layer ", config.num_layers,
              ", n_positions ", config.max_seq_len, ", vocab_size ", config.vocab_size,
              ") requires ", shape_string(shape));
}

}  // namespace

std::string hf_model_dir_of(const std::string& argument) {
  const std::string prefix = kHfModelPrefix;
  std::error_code ec;
  if (argument.compare(0, prefix.size(), prefix) == 0) {
    const std::string dir = argument.substr(prefix.size());
    if (dir.empty()) GPT2_USAGE_FAIL("'", argument, "': hf: takes a directory, e.g. hf:models/gpt2");
    if (!fs::exists(dir, ec)) GPT2_FAIL(dir, ": no such directory");
    if (!fs::is_directory(dir, ec))
      GPT2_FAIL(dir, ": not a directory (hf:DIR names a Hugging Face model directory)");
    if (!fs::exists(join(dir, kHfConfigFile), ec))
      GPT2_FAIL(dir, ": no ", kHfConfigFile, ": not a Hugging Face model directory");
    return dir;
  }
  if (fs::is_directory(argument, ec) && fs::exists(join(argument, kHfConfigFile), ec))
    return argument;
  return "";
}

ModelConfig read_hf_config(const std::string& dir) {
  const std::string path = join(dir, kHfConfigFile);
  const Json config = parse_json_unique_keys(read_file_text(path, kMaxConfigBytes), path);
  if (!config.is_object()) GPT2_FAIL(path, ": not a JSON object");

  if (!config.contains("model_type")) GPT2_FAIL(path, ": missing field 'model_type'");
  if (config.at("model_type") != "gpt2")
    GPT2_FAIL(path, ": field 'model_type' is ", dump_json(config.at("model_type")),
              ", expected \"gpt2\"");
  if (config.contains("architectures") && !config.at("architectures").is_null()) {
    const Json& architectures = config.at("architectures");
    bool known = architectures.is_array();
    for (const Json& name : architectures)
      known = known && (name == "GPT2LMHeadModel" || name == "GPT2Model");
    if (!known)
      GPT2_FAIL(path, ": field 'architectures' is ", dump_json(architectures),
                ", expected [\"GPT2LMHeadModel\"] (or GPT2Model)");
  }

  ModelConfig model;
  model.channels = positive_int_field(config, "n_embd", path);
  model.num_heads = positive_int_field(config, "n_head", path);
  model.num_layers = positive_int_field(config, "n_layer", path);
  model.max_seq_len = positive_int_field(config, "n_positions", path);
  model.vocab_size = positive_int_field(config, "vocab_size", path);
  if (model.vocab_size > INT_MAX - kVocabPadMultiple)
    GPT2_FAIL(path, ": field 'vocab_size' is ", model.vocab_size, ", too large to pad");
  model.padded_vocab_size = padded_vocab(model.vocab_size);
  if (model.channels % model.num_heads != 0)
    GPT2_FAIL(path, ": field 'n_embd' (", model.channels, ") is not a multiple of field 'n_head' (",
              model.num_heads, ")");
  if (config.contains("n_ctx") && !config.at("n_ctx").is_null() &&
      config.at("n_ctx") != config.at("n_positions"))
    GPT2_FAIL(path, ": field 'n_ctx' is ", dump_json(config.at("n_ctx")),
              " but field 'n_positions' is ", model.max_seq_len, "; they must agree");

  if (config.contains("activation_function")) {
    const Json& activation = config.at("activation_function");
    if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
      GPT2_FAIL(path, ": field 'activation_function' is ", dump_json(activation),
                ": the model here computes GELU's tanh form, \"gelu_new\" (or its equal "
                "\"gelu_pytorch_tanh\")");
  }
  if (config.contains("layer_norm_epsilon")) {
    const Json& epsilon = config.at("layer_norm_epsilon");
    if (!epsilon.is_number() ||
        std::fabs(epsilon.get<double>() - kLayerNormEps) > 1e-6 * kLayerNormEps)
      GPT2_FAIL(path, ": field 'layer_norm_epsilon' is ", dump_json(epsilon),
                ": the model here normalizes with epsilon 1e-05");
  }
  if (config.contains("n_inner") && !config.at("n_inner").is_null() &&
      config.at("n_inner") != int64_t{4} * model.channels)
    GPT2_FAIL(path, ": field 'n_inner' is ", dump_json(config.at("n_inner")),
              ": the model here has an MLP of 4 * n_embd = ", int64_t{4} * model.channels,
              " (null means that too)");
  expect_bool_field(config, "scale_attn_weights", true, path,
                    "the model here scales attention scores by 1/sqrt(head size)");
  expect_bool_field(config, "scale_attn_by_inverse_layer_idx", false, path,
                    "the model here does not scale attention by the layer index");
  expect_bool_field(config, "add_cross_attention", false, path,
                    "the model here has no cross-attention");
  expect_bool_field(config, "tie_word_embeddings", true, path,
                    "the model here ties the classifier to the token embedding (lm_head = wte)");
  try {
    validate_config(model);
  } catch (const Error& e) {
    GPT2_FAIL(path, ": ", e.what());
  }
  return model;
}

namespace {

// config.json read and model.safetensors' header checked against it: every tensor known, every
// slot present with a dtype that converts and the slot's shape. No tensor is read yet.
struct CheckedHfFiles {
  ModelConfig config;
  std::unique_ptr<SafetensorsReader> reader;
  std::string prefix;                 // "transformer." or ""
  std::vector<HfTensorSlot> slots;
  std::map<std::string, const HfTensorSlot*> slot_of;  // full tensor name -> slot
};

CheckedHfFiles open_hf_model(const std::string& dir) {
  CheckedHfFiles files;
  files.config = read_hf_config(dir);
  const ModelConfig& config = files.config;
  const std::string path = join(dir, kHfWeightsFile);
  if (!file_exists(path)) {
    if (file_exists(join(dir, "model.safetensors.index.json")))
      GPT2_FAIL(path, ": no such file; the directory holds a sharded checkpoint "
                "(model.safetensors.index.json), which is not read: save it as one file "
                "(save_pretrained with max_shard_size larger than the model)");
    if (file_exists(join(dir, "pytorch_model.bin")))
      GPT2_FAIL(path, ": no such file; the directory holds pytorch_model.bin, which is not read: "
                "save the model with save_pretrained(dir, safe_serialization=True)");
  }
  files.reader = std::make_unique<SafetensorsReader>(path);
  const SafetensorsReader& reader = *files.reader;

  // GPT2LMHeadModel's names carry "transformer."; GPT2Model's (and the hub's gpt2 files) do not.
  if (reader.find(str_cat(kTransformerPrefix, "wte.weight")) != nullptr) {
    files.prefix = kTransformerPrefix;
  } else if (reader.find("wte.weight") == nullptr) {
    GPT2_FAIL(path, ": missing tensor 'transformer.wte.weight' (nor 'wte.weight' of the "
              "GPT2Model layout): not a GPT-2 model");
  }
  const std::string& prefix = files.prefix;
  // config.json's sizes against the tensors present before they size anything: the tables
  // below hold 12 entries per layer, the parameters (read_hf_model) every layer's weights.
  check_tensor(reader, prefix + "wte.weight", {config.vocab_size, config.channels}, config);
  check_tensor(reader, prefix + "wpe.weight", {config.max_seq_len, config.channels}, config);
  // More layers in the file than n_layer are named tensor by tensor below ("unexpected tensor").
  const std::set<int64_t> layers = layer_indices(reader, prefix);
  if (static_cast<int64_t>(layers.size()) < config.num_layers)
    GPT2_FAIL(join(dir, kHfConfigFile), ": field 'n_layer' is ", config.num_layers, " but ", path,
              " holds ", layers.empty() ? std::string("no layer (no tensor h.N.*)")
                                        : str_cat("the tensors of ", layers.size(),
                                                  " layer(s), h.", *layers.begin(), " to h.",
                                                  *layers.rbegin()));
  files.slots = hf_tensor_slots(config);
  for (const HfTensorSlot& slot : files.slots) files.slot_of[prefix + slot.name] = &slot;
  std::set<std::string> ignored;
  for (int l = 0; l < config.num_layers; ++l) {
    ignored.insert(str_cat(prefix, "h.", l, ".attn.bias"));
    ignored.insert(str_cat(prefix, "h.", l, ".attn.masked_bias"));
  }
  for (const SafetensorsTensor& tensor : reader.tensors()) {
    if (files.slot_of.count(tensor.name) || ignored.count(tensor.name) || tensor.name == kLmHead)
      continue;
    GPT2_FAIL(path, ": unexpected tensor '", tensor.name, "': not part of GPT-2 (",
              prefix.empty() ? "GPT2Model" : "GPT2LMHeadModel", " names, n_layer ",
              config.num_layers, ")");
  }
  for (const HfTensorSlot& slot : files.slots)
    check_tensor(reader, prefix + slot.name, slot.shape, config);
  if (reader.find(kLmHead) != nullptr) check_tensor(reader, kLmHead, files.slots[0].shape, config);
  return files;
}

}  // namespace

ModelConfig read_hf_model_config(const std::string& dir) { return open_hf_model(dir).config; }

HfModel read_hf_model(const std::string& dir) {
  CheckedHfFiles files = open_hf_model(dir);
  SafetensorsReader& reader = *files.reader;
  const std::string& path = reader.path();
  const std::string& prefix = files.prefix;
  const auto& slot_of = files.slot_of;
  const SafetensorsTensor* lm_head = reader.find(kLmHead);
  HfModel model;
  model.config = files.config;
  const ModelConfig& config = model.config;

  const ParameterLayout layout = ParameterLayout::for_config(config);
  model.params.assign(layout.total, 0.0f);  // wte's padding rows stay 0
  std::vector<float> scratch;               // one transposed weight, (in, out)
  std::vector<float> lm_head_values;
  for (const SafetensorsTensor& tensor : reader.tensors()) {
    if (tensor.name == kLmHead) {
      lm_head_values.resize(tensor.num_elements());
      reader.read_f32(tensor, lm_head_values.data());
      continue;
    }
    const auto found = slot_of.find(tensor.name);
    if (found == slot_of.end()) continue;  // an ignored buffer
    const HfTensorSlot& slot = *found->second;
    float* dst = model.params.data() + slot.offset;
    if (!slot.transposed) {
      reader.read_f32(tensor, dst);
      continue;
    }
    const size_t in = static_cast<size_t>(slot.shape[0]), out = static_cast<size_t>(slot.shape[1]);
    scratch.resize(in * out);
    reader.read_f32(tensor, scratch.data());
    for (size_t o = 0; o < out; ++o)
      for (size_t i = 0; i < in; ++i) dst[o * in + i] = scratch[i * out + o];
  }
  if (lm_head != nullptr) {
    const float* wte = model.params.data() + layout.offsets[kWte];
    const size_t C = static_cast<size_t>(config.channels);
    for (size_t i = 0; i < lm_head_values.size(); ++i) {
      if (std::memcmp(&lm_head_values[i], &wte[i], sizeof(float)) != 0)
        GPT2_FAIL(path, ": tensor '", kLmHead, "' differs from '", prefix, "wte.weight' (first at [",
                  i / C, ", ", i % C, "]: ", lm_head_values[i], " vs ", wte[i],
                  "): the model here ties the classifier to the token embedding, so an untied "
                  "lm_head cannot be loaded");
    }
  }
  return model;
}

void write_hf_model(const std::string& dir, const ModelConfig& config, const float* params) {
  validate_config(config);
  make_directories(dir);
  std::vector<SafetensorsOutput> outputs;
  for (const HfTensorSlot& slot : hf_tensor_slots(config)) {
    const float* src = params + slot.offset;
    SafetensorsOutput output;
    output.name = kTransformerPrefix + slot.name;
    output.shape = slot.shape;
    const size_t rows = static_cast<size_t>(slot.shape[0]);
    const size_t cols = slot.shape.size() > 1 ? static_cast<size_t>(slot.shape[1]) : 1;
    if (slot.transposed) {
      // Stored (in, out) = (rows, cols); held (out, in).
      output.fill = [src, rows, cols](float* values) {
        for (size_t i = 0; i < rows; ++i)
          for (size_t o = 0; o < cols; ++o) values[i * cols + o] = src[o * rows + i];
      };
    } else {
      // wte's first V rows: the padding rows [V, Vp) follow them and are left out.
      output.fill = [src, n = rows * cols](float* values) {
        std::memcpy(values, src, n * sizeof(float));
      };
    }
    outputs.push_back(std::move(output));
  }
  write_safetensors_f32(join(dir, kHfWeightsFile), std::move(outputs), {{"format", "pt"}});

  // The fields of the hub's gpt2 config.json (keys sorted, as transformers writes them).
  const int special_token = std::min(kGpt2EndOfText, config.vocab_size - 1);
  Json json = Json::object();
  json["activation_function"] = "gelu_new";
  json["architectures"] = Json::array({"GPT2LMHeadModel"});
  json["attn_pdrop"] = 0.1;
  json["bos_token_id"] = special_token;
  json["embd_pdrop"] = 0.1;
  json["eos_token_id"] = special_token;
  json["initializer_range"] = 0.02;
  json["layer_norm_epsilon"] = kLayerNormEps;
  json["model_type"] = "gpt2";
  json["n_ctx"] = config.max_seq_len;
  json["n_embd"] = config.channels;
  json["n_head"] = config.num_heads;
  json["n_inner"] = nullptr;
  json["n_layer"] = config.num_layers;
  json["n_positions"] = config.max_seq_len;
  json["reorder_and_upcast_attn"] = false;
  json["resid_pdrop"] = 0.1;
  json["scale_attn_by_inverse_layer_idx"] = false;
  json["scale_attn_weights"] = true;
  json["summary_activation"] = nullptr;
  json["summary_first_dropout"] = 0.1;
  json["summary_proj_to_labels"] = true;
  json["summary_type"] = "cls_index";
  json["summary_use_proj"] = true;
  json["tie_word_embeddings"] = true;
  json["torch_dtype"] = "float32";
  json["use_cache"] = true;
  json["vocab_size"] = config.vocab_size;
  write_json(join(dir, kHfConfigFile), json);
}

std::vector<std::string> write_hf_generation_files(const std::string& dir,
                                                   const ModelConfig& config) {
  make_directories(dir);
  const int end_of_text = std::min(kGpt2EndOfText, config.vocab_size - 1);
  Json generation = Json::object();
  generation["bos_token_id"] = end_of_text;
  generation["eos_token_id"] = end_of_text;
  write_json(join(dir, "generation_config.json"), generation);
  std::vector<std::string> written = {"generation_config.json"};
  if (config.vocab_size != kGpt2EndOfText + 1) return written;  // not GPT-2's vocabulary

  const auto copy = [&](const char* from, const char* to) {
    const std::vector<char> bytes = read_file_bytes(join(tokenizer_dir(), from));
    AtomicFileWriter writer(join(dir, to));
    writer.write(bytes.data(), bytes.size());
    writer.commit();
    written.push_back(to);
  };
  copy("encoder.json", "vocab.json");
  copy("vocab.bpe", "merges.txt");
  const std::string token = "<|endoftext|>";
  Json special = Json::object();
  special["bos_token"] = token;
  special["eos_token"] = token;
  special["unk_token"] = token;
  write_json(join(dir, "special_tokens_map.json"), special);
  written.push_back("special_tokens_map.json");
  Json tokenizer = special;
  tokenizer["add_prefix_space"] = false;
  tokenizer["model_max_length"] = config.max_seq_len;
  tokenizer["tokenizer_class"] = "GPT2Tokenizer";
  write_json(join(dir, "tokenizer_config.json"), tokenizer);
  written.push_back("tokenizer_config.json");
  return written;
}

}  // namespace gpt2
