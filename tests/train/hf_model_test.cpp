// gpt2-train --model hf:DIR on the CPU: a Hugging Face directory trains, and gives the same
// losses, bit for bit, as the llm.c file it was converted from (the parameters are the same
// floats); a bad directory exits 1 before --out is written, a --max-seq-len that disagrees 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/json.h"
#include "model/checkpoint.h"
#include "model/hf_checkpoint.h"
#include "model/parameters.h"
#include "train_test_util.h"

namespace gpt2 {
namespace {

using testing::embedded_train_data;
using testing::embedded_val_data;
using testing::read_metrics;
using testing::run_trainer;
using testing::scratch_dir;

std::vector<std::string> two_steps(const std::string& model, const std::string& out) {
  return {"--device", "cpu", "--model", model, "--batch-size", "2", "--seq-len", "32",
          "--steps", "2", "--val-every", "0", "--train-data", embedded_train_data(),
          "--val-data", embedded_val_data(), "--out", out};
}

TEST(HfModel, TrainsFromAHuggingFaceDirectoryLikeFromItsLlmcFile) {
  const std::string dir = scratch_dir();
  const ModelConfig config = model_config_from_preset("d1", 64);
  std::vector<float> params(ParameterLayout::for_config(config).total);
  init_parameters(params.data(), config, 7);
  write_model_checkpoint(dir + "/d1.bin", config, params.data());
  write_hf_model(dir + "/hf", config, params.data());

  const auto from_bin = run_trainer(two_steps(dir + "/d1.bin", dir + "/out_bin"));
  ASSERT_EQ(from_bin.exit_code, 0) << from_bin.output;
  for (const std::string& model : {"hf:" + dir + "/hf", dir + "/hf"}) {
    const std::string out = dir + "/out_" + std::to_string(model.size());
    const auto from_hf = run_trainer(two_steps(model, out));
    ASSERT_EQ(from_hf.exit_code, 0) << from_hf.output;
    EXPECT_NE(from_hf.output.find(model + " (Hugging Face): " + config.describe()),
              std::string::npos) << from_hf.output;
    const std::vector<Json> bin_rows = read_metrics(dir + "/out_bin/metrics.jsonl");
    const std::vector<Json> hf_rows = read_metrics(out + "/metrics.jsonl");
    ASSERT_EQ(hf_rows.size(), 2u);
    ASSERT_EQ(bin_rows.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(hf_rows[i].at("loss"), bin_rows[i].at("loss")) << model << " step " << i + 1;
      EXPECT_EQ(hf_rows[i].at("grad_norm"), bin_rows[i].at("grad_norm")) << model;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(HfModel, BadDirectoriesExitOneBeforeTouchingOut) {
  const std::string dir = scratch_dir();
  const ModelConfig config = model_config_from_preset("d1", 64);
  std::vector<float> params(ParameterLayout::for_config(config).total, 0.0f);
  write_hf_model(dir + "/hf", config, params.data());
  const auto context = run_trainer(
      {"--device", "cpu", "--model", "hf:" + dir + "/hf", "--max-seq-len", "128"});
  EXPECT_EQ(context.exit_code, 2) << context.output;
  EXPECT_NE(context.output.find("--max-seq-len 128 disagrees"), std::string::npos)
      << context.output;
  std::filesystem::resize_file(dir + "/hf/model.safetensors", 64);  // truncated

  const auto truncated = run_trainer(two_steps("hf:" + dir + "/hf", dir + "/out"));
  EXPECT_EQ(truncated.exit_code, 1) << truncated.output;
  EXPECT_NE(truncated.output.find(dir + "/hf/model.safetensors: "), std::string::npos)
      << truncated.output;
  const auto missing = run_trainer(two_steps("hf:" + dir + "/none", dir + "/out"));
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find(dir + "/none: no such directory"), std::string::npos)
      << missing.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpt2
