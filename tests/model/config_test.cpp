/**
 * @file config_test.cpp
 * @brief Tests for model/config.h and the sizes of model/parameters.h.
 *
 * Expected parameter counts come from the layout formula
 *   Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C
 * (per layer: ln1 2C, qkv 3C^2 + 3C, attproj C^2 + C, ln2 2C, fc 4C^2 + 4C, fcproj 4C^2 + C),
 * worked out by hand below for gpt2 (124,475,904, the number llm.c prints) and gpt2-xl; the
 * other presets are checked against the formula evaluated independently of ParameterLayout.
 * At maxT = 131072 the sizes pass 2^32 bytes, so they are compared as exact 64-bit values.
 */
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "base/error.h"
#include "model/config.h"
#include "model/cpu_model.h"
#include "model/model.h"
#include "model/parameters.h"

namespace gpt2 {
namespace {

uint64_t formula_parameters(uint64_t Vp, uint64_t C, uint64_t L, uint64_t maxT) {
  return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
}

TEST(ModelConfig, DepthPresetsFollowTheDnRule) {
  for (int depth : {1, 2, 6, 12, 24, 48}) {
    const ModelConfig c = model_config_from_preset("d" + std::to_string(depth), 1024);
    EXPECT_EQ(c.num_layers, depth);
    EXPECT_EQ(c.channels, 64 * depth);
    EXPECT_EQ(c.num_heads, depth);
    EXPECT_EQ(c.head_size(), 64);
    EXPECT_EQ(c.vocab_size, 50257);
    EXPECT_EQ(c.padded_vocab_size, 50304);
    EXPECT_EQ(c.max_seq_len, 1024);
  }
}

TEST(ModelConfig, AliasesHaveTheGpt2Shapes) {
  struct Expected {
    const char* name;
    int L, C, NH;
  };
  for (const Expected& e : {Expected{"gpt2", 12, 768, 12}, Expected{"gpt2-medium", 24, 1024, 16},
                            Expected{"gpt2-large", 36, 1280, 20}, Expected{"gpt2-xl", 48, 1600, 25}}) {
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(is_model_preset(e.name));
    const ModelConfig c = model_config_from_preset(e.name, 1024);
    EXPECT_EQ(c.num_layers, e.L);
    EXPECT_EQ(c.channels, e.C);
    EXPECT_EQ(c.num_heads, e.NH);
    EXPECT_EQ(c.head_size(), 64);
  }
  EXPECT_EQ(model_config_from_preset("gpt2", 1024), model_config_from_preset("d12", 1024));
}

TEST(ModelConfig, ParameterCountsAt1024) {
  // gpt2 by hand: 50304*768 = 38,633,472 (wte) + 1024*768 = 786,432 (wpe)
  //   + 12 * (12*768^2 + 13*768) = 12 * 7,087,872 = 85,054,464 + 2*768 = 1,536.
  EXPECT_EQ(ParameterLayout::for_config(model_config_from_preset("gpt2", 1024)).total,
            size_t{124475904});
  // gpt2-xl by hand: 50304*1600 = 80,486,400 + 1024*1600 = 1,638,400
  //   + 48 * (12*1600^2 + 13*1600) = 48 * 30,740,800 = 1,475,558,400 + 3,200.
  EXPECT_EQ(ParameterLayout::for_config(model_config_from_preset("gpt2-xl", 1024)).total,
            size_t{1557686400});
  for (const char* name : {"d1", "d6", "gpt2-medium", "gpt2-large", "d48"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = model_config_from_preset(name, 1024);
    EXPECT_EQ(ParameterLayout::for_config(c).total,
              formula_parameters(c.padded_vocab_size, c.channels, c.num_layers, 1024));
  }
}

TEST(ModelConfig, LayoutOffsetsAreContiguousInLlmcOrder) {
  const ModelConfig c = model_config_from_preset("gpt2", 1024);
  const ParameterLayout layout = ParameterLayout::for_config(c);
  EXPECT_EQ(layout.offsets[kWte], 0u);
  EXPECT_EQ(layout.sizes[kWte], size_t{50304} * 768);
  EXPECT_EQ(layout.offsets[kWpe], size_t{50304} * 768);
  EXPECT_EQ(layout.sizes[kQkvw], size_t{12} * 3 * 768 * 768);
  EXPECT_EQ(layout.sizes[kFcprojw], size_t{12} * 768 * 4 * 768);
  for (int t = 1; t < kNumParamTensors; ++t)
    EXPECT_EQ(layout.offsets[t], layout.offsets[t - 1] + layout.sizes[t - 1]) << t;
  EXPECT_EQ(layout.offsets[kLnfb] + layout.sizes[kLnfb], layout.total);
  EXPECT_STREQ(ParameterLayout::name(kWte), "wte");
  EXPECT_STREQ(ParameterLayout::name(kLnfb), "lnfb");
}

TEST(ModelConfig, SizesAtLongContextAreExact64Bit) {
  const int kMaxT = 131072;
  const ModelConfig gpt2 = model_config_from_preset("gpt2", kMaxT);
  const ParameterLayout small = ParameterLayout::for_config(gpt2);
  EXPECT_EQ(small.sizes[kWpe], size_t{100663296});  // 131072 * 768
  EXPECT_EQ(small.total, size_t{224352768});         // 124,475,904 - 786,432 + 100,663,296

  const ModelConfig xl = model_config_from_preset("gpt2-xl", kMaxT);
  const ParameterLayout big = ParameterLayout::for_config(xl);
  EXPECT_EQ(big.sizes[kWpe], size_t{209715200});  // 131072 * 1600
  EXPECT_EQ(big.total, size_t{1765763200});       // 1,557,686,400 - 1,638,400 + 209,715,200
  EXPECT_EQ(big.total * sizeof(float), size_t{7063052800});  // > 2^32
  EXPECT_EQ(big.total, formula_parameters(50304, 1600, 48, kMaxT));

  // The naive attention buffer at full context: L*B*NH*T*T fp32 = 12*1*12*2^34*4 bytes.
  ModelOptions options;
  options.config = gpt2;
  options.batch_size = 1;
  options.seq_len = kMaxT;
  options.attention = AttentionKind::kNaive;
  const MemoryPlan plan = plan_cpu_model_memory(options);
  EXPECT_EQ(plan.group_total("attention") - size_t{12} * kMaxT * 768 * 4,
            size_t{9895604649984});
  // logits (B,T,Vp): 131072 * 50304 * 4 bytes
  bool found_logits = false;
  for (const MemoryItem& item : plan.items) {
    if (item.name == "logits (B,T,Vp)") {
      found_logits = true;
      EXPECT_EQ(item.bytes, size_t{26373783552});
    }
  }
  EXPECT_TRUE(found_logits);
}

TEST(ModelConfig, BadNamesAndLengthsAreUsageErrors) {
  for (const char* name : {"", "d", "d0", "dx", "d12x", "gpt3", "gpt2-small", "D12", "d-1"}) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(is_model_preset(name));
    EXPECT_THROW(model_config_from_preset(name, 1024), UsageError);
  }
  EXPECT_THROW(model_config_from_preset("gpt2", 0), UsageError);
  EXPECT_THROW(model_config_from_preset("gpt2", -5), UsageError);
}

TEST(ModelConfig, ValidateRejectsInconsistentConfigs) {
  ModelConfig ok = model_config_from_preset("d2", 64);
  EXPECT_NO_THROW(validate_config(ok));
  ModelConfig c = ok;
  c.channels = 130;  // not a multiple of NH
  c.num_heads = 3;
  EXPECT_THROW(validate_config(c), Error);
  c = ok;
  c.padded_vocab_size = c.vocab_size - 1;
  EXPECT_THROW(validate_config(c), Error);
  c = ok;
  c.num_layers = 0;
  EXPECT_THROW(validate_config(c), Error);
  c = ok;
  c.max_seq_len = 0;
  EXPECT_THROW(validate_config(c), Error);
  EXPECT_EQ(padded_vocab(50257), 50304);
  EXPECT_EQ(padded_vocab(128), 128);
  EXPECT_EQ(padded_vocab(129), 256);
}

TEST(ModelEnums, NamesAndNoCudaStub) {
  EXPECT_STREQ(to_string(AttentionKind::kNaive), "naive");
  EXPECT_STREQ(to_string(AttentionKind::kFlash), "flash");
  EXPECT_STREQ(to_string(DeviceKind::kCpu), "cpu");
  EXPECT_STREQ(to_string(DeviceKind::kCuda), "cuda");
  EXPECT_STREQ(to_string(Precision::kFp32), "fp32");
  EXPECT_STREQ(to_string(Precision::kBf16), "bf16");
#ifndef GPT2_WITH_CUDA_BACKEND
  std::string why;
  EXPECT_FALSE(cuda_backend_available(&why));
  EXPECT_NE(why.find("no CUDA backend"), std::string::npos) << why;
  ModelOptions options;
  EXPECT_THROW(make_cuda_model(options), Error);
#endif
}

}  // namespace
}  // namespace gpt2
