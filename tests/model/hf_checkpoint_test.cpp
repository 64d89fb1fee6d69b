/**
 * @file hf_checkpoint_test.cpp
 * @brief model/hf_checkpoint.h: Hugging Face GPT-2 directories to and from the parameter layout.
 *
 * - llm.c file -> HF directory -> llm.c file is bit-identical (fp32) at d2's and d12's layer
   shapes (d12 in two layers, with a small vocabulary and context, to keep it fast).
 * - A GPT2LMHeadModel directory assembled byte by byte here (config.json as the hub's gpt2 has
 *   it, tensors in a shuffled data order, attn.bias buffers, lm_head equal to wte) reads, each
 *   value landing where the layout says; the Conv1D transpose is checked element by element in
 *   both directions; the GPT2Model names (no "transformer.") read the same; F16 and BF16 read.
 * - Every bad config field and every bad tensor (missing, unexpected, wrong shape, wrong dtype,
 *   untied lm_head) is refused naming the file and the field or tensor.
 */
#include "model/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "base/rng.h"
#include "model/checkpoint.h"
#include "model/parameters.h"
#include "model/safetensors.h"
#include "safetensors_test_util.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using testing::assemble_safetensors;
using testing::exact_bf16_bits;
using testing::exact_half_bits;
using testing::f32_bytes;
using testing::HandTensor;
using testing::read_bytes;
using testing::scratch_folder;
using testing::u16_bytes;
using testing::write_bytes;

ModelConfig config_of(int L, int C, int NH, int maxT, int V) {
  ModelConfig c;
  c.num_layers = L;
  c.channels = C;
  c.num_heads = NH;
  c.max_seq_len = maxT;
  c.vocab_size = V;
  c.padded_vocab_size = padded_vocab(V);
  return c;
}

// The hub's gpt2 config.json with the sizes replaced.
std::string hub_config_json(const ModelConfig& c, const std::string& extra = "") {
  return "{\n"
         "  \"activation_function\": \"gelu_new\",\n"
         "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
         "  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n  \"embd_pdrop\": 0.1,\n"
         "  \"eos_token_id\": 50256,\n  \"initializer_range\": 0.02,\n"
         "  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n" +
         extra +
         "  \"n_ctx\": " + std::to_string(c.max_seq_len) + ",\n" +
         "  \"n_embd\": " + std::to_string(c.channels) + ",\n" +
         "  \"n_head\": " + std::to_string(c.num_heads) + ",\n" +
         "  \"n_layer\": " + std::to_string(c.num_layers) + ",\n" +
         "  \"n_positions\": " + std::to_string(c.max_seq_len) + ",\n" +
         "  \"resid_pdrop\": 0.1,\n  \"summary_activation\": null,\n"
         "  \"summary_first_dropout\": 0.1,\n  \"summary_proj_to_labels\": true,\n"
         "  \"summary_type\": \"cls_index\",\n  \"summary_use_proj\": true,\n"
         "  \"task_specific_params\": {\"text-generation\": {\"do_sample\": true, "
         "\"max_length\": 50}},\n"
         "  \"vocab_size\": " + std::to_string(c.vocab_size) + "\n}\n";
}

// A value per (tensor, flat index in the HF tensor) exact in F16 and BF16: k/64, |k| < 256.
float hf_value(int tensor_id, int64_t index) {
  return static_cast<float>(((tensor_id * 37 + index * 11) % 511) - 255) / 64.0f;
}

// The Hugging Face tensors of a config, in HF names (prefix added by the caller) and shapes,
// written independently of model/hf_checkpoint.cpp.
struct HfSpec {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<HfSpec> hf_specs(const ModelConfig& c) {
  const int64_t V = c.vocab_size, C = c.channels, T = c.max_seq_len;
  std::vector<HfSpec> specs = {{"wte.weight", {V, C}}, {"wpe.weight", {T, C}}};
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    specs.push_back({h + "ln_1.weight", {C}});
    specs.push_back({h + "ln_1.bias", {C}});
    specs.push_back({h + "attn.c_attn.weight", {C, 3 * C}});
    specs.push_back({h + "attn.c_attn.bias", {3 * C}});
    specs.push_back({h + "attn.c_proj.weight", {C, C}});
    specs.push_back({h + "attn.c_proj.bias", {C}});
    specs.push_back({h + "ln_2.weight", {C}});
    specs.push_back({h + "ln_2.bias", {C}});
    specs.push_back({h + "mlp.c_fc.weight", {C, 4 * C}});
    specs.push_back({h + "mlp.c_fc.bias", {4 * C}});
    specs.push_back({h + "mlp.c_proj.weight", {4 * C, C}});
    specs.push_back({h + "mlp.c_proj.bias", {C}});
  }
  specs.push_back({"ln_f.weight", {C}});
  specs.push_back({"ln_f.bias", {C}});
  return specs;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t s : shape) n *= s;
  return n;
}

std::string encode(const std::vector<float>& values, const std::string& dtype) {
  if (dtype == "F32") return f32_bytes(values);
  std::vector<uint16_t> bits;
  for (const float v : values)
    bits.push_back(dtype == "F16" ? exact_half_bits(v) : exact_bf16_bits(v));
  return u16_bytes(bits);
}

// The tensors of a GPT-2 HF file with hf_value() contents; tensor i gets id i.
std::vector<HandTensor> hand_tensors(const ModelConfig& c, const std::string& prefix,
                                     const std::string& dtype) {
  std::vector<HandTensor> tensors;
  const std::vector<HfSpec> specs = hf_specs(c);
  for (size_t id = 0; id < specs.size(); ++id) {
    std::vector<float> values(static_cast<size_t>(numel(specs[id].shape)));
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = hf_value(static_cast<int>(id), static_cast<int64_t>(i));
    tensors.push_back({prefix + specs[id].name, dtype, specs[id].shape, encode(values, dtype)});
  }
  return tensors;
}

// Where HF element (id, index) must land in ParameterLayout order, worked out per name here.
void expect_params_hold_hf_values(const ModelConfig& c, const std::vector<float>& params) {
  const ParameterLayout layout = ParameterLayout::for_config(c);
  const int64_t C = c.channels;
  const std::vector<HfSpec> specs = hf_specs(c);
  int64_t mismatches = 0;
  for (size_t id = 0; id < specs.size(); ++id) {
    const std::string& name = specs[id].name;
    const int64_t n = numel(specs[id].shape);
    int layer = 0;
    std::string field = name;
    if (name.rfind("h.", 0) == 0) {
      const size_t dot = name.find('.', 2);
      layer = std::stoi(name.substr(2, dot - 2));
      field = name.substr(dot + 1);
    }
    // field -> (tensor, elements per layer, transposed (in, out) = shape)
    static const std::map<std::string, std::pair<int, bool>> kFields = {
        {"wte.weight", {kWte, false}},         {"wpe.weight", {kWpe, false}},
        {"ln_1.weight", {kLn1w, false}},       {"ln_1.bias", {kLn1b, false}},
        {"attn.c_attn.weight", {kQkvw, true}}, {"attn.c_attn.bias", {kQkvb, false}},
        {"attn.c_proj.weight", {kAttprojw, true}}, {"attn.c_proj.bias", {kAttprojb, false}},
        {"ln_2.weight", {kLn2w, false}},       {"ln_2.bias", {kLn2b, false}},
        {"mlp.c_fc.weight", {kFcw, true}},     {"mlp.c_fc.bias", {kFcb, false}},
        {"mlp.c_proj.weight", {kFcprojw, true}}, {"mlp.c_proj.bias", {kFcprojb, false}},
        {"ln_f.weight", {kLnfw, false}},       {"ln_f.bias", {kLnfb, false}}};
    const auto [tensor, transposed] = kFields.at(field);
    const size_t per_layer = ParameterLayout::is_per_layer(tensor)
                                 ? layout.sizes[tensor] / static_cast<size_t>(c.num_layers)
                                 : 0;
    const float* base = params.data() + layout.offsets[tensor] + layer * per_layer;
    for (int64_t k = 0; k < n; ++k) {
      int64_t ours = k;
      if (transposed) {  // HF (in, out) element [i][o] is ours [o][i]
        const int64_t out = specs[id].shape[1], in = specs[id].shape[0];
        const int64_t i = k / out, o = k % out;
        ours = o * in + i;
      }
      const float expected = hf_value(static_cast<int>(id), k);
      if (base[ours] != expected && ++mismatches <= 5)
        ADD_FAILURE() << name << " element " << k << ": " << base[ours] << " != " << expected;
    }
  }
  // wte's padding rows are zero.
  for (size_t i = static_cast<size_t>(c.vocab_size) * C; i < layout.sizes[kWte]; ++i)
    if (params[layout.offsets[kWte] + i] != 0.0f && ++mismatches <= 5)
      ADD_FAILURE() << "wte padding element " << i << " is " << params[layout.offsets[kWte] + i];
  EXPECT_EQ(mismatches, 0);
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { folder_ = scratch_folder("hf_checkpoint"); }
  void TearDown() override { fs::remove_all(folder_); }

  /// A directory holding config.json and model.safetensors with the given contents.
  std::string hf_dir(const std::string& config_json, const std::string& safetensors,
                     const std::string& name = "model") {
    const std::string dir = folder_ + "/" + name;
    fs::create_directories(dir);
    write_bytes(dir + "/config.json", config_json);
    write_bytes(dir + "/model.safetensors", safetensors);
    return dir;
  }

  /// The message of read_hf_model's gpt2::Error on dir.
  static std::string read_error(const std::string& dir) {
    try {
      read_hf_model(dir);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  std::string folder_;
};

const ModelConfig kTiny = config_of(2, 8, 2, 5, 11);

TEST_F(HfCheckpointTest, HandWrittenGpt2LmHeadModelDirectoryReads) {
  for (const char* dtype : {"F32", "F16", "BF16"}) {
    std::vector<HandTensor> tensors = hand_tensors(kTiny, "transformer.", dtype);
    // Buffers of older transformers, ignored whatever their dtype; lm_head tied to wte.
    const int64_t T = kTiny.max_seq_len;
    tensors.push_back({"transformer.h.0.attn.bias", "F32", {1, 1, T, T},
                       f32_bytes(std::vector<float>(T * T, 1.0f))});
    tensors.push_back({"transformer.h.1.attn.bias", "BOOL", {1, 1, T, T},
                       std::string(T * T, '\1')});
    tensors.push_back({"transformer.h.0.attn.masked_bias", "F32", {}, f32_bytes({-1e4f})});
    tensors.push_back({"lm_head.weight", dtype, tensors[0].shape, tensors[0].bytes});
    std::reverse(tensors.begin(), tensors.end());  // a data order unlike the layout's
    std::swap(tensors[3], tensors[11]);
    const std::string dir = hf_dir(hub_config_json(kTiny),
                                   assemble_safetensors(tensors, R"({"format":"pt"})"), dtype);
    const HfModel model = read_hf_model(dir);
    EXPECT_EQ(model.config, kTiny) << dtype;
    EXPECT_EQ(model.config.padded_vocab_size, 128);
    ASSERT_EQ(model.params.size(), ParameterLayout::for_config(kTiny).total);
    expect_params_hold_hf_values(kTiny, model.params);
    EXPECT_EQ(read_hf_model_config(dir), kTiny);
  }
}

TEST_F(HfCheckpointTest, Gpt2ModelNamesWithoutPrefixReadTheSame) {
  const std::string dir = hf_dir(hub_config_json(kTiny),
                                 assemble_safetensors(hand_tensors(kTiny, "", "F32")));
  expect_params_hold_hf_values(kTiny, read_hf_model(dir).params);
}

// Written files hold, element by element, HF's (in, out) Conv1D orientation of this project's
// (out, in) weights, and everything else where hf_specs() says.
TEST_F(HfCheckpointTest, WrittenConv1dWeightsAreTransposedElementByElement) {
  const ParameterLayout layout = ParameterLayout::for_config(kTiny);
  std::vector<float> params(layout.total);
  for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i);  // distinct
  const std::string dir = folder_ + "/written/nested";  // created by the writer
  write_hf_model(dir, kTiny, params.data());

  SafetensorsReader reader(dir + "/model.safetensors");
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.tensors().size(), hf_specs(kTiny).size());  // no lm_head, no buffers
  const int64_t C = kTiny.channels;
  const auto check = [&](const std::string& name, int tensor, int layer, int64_t in,
                         int64_t out) {
    const SafetensorsTensor* t = reader.find("transformer." + name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, (std::vector<int64_t>{in, out})) << name;
    std::vector<float> values(static_cast<size_t>(in * out));
    SafetensorsReader fresh(dir + "/model.safetensors");
    fresh.read_f32(*fresh.find(t->name), values.data());
    const float* ours = params.data() + layout.offsets[tensor] + layer * in * out;
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o)
        ASSERT_EQ(values[i * out + o], ours[o * in + i]) << name << " [" << i << "][" << o << "]";
  };
  for (int l = 0; l < kTiny.num_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    check(h + "attn.c_attn.weight", kQkvw, l, C, 3 * C);
    check(h + "attn.c_proj.weight", kAttprojw, l, C, C);
    check(h + "mlp.c_fc.weight", kFcw, l, C, 4 * C);
    check(h + "mlp.c_proj.weight", kFcprojw, l, 4 * C, C);
  }
  // wte without its padding rows; a bias as is.
  std::vector<float> wte(static_cast<size_t>(kTiny.vocab_size * C));
  SafetensorsReader fresh(dir + "/model.safetensors");
  const SafetensorsTensor* wte_tensor = fresh.find("transformer.wte.weight");
  ASSERT_NE(wte_tensor, nullptr);
  EXPECT_EQ(wte_tensor->shape, (std::vector<int64_t>{kTiny.vocab_size, C}));
  fresh.read_f32(*wte_tensor, wte.data());
  EXPECT_TRUE(std::equal(wte.begin(), wte.end(), params.begin() + layout.offsets[kWte]));
  std::vector<float> bias(static_cast<size_t>(3 * C));
  SafetensorsReader fresh_again(dir + "/model.safetensors");
  fresh_again.read_f32(*fresh_again.find("transformer.h.1.attn.c_attn.bias"), bias.data());
  EXPECT_TRUE(std::equal(bias.begin(), bias.end(),
                         params.begin() + layout.offsets[kQkvb] + 3 * C));

  // Reading back gives the parameters, except wte's padding rows, which are zeros.
  const HfModel back = read_hf_model(dir);
  for (size_t i = static_cast<size_t>(kTiny.vocab_size) * C; i < layout.sizes[kWte]; ++i)
    params[layout.offsets[kWte] + i] = 0.0f;
  EXPECT_EQ(back.params, params);
}

TEST_F(HfCheckpointTest, WrittenConfigHasTheFieldsTransformersReads) {
  const ModelConfig config = config_of(3, 48, 3, 64, 50257);
  std::vector<float> params(ParameterLayout::for_config(config).total, 0.0f);
  write_hf_model(folder_ + "/out", config, params.data());
  const nlohmann::json json = nlohmann::json::parse(read_bytes(folder_ + "/out/config.json"));
  EXPECT_EQ(json.at("model_type"), "gpt2");
  EXPECT_EQ(json.at("architectures"), nlohmann::json::parse(R"(["GPT2LMHeadModel"])"));
  EXPECT_EQ(json.at("activation_function"), "gelu_new");
  EXPECT_EQ(json.at("n_embd"), 48);
  EXPECT_EQ(json.at("n_head"), 3);
  EXPECT_EQ(json.at("n_layer"), 3);
  EXPECT_EQ(json.at("n_positions"), 64);
  EXPECT_EQ(json.at("n_ctx"), 64);
  EXPECT_EQ(json.at("vocab_size"), 50257);
  EXPECT_EQ(json.at("layer_norm_epsilon"), 1e-5);
  EXPECT_EQ(json.at("initializer_range"), 0.02);
  EXPECT_EQ(json.at("bos_token_id"), 50256);
  EXPECT_EQ(json.at("eos_token_id"), 50256);
  EXPECT_TRUE(json.at("n_inner").is_null());
  EXPECT_EQ(json.at("tie_word_embeddings"), true);
  for (const char* dropout : {"attn_pdrop", "embd_pdrop", "resid_pdrop"})
    EXPECT_EQ(json.at(dropout), 0.1) << dropout;
  EXPECT_EQ(read_hf_model_config(folder_ + "/out"), config);
}

// llm.c file -> HF directory -> llm.c file, bit for bit (random values, NaN payloads included).
void expect_bin_hf_bin_identical(const ModelConfig& config, const std::string& folder) {
  const ParameterLayout layout = ParameterLayout::for_config(config);
  std::vector<float> params(layout.total);
  Rng rng(1234);
  // Uniform in (-0.5, 0.5) with all 24 bits of mantissa in play.
  for (float& p : params) p = static_cast<float>(static_cast<int32_t>(rng.next_u64() >> 32)) * 0x1.0p-32f;
  const uint32_t nan_bits = 0x7FC01234u;
  std::memcpy(&params[layout.offsets[kLn1b] + 1], &nan_bits, sizeof nan_bits);
  params[layout.offsets[kFcprojw] + 3] = -0.0f;
  // llm.c's padding rows of wte are zero (init and training keep them so).
  std::fill(params.begin() + layout.offsets[kWte] + static_cast<size_t>(config.vocab_size) *
                                                        config.channels,
            params.begin() + layout.offsets[kWte] + layout.sizes[kWte], 0.0f);
  const std::string bin = folder + "/in.bin", dir = folder + "/hf", back = folder + "/back.bin";
  write_model_checkpoint(bin, config, params.data());
  const ModelCheckpoint original = read_model_checkpoint(bin);
  write_hf_model(dir, original.config, original.params.data());
  const HfModel hf = read_hf_model(dir);
  ASSERT_EQ(hf.config, config);
  write_model_checkpoint(back, hf.config, hf.params.data());
  EXPECT_TRUE(read_bytes(bin) == read_bytes(back)) << config.describe();
}

TEST_F(HfCheckpointTest, BinToHfToBinIsBitIdenticalAtD2Shapes) {
  expect_bin_hf_bin_identical(model_config_from_preset("d2", 1024), folder_);
}

TEST_F(HfCheckpointTest, BinToHfToBinIsBitIdenticalAtD12LayerShapes) {
  // d12's layer shapes (C=768, NH=12; the transposes of 768x2304, 768x768, 768x3072, 3072x768)
  // in two layers, a 1000-token vocabulary and maxT 64: all twelve layers would write 1 GB
  // through fsync, about 10 s here, and test nothing the second layer does not.
  expect_bin_hf_bin_identical(config_of(2, 768, 12, 64, 1000), folder_);
}

TEST_F(HfCheckpointTest, BadConfigFieldsAreRefusedNamingTheField) {
  const std::string weights = assemble_safetensors(hand_tensors(kTiny, "transformer.", "F32"));
  const std::string good = hub_config_json(kTiny);
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  const struct {
    std::string config;
    std::string expected;
  } cases[] = {
      {replaced("\"gelu_new\"", "\"relu\""), "field 'activation_function' is \"relu\""},
      {replaced("\"model_type\": \"gpt2\"", "\"model_type\": \"gpt_neo\""),
       "field 'model_type' is \"gpt_neo\""},
      {replaced("\"model_type\": \"gpt2\",\n", ""), "missing field 'model_type'"},
      {replaced("\"n_layer\": 2,\n", ""), "missing field 'n_layer'"},
      {replaced("\"n_head\": 2", "\"n_head\": 3"),
       "field 'n_embd' (8) is not a multiple of field 'n_head' (3)"},
      {replaced("\"n_embd\": 8", "\"n_embd\": \"8\""), "field 'n_embd' is \"8\""},
      {replaced("\"n_embd\": 8", "\"n_embd\": 8.0"), "field 'n_embd' is 8.0"},
      {replaced("\"vocab_size\": 11", "\"vocab_size\": 0"), "field 'vocab_size' is 0"},
      {replaced("\"n_positions\": 5", "\"n_positions\": 3000000000"),
       "field 'n_positions' is 3000000000"},
      {replaced("\"n_ctx\": 5", "\"n_ctx\": 6"), "field 'n_ctx' is 6 but field 'n_positions' is 5"},
      {replaced("\"n_embd\": 8,", "\"n_embd\": 8, \"n_embd\": 16,"), "duplicate key 'n_embd'"},
      {replaced("1e-05", "1e-06"), "field 'layer_norm_epsilon' is 1e-06"},
      {replaced("\"GPT2LMHeadModel\"", "\"GPT2ForSequenceClassification\""),
       "field 'architectures' is [\"GPT2ForSequenceClassification\"]"},
      {replaced("\"attn_pdrop\"", "\"n_inner\": 16, \"attn_pdrop\""), "field 'n_inner' is 16"},
      {replaced("\"attn_pdrop\"", "\"tie_word_embeddings\": false, \"attn_pdrop\""),
       "field 'tie_word_embeddings' is false"},
      {replaced("\"attn_pdrop\"", "\"scale_attn_by_inverse_layer_idx\": true, \"attn_pdrop\""),
       "field 'scale_attn_by_inverse_layer_idx' is true"},
      {replaced("\"attn_pdrop\"", "\"add_cross_attention\": true, \"attn_pdrop\""),
       "field 'add_cross_attention' is true"},
      {"[1, 2]", "not a JSON object"},
      {"{\"n_embd\": ", "invalid JSON"},
  };
  int index = 0;
  for (const auto& c : cases) {
    const std::string dir = hf_dir(c.config, weights, "case" + std::to_string(index++));
    const std::string message = read_error(dir);
    EXPECT_EQ(message.rfind(dir + "/config.json: ", 0), 0u) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << "message: " << message << "\nexpected: " << c.expected;
  }
  // Accepted variations: gelu_pytorch_tanh (the same function), n_inner null or 4C, no n_ctx.
  for (const std::string& config :
       {replaced("\"gelu_new\"", "\"gelu_pytorch_tanh\""),
        replaced("\"attn_pdrop\"", "\"n_inner\": 32, \"attn_pdrop\""),
        replaced("\"attn_pdrop\"", "\"n_inner\": null, \"attn_pdrop\""),
        replaced("\"n_ctx\": 5,\n", "")}) {
    EXPECT_NO_THROW(read_hf_model(hf_dir(config, weights, "ok" + std::to_string(index++))))
        << config;
  }
}

// config.json's sizes are checked against the tensors present before they size any table or
// buffer: more layers than the file holds is refused naming config.json and n_layer, a width
// or a context the embeddings do not have names the tensor and the config's fields. (At 1e8 or
// 2^31 - 1 layers the per-layer tables alone took many GB: tests/tools/convert_tool_test.cpp
// runs those under an address-space limit.)
TEST_F(HfCheckpointTest, ConfigSizesBeyondTheTensorsAreRefusedBeforeAllocating) {
  const std::string weights = assemble_safetensors(hand_tensors(kTiny, "transformer.", "F32"));
  const auto replaced = [&](const std::string& from, const std::string& to,
                            std::string text = hub_config_json(kTiny)) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  int index = 0;
  for (const char* layers : {"3", "4096"}) {
    const std::string dir =
        hf_dir(replaced("\"n_layer\": 2", std::string("\"n_layer\": ") + layers), weights,
               "layers" + std::to_string(index++));
    EXPECT_EQ(read_error(dir),
              dir + "/config.json: field 'n_layer' is " + layers + " but " + dir +
                  "/model.safetensors holds the tensors of 2 layer(s), h.0 to h.1");
  }
  const std::string wide = hf_dir(replaced("\"n_embd\": 8", "\"n_embd\": 2147483646"), weights,
                                  "wide");
  EXPECT_NE(read_error(wide).find("tensor 'transformer.wte.weight' has shape [11, 8] but "
                                  "config.json (n_embd 2147483646"),
            std::string::npos)
      << read_error(wide);
  const std::string long_context =
      hf_dir(replaced("\"n_positions\": 5", "\"n_positions\": 2000000000",
                      replaced("\"n_ctx\": 5,\n", "")),
             weights, "long");
  EXPECT_NE(read_error(long_context).find("tensor 'transformer.wpe.weight' has shape [5, 8]"),
            std::string::npos)
      << read_error(long_context);
}

TEST_F(HfCheckpointTest, BadTensorsAreRefusedNamingTheTensor) {
  const std::string config = hub_config_json(kTiny);
  const auto with = [&](const std::function<void(std::vector<HandTensor>&)>& change) {
    std::vector<HandTensor> tensors = hand_tensors(kTiny, "transformer.", "F32");
    change(tensors);
    return assemble_safetensors(tensors);
  };
  const auto named = [](std::vector<HandTensor>& tensors, const std::string& name) -> HandTensor& {
    for (HandTensor& t : tensors)
      if (t.name == name) return t;
    ADD_FAILURE() << name;
    return tensors[0];
  };
  const int64_t C = kTiny.channels;
  const struct {
    std::string weights;
    std::string expected;
  } cases[] = {
      {with([&](auto& t) {
         t.erase(std::find_if(t.begin(), t.end(), [](const HandTensor& x) {
           return x.name == "transformer.h.1.ln_2.bias";
         }));
       }),
       "missing tensor 'transformer.h.1.ln_2.bias'"},
      // The classic mistake: c_attn stored (out, in) = (3C, C) as in this project's layout.
      {with([&](auto& t) { named(t, "transformer.h.0.attn.c_attn.weight").shape = {3 * C, C}; }),
       "tensor 'transformer.h.0.attn.c_attn.weight' has shape [24, 8] but config.json"},
      {with([&](auto& t) { named(t, "transformer.wpe.weight").shape = {4, C + 2}; }),
       "tensor 'transformer.wpe.weight' has shape [4, 10]"},
      {with([&](auto& t) {
         HandTensor& x = named(t, "transformer.ln_f.bias");
         x.dtype = "I32";
       }),
       "tensor 'transformer.ln_f.bias' has dtype I32, expected F32, F16 or BF16"},
      {with([&](auto& t) {
         HandTensor& x = named(t, "transformer.ln_f.bias");
         x.dtype = "F64";
         x.bytes += x.bytes;
       }),
       "tensor 'transformer.ln_f.bias' has dtype F64"},
      {with([&](auto& t) { t.push_back({"transformer.h.2.ln_1.weight", "F32", {C}, f32_bytes(std::vector<float>(C))}); }),
       "unexpected tensor 'transformer.h.2.ln_1.weight'"},
      {with([&](auto& t) { t.push_back({"score.weight", "F32", {2, C}, f32_bytes(std::vector<float>(2 * C))}); }),
       "unexpected tensor 'score.weight'"},
      {with([&](auto& t) { t.push_back({"h.0.ln_1.weight", "F32", {C}, f32_bytes(std::vector<float>(C))}); }),
       "unexpected tensor 'h.0.ln_1.weight'"},  // mixed prefixes
      {with([&](auto& t) {
         for (HandTensor& x : t) x.name = x.name.substr(std::string("transformer.").size());
         named(t, "wte.weight").name = "embed.weight";
       }),
       "missing tensor 'transformer.wte.weight' (nor 'wte.weight'"},
      {with([&](auto& t) {
         HandTensor lm_head = named(t, "transformer.wte.weight");
         lm_head.name = "lm_head.weight";
         std::vector<float> values(static_cast<size_t>(numel(lm_head.shape)));
         for (size_t i = 0; i < values.size(); ++i) values[i] = hf_value(0, static_cast<int64_t>(i));
         values[2 * C + 3] += 1.0f;
         lm_head.bytes = f32_bytes(values);
         t.push_back(lm_head);
       }),
       "tensor 'lm_head.weight' differs from 'transformer.wte.weight' (first at [2, 3]"},
      {with([&](auto& t) {
         HandTensor lm_head = named(t, "transformer.wte.weight");
         lm_head.name = "lm_head.weight";
         lm_head.shape = {kTiny.vocab_size + 1, C};
         lm_head.bytes += f32_bytes(std::vector<float>(C));
         t.push_back(lm_head);
       }),
       "tensor 'lm_head.weight' has shape [12, 8]"},
  };
  int index = 0;
  for (const auto& c : cases) {
    const std::string dir = hf_dir(config, c.weights, "case" + std::to_string(index++));
    const std::string message = read_error(dir);
    EXPECT_EQ(message.rfind(dir + "/model.safetensors: ", 0), 0u) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << "message: " << message << "\nexpected: " << c.expected;
    // The same problems are found from the header alone, before any tensor is read.
    if (c.expected.find("differs from") == std::string::npos) {
      EXPECT_THROW(read_hf_model_config(dir), Error) << c.expected;
    }
  }
}

TEST_F(HfCheckpointTest, MissingFilesAndDirectoryArguments) {
  const std::string config = hub_config_json(kTiny);
  const std::string dir = hf_dir(config, "");
  fs::remove(dir + "/model.safetensors");
  EXPECT_NE(read_error(dir).find(dir + "/model.safetensors: no such file"), std::string::npos);
  write_bytes(dir + "/model.safetensors.index.json", "{}");
  EXPECT_NE(read_error(dir).find("sharded checkpoint"), std::string::npos);
  fs::remove(dir + "/model.safetensors.index.json");
  write_bytes(dir + "/pytorch_model.bin", "x");
  EXPECT_NE(read_error(dir).find("pytorch_model.bin, which is not read"), std::string::npos);

  EXPECT_EQ(hf_model_dir_of(dir), dir);
  EXPECT_EQ(hf_model_dir_of("hf:" + dir), dir);
  EXPECT_EQ(hf_model_dir_of("d12"), "");
  EXPECT_EQ(hf_model_dir_of(folder_), "");  // a directory without config.json
  EXPECT_EQ(hf_model_dir_of(dir + "/config.json"), "");  // a file
  try {
    hf_model_dir_of("hf:" + folder_ + "/nowhere");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), folder_ + "/nowhere: no such directory");
  }
  try {
    hf_model_dir_of("hf:" + folder_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no config.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(hf_model_dir_of("hf:" + dir + "/config.json"), Error);
  EXPECT_THROW(hf_model_dir_of("hf:"), UsageError);
}

}  // namespace
}  // namespace gpt2
