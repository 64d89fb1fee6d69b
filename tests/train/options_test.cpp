// gpt2-train's command line in-process: defaults per device, resolution against the model's
// context and the batch arithmetic, and which problems are usage errors (exit 2) versus
// machine/file errors (exit 1). The real binary's exit codes are covered by cli_test.cpp.
#include "train/options.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "parallel/nccl_communicator.h"
#include "model/checkpoint.h"
#include "model/hf_checkpoint.h"
#include "model/parameters.h"

namespace gpt2 {
namespace {

DeviceAvailability no_gpu() { return {false, "no CUDA device is visible (test)"}; }
DeviceAvailability with_gpu() { return {true, ""}; }

TrainConfig resolve(const std::vector<std::string>& args, const DeviceAvailability& devices) {
  return resolve_train_config(parse_command_line(args), devices);
}

std::string usage_message(const std::vector<std::string>& args,
                          const DeviceAvailability& devices = no_gpu()) {
  try {
    resolve(args, devices);
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UsageError";
  return "";
}

TEST(TrainOptions, CpuDefaults) {
  const TrainConfig c = resolve({}, no_gpu());
  EXPECT_EQ(c.device, DeviceKind::kCpu);
  EXPECT_EQ(c.model_name, "d2");
  EXPECT_EQ(c.model.config.num_layers, 2);
  EXPECT_EQ(c.model.config.max_seq_len, 1024);
  EXPECT_EQ(c.model.precision, Precision::kFp32);
  EXPECT_EQ(c.model.attention, AttentionKind::kFlash);
  EXPECT_EQ(c.model.batch_size, 4);
  EXPECT_EQ(c.model.seq_len, 64);
  EXPECT_EQ(c.total_batch_size, 4 * 64);
  EXPECT_EQ(c.grad_accum_steps, 1);
  EXPECT_EQ(c.steps, 50);
  EXPECT_FLOAT_EQ(c.lr_schedule.max_lr, 6e-4f);
  EXPECT_EQ(c.lr_schedule.kind, LrScheduleKind::kCosine);
  EXPECT_EQ(c.lr_schedule.total_steps, 50);
  EXPECT_FLOAT_EQ(c.lr_schedule.final_lr_frac, 0.1f);
  EXPECT_FLOAT_EQ(c.weight_decay, 0.1f);
  EXPECT_FLOAT_EQ(c.grad_clip, 1.0f);
  EXPECT_EQ(c.val_every, 25);
  EXPECT_EQ(c.val_steps, 10);
  EXPECT_EQ(c.sample_every, 0);
  EXPECT_EQ(c.out_dir, "out");
  EXPECT_EQ(c.checkpoint_every, 0);
  EXPECT_FALSE(c.resume);
  EXPECT_EQ(c.on_nonfinite, NonFinitePolicy::kStop);
  EXPECT_EQ(c.seed, 1337u);
  EXPECT_EQ(c.world_size, 1);
  EXPECT_NE(c.train_data.pattern.find("kjv_train.bin"), std::string::npos);
  EXPECT_NE(c.val_data.pattern.find("kjv_val.bin"), std::string::npos);
}

TEST(TrainOptions, AutoPicksCudaWhenAvailableWithItsDefaults) {
  const TrainConfig c = resolve({}, with_gpu());
  EXPECT_EQ(c.device, DeviceKind::kCuda);
  EXPECT_EQ(c.model_name, "d12");
  EXPECT_EQ(c.model.config.channels, 768);
  EXPECT_EQ(c.model.precision, Precision::kBf16);
  EXPECT_EQ(c.model.batch_size, 16);
  EXPECT_EQ(c.model.seq_len, 1024);
  EXPECT_EQ(resolve({"--device", "cpu"}, with_gpu()).device, DeviceKind::kCpu);
}

TEST(TrainOptions, CudaWithoutGpuIsAMachineErrorThatSaysWhy) {
  try {
    resolve({"--device", "cuda"}, no_gpu());
    FAIL() << "no error";
  } catch (const UsageError&) {
    FAIL() << "a missing GPU is not a usage error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device is visible (test)"), std::string::npos);
  }
}

TEST(TrainOptions, GradientAccumulationFromTotalBatch) {
  const TrainConfig c = resolve({"--batch-size", "2", "--seq-len", "32", "--total-batch-size",
                                 "256"}, no_gpu());
  EXPECT_EQ(c.grad_accum_steps, 4);
  EXPECT_EQ(c.total_batch_size, 256);
  const std::string message = usage_message(
      {"--batch-size", "2", "--seq-len", "32", "--total-batch-size", "100"});
  EXPECT_NE(message.find("--total-batch-size 100"), std::string::npos) << message;
  EXPECT_NE(message.find("64"), std::string::npos) << message;
}

TEST(TrainOptions, DataParallelRanksZeroStageAndTotalBatch) {
  const JobRanks two{1, 2};
  const TrainConfig single = resolve({}, no_gpu());
  EXPECT_EQ(single.world_size, 1);
  EXPECT_EQ(single.model.zero_stage, 0);
  const TrainConfig c = resolve_train_config(
      parse_command_line({"--batch-size", "2", "--seq-len", "32"}), no_gpu(), two);
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.model.zero_stage, 1);  // the default with several ranks
  EXPECT_EQ(c.total_batch_size, 2 * 32 * 2);
  EXPECT_EQ(c.grad_accum_steps, 1);
  const TrainConfig zero0 = resolve_train_config(
      parse_command_line({"--zero", "0", "--total-batch-size", "512", "--batch-size", "2",
                          "--seq-len", "32"}),
      no_gpu(), two);
  EXPECT_EQ(zero0.model.zero_stage, 0);
  EXPECT_EQ(zero0.grad_accum_steps, 4);
  for (const char* bad : {"2", "-1", "one", ""})
    EXPECT_THROW(parse_command_line({"--zero", bad}), UsageError) << bad;
  try {
    resolve_train_config(parse_command_line({"--total-batch-size", "256", "--batch-size", "4",
                                             "--seq-len", "64"}),
                         no_gpu(), two);
    ADD_FAILURE() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("B*T*world = 4*64*2 = 512"), std::string::npos)
        << e.what();
  }
}

TEST(TrainOptions, CudaWithSeveralRanksGoesThroughNccl) {
  const JobRanks two{0, 2};
  // Without a GPU: an unusable device, not a bad command line.
  try {
    resolve_train_config(parse_command_line({"--device", "cuda"}), no_gpu(), two);
    ADD_FAILURE() << "no Error";
  } catch (const UsageError& e) {
    ADD_FAILURE() << "a UsageError: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable CUDA device"), std::string::npos) << e.what();
  }
  EXPECT_EQ(resolve_train_config(parse_command_line({}), no_gpu(), two).device,
            DeviceKind::kCpu);
  EXPECT_FALSE(resolve_train_config(parse_command_line({}), no_gpu(), two).nccl);
  if (nccl_backend_available()) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--device", "cuda"}, std::vector<std::string>{}}) {
      const TrainConfig config = resolve_train_config(parse_command_line(args), with_gpu(), two);
      EXPECT_EQ(config.device, DeviceKind::kCuda);
      EXPECT_TRUE(config.nccl);
      EXPECT_FALSE(config.model.overlap_communication);  // measured faster on two H100s
      EXPECT_FALSE(config.model.overlap_gather);
      EXPECT_EQ(config.model.zero_stage, 1);
    }
  } else {
    try {
      resolve_train_config(parse_command_line({"--device", "cuda"}), with_gpu(), two);
      ADD_FAILURE() << "no Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("needs NCCL"), std::string::npos) << e.what();
    }
  }
}

TEST(TrainOptions, CommAndOverlapOptions) {
  EXPECT_FALSE(resolve_train_config(parse_command_line({"--device", "cuda"}), with_gpu()).nccl);
  if (nccl_backend_available()) {
    const TrainConfig one = resolve_train_config(
        parse_command_line({"--device", "cuda", "--comm", "nccl", "--overlap-comm", "1"}),
        with_gpu());
    EXPECT_TRUE(one.nccl);
    EXPECT_TRUE(one.model.overlap_communication);
    EXPECT_TRUE(one.model.overlap_gather);
    EXPECT_EQ(one.model.zero_stage, 0);
  }
  const std::string cpu = usage_message({"--device", "cpu", "--comm", "nccl"});
  EXPECT_NE(cpu.find("--comm nccl needs --device cuda"), std::string::npos) << cpu;
  for (const char* bad : {"mpi", "", "NCCL"})
    EXPECT_THROW(parse_command_line({"--comm", bad}), UsageError) << bad;
  for (const char* bad : {"2", "yes", "", "both"})
    EXPECT_THROW(parse_command_line({"--overlap-comm", bad}), UsageError) << bad;
  const CommandLine reduce_only = parse_command_line({"--overlap-comm", "reduce"});
  EXPECT_TRUE(reduce_only.config.model.overlap_communication);
  EXPECT_FALSE(reduce_only.config.model.overlap_gather);
  const CommandLine gather_only = parse_command_line({"--overlap-comm", "gather"});
  EXPECT_FALSE(gather_only.config.model.overlap_communication);
  EXPECT_TRUE(gather_only.config.model.overlap_gather);
}

// --grad-reduce: bf16 by default with bf16 precision, fp32 otherwise; bf16 on the GPU needs bf16
// precision; the CPU (fp32) may sum in bf16. --grad-bucket: a positive count, else the backend's
// default (0).
TEST(TrainOptions, GradReduceAndBucketOptions) {
  EXPECT_EQ(resolve({"--device", "cpu"}, no_gpu()).model.grad_reduce, GradReduce::kFp32);
  EXPECT_EQ(resolve({"--device", "cpu", "--grad-reduce", "bf16"}, no_gpu()).model.grad_reduce,
            GradReduce::kBf16);
  EXPECT_EQ(resolve({"--device", "cuda"}, with_gpu()).model.grad_reduce, GradReduce::kBf16);
  EXPECT_EQ(resolve({"--device", "cuda", "--grad-reduce", "fp32"}, with_gpu()).model.grad_reduce,
            GradReduce::kFp32);
  EXPECT_EQ(resolve({"--device", "cuda", "--precision", "fp32"}, with_gpu()).model.grad_reduce,
            GradReduce::kFp32);
  const std::string message = usage_message(
      {"--device", "cuda", "--precision", "fp32", "--grad-reduce", "bf16"}, with_gpu());
  EXPECT_NE(message.find("--grad-reduce bf16 needs --precision bf16"), std::string::npos)
      << message;
  for (const char* bad : {"fp16", "", "BF16"})
    EXPECT_THROW(parse_command_line({"--grad-reduce", bad}), UsageError) << bad;
  EXPECT_EQ(resolve({"--device", "cpu"}, no_gpu()).model.bucket_elements, 0u);
  EXPECT_EQ(resolve({"--device", "cpu", "--grad-bucket", "4096"}, no_gpu()).model.bucket_elements,
            4096u);
  for (const char* bad : {"0", "-1", "1e6", ""})
    EXPECT_THROW(parse_command_line({"--grad-bucket", bad}), UsageError) << bad;
}

TEST(TrainOptions, SeqLenBeyondContextNamesBothNumbers) {
  const std::string message = usage_message({"--max-seq-len", "128", "--seq-len", "256"});
  EXPECT_NE(message.find("--seq-len 256"), std::string::npos) << message;
  EXPECT_NE(message.find("128"), std::string::npos) << message;
  EXPECT_EQ(resolve({"--max-seq-len", "128", "--seq-len", "128"}, no_gpu()).model.seq_len, 128);
}

TEST(TrainOptions, ContextFreeRangeChecks) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;  // must appear in the message
  };
  const std::vector<Case> cases = {
      {{"--batch-size", "0"}, "--batch-size"},
      {{"--batch-size", "-3"}, "'-3'"},
      {{"--seq-len", "abc"}, "'abc'"},
      {{"--steps", "0"}, "--steps"},
      {{"--steps", "2.5"}, "'2.5'"},
      {{"--lr", "-1e-3"}, "--lr"},
      {{"--lr", "fast"}, "'fast'"},
      {{"--lr", "nan"}, "--lr"},
      {{"--grad-clip", "-1"}, "--grad-clip"},
      {{"--weight-decay", "-0.1"}, "--weight-decay"},
      {{"--final-lr-frac", "1.5"}, "'1.5'"},
      {{"--final-lr-frac", "-0.1"}, "--final-lr-frac"},
      {{"--val-steps", "0"}, "--val-steps"},
      {{"--val-every", "-1"}, "--val-every"},
      {{"--warmup-steps", "-1"}, "--warmup-steps"},
      {{"--attn", "sparse"}, "'sparse'"},
      {{"--device", "tpu"}, "'tpu'"},
      {{"--precision", "fp16"}, "'fp16'"},
      {{"--lr-schedule", "step"}, "'step'"},
      {{"--model", "d1x"}, "d1x"},
      {{"--total-batch-size", "0"}, "--total-batch-size"},
      {{"--sample-tokens", "0"}, "--sample-tokens"},
      {{"--seed", "-1"}, "--seed"},
      {{"--max-seq-len", "0"}, "--max-seq-len"},
      {{"--bogus", "1"}, "--bogus"},
      {{"stray"}, "stray"},
      {{"--steps"}, "steps"},
      {{"--device", "cpu", "--precision", "bf16"}, "bf16"},
      {{"--device", "cpu", "--precision", "fp8"}, "--precision fp8 needs --device cuda"},
      {{"--precision", "fp9"}, "fp32, bf16 or fp8"},
  };
  for (const Case& c : cases) {
    const std::string message = usage_message(c.args);
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << "args[0] " << c.args[0] << ": '" << message << "'";
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  // Validation switched off makes --val-steps 0 harmless; 0 disables every --*-every.
  const TrainConfig c = resolve({"--val-every", "0", "--val-steps", "0", "--sample-every", "0",
                                 "--checkpoint-every", "0"}, no_gpu());
  EXPECT_EQ(c.val_every, 0);
}

// --fp8-classifier follows --precision unless given: on with fp8, off otherwise; on (or all)
// without fp8 is a usage error; all adds the weight gradient.
TEST(TrainOptions, Fp8ClassifierFollowsThePrecision) {
  EXPECT_TRUE(resolve({"--precision", "fp8"}, with_gpu()).model.fp8_classifier);
  EXPECT_FALSE(resolve({"--precision", "fp8"}, with_gpu()).model.fp8_classifier_weight_gradient);
  const TrainConfig all = resolve({"--precision", "fp8", "--fp8-classifier", "all"}, with_gpu());
  EXPECT_TRUE(all.model.fp8_classifier);
  EXPECT_TRUE(all.model.fp8_classifier_weight_gradient);
  EXPECT_NE(usage_message({"--fp8-classifier", "all"}, with_gpu()).find("all needs --precision"),
            std::string::npos);
  EXPECT_FALSE(
      resolve({"--precision", "fp8", "--fp8-classifier", "off"}, with_gpu()).model.fp8_classifier);
  EXPECT_FALSE(resolve({}, with_gpu()).model.fp8_classifier);
  EXPECT_FALSE(resolve({"--fp8-classifier", "off"}, with_gpu()).model.fp8_classifier);
  EXPECT_NE(usage_message({"--fp8-classifier", "on"}, with_gpu()).find("needs --precision fp8"),
            std::string::npos);
  EXPECT_NE(usage_message({"--precision", "fp8", "--fp8-classifier", "yes"}, with_gpu())
                .find("on, off or all (got 'yes')"),
            std::string::npos);
  // A model whose padded vocabulary is not a multiple of 16 (the FP8 GEMMs' dimension) leaves
  // the classifier in bf16 by default; asked for explicitly, the model plan refuses it.
  const std::string path =
      (std::filesystem::temp_directory_path() / "gpt2_options_test_d1_vp50264.bin").string();
  ModelConfig config = model_config_from_preset("d1", 64);
  config.padded_vocab_size = 50264;
  std::vector<float> params(ParameterLayout::for_config(config).total, 0.5f);
  write_model_checkpoint(path, config, params.data());
  const std::vector<std::string> fp8_model = {"--model", path, "--precision", "fp8",
                                              "--seq-len", "64"};
  EXPECT_FALSE(resolve(fp8_model, with_gpu()).model.fp8_classifier);
  std::vector<std::string> explicit_on = fp8_model;
  explicit_on.insert(explicit_on.end(), {"--fp8-classifier", "on"});
  EXPECT_TRUE(resolve(explicit_on, with_gpu()).model.fp8_classifier);
  std::filesystem::remove(path);
}

// --fp8-fast-accumulation: on with fp8 unless given off, and only with fp8.
TEST(TrainOptions, Fp8FastAccumulationNeedsFp8) {
  EXPECT_TRUE(resolve({"--precision", "fp8"}, with_gpu()).model.fp8_fast_accumulation);
  EXPECT_TRUE(resolve({"--precision", "fp8", "--fp8-fast-accumulation", "on"}, with_gpu())
                  .model.fp8_fast_accumulation);
  EXPECT_FALSE(resolve({"--precision", "fp8", "--fp8-fast-accumulation", "off"}, with_gpu())
                   .model.fp8_fast_accumulation);
  EXPECT_FALSE(resolve({}, with_gpu()).model.fp8_fast_accumulation);
  EXPECT_FALSE(resolve({"--fp8-fast-accumulation", "off"}, with_gpu()).model.fp8_fast_accumulation);
  EXPECT_NE(usage_message({"--precision", "bf16", "--fp8-fast-accumulation", "on"}, with_gpu())
                .find("--fp8-fast-accumulation on needs --precision fp8"),
            std::string::npos);
  EXPECT_NE(usage_message({"--precision", "fp8", "--fp8-fast-accumulation", "1"}, with_gpu())
                .find("on or off (got '1')"),
            std::string::npos);
}

// --fp8-amax-history, --fp8-margin and --fp8-gradient-margin: the delayed scales' settings,
// only with fp8, in range.
TEST(TrainOptions, Fp8DelayedScalingSettings) {
  const TrainConfig defaults = resolve({"--precision", "fp8"}, with_gpu());
  EXPECT_EQ(defaults.model.fp8_amax_history, 16);
  EXPECT_EQ(defaults.model.fp8_margin, 0);
  EXPECT_EQ(defaults.model.fp8_gradient_margin, 4);
  const TrainConfig set = resolve({"--precision", "fp8", "--fp8-amax-history", "4",
                                   "--fp8-margin", "1", "--fp8-gradient-margin", "3"},
                                  with_gpu());
  EXPECT_EQ(set.model.fp8_amax_history, 4);
  EXPECT_EQ(set.model.fp8_margin, 1);
  EXPECT_EQ(set.model.fp8_gradient_margin, 3);
  for (const char* option : {"--fp8-margin", "--fp8-gradient-margin"}) {
    EXPECT_NE(usage_message({option, "1"}, with_gpu())
                  .find(std::string(option) + " needs --precision fp8"),
              std::string::npos)
        << option;
    for (const char* margin : {"9", "99", "x"})
      EXPECT_NE(usage_message({"--precision", "fp8", option, margin}, with_gpu()).find(option),
                std::string::npos)
          << option << " " << margin;
  }
  EXPECT_NE(usage_message({"--precision", "bf16", "--fp8-amax-history", "4"}, with_gpu())
                .find("--fp8-amax-history needs --precision fp8"),
            std::string::npos);
  for (const char* history : {"0", "17", "x"})
    EXPECT_NE(usage_message({"--precision", "fp8", "--fp8-amax-history", history}, with_gpu())
                  .find("--fp8-amax-history"),
              std::string::npos)
        << history;
}

TEST(TrainOptions, HelpSkipsEverythingElse) {
  EXPECT_TRUE(parse_command_line({"--help"}).help);
  EXPECT_NE(usage_text().find("--total-batch-size"), std::string::npos);
}

TEST(TrainOptions, CheckpointModelTakesItsContextFromTheFile) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "gpt2_options_test_d1_maxT96.bin").string();
  const ModelConfig config = model_config_from_preset("d1", 96);
  std::vector<float> params(ParameterLayout::for_config(config).total, 0.5f);
  write_model_checkpoint(path, config, params.data());

  const TrainConfig c = resolve({"--model", path, "--seq-len", "96"}, no_gpu());
  EXPECT_EQ(c.model_source, ModelSource::kLlmcFile);
  EXPECT_EQ(c.model_path, path);
  EXPECT_EQ(c.model.config, config);
  EXPECT_EQ(resolve({"--model", path, "--max-seq-len", "96", "--seq-len", "32"}, no_gpu())
                .model.config.max_seq_len, 96);
  const std::string message = usage_message({"--model", path, "--max-seq-len", "1024"});
  EXPECT_NE(message.find("1024"), std::string::npos) << message;
  EXPECT_NE(message.find("96"), std::string::npos) << message;
  const std::string too_long = usage_message({"--model", path, "--seq-len", "128"});
  EXPECT_NE(too_long.find("--seq-len 128"), std::string::npos) << too_long;
  std::filesystem::remove(path);
}

// hf:DIR (or a directory holding config.json) is a model whose context comes from its
// config.json, like a checkpoint's from its header; a bad directory is a file error (exit 1).
TEST(TrainOptions, HuggingFaceDirectoryTakesItsContextFromConfigJson) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / "gpt2_options_test_hf_d1_maxT96";
  std::filesystem::remove_all(folder);
  const std::string dir = (folder / "model").string();
  const ModelConfig config = model_config_from_preset("d1", 96);
  std::vector<float> params(ParameterLayout::for_config(config).total, 0.5f);
  write_hf_model(dir, config, params.data());

  for (const std::string& model : {"hf:" + dir, dir}) {
    const TrainConfig c = resolve({"--model", model, "--seq-len", "96"}, no_gpu());
    EXPECT_EQ(c.model_source, ModelSource::kHfDirectory) << model;
    EXPECT_EQ(c.model_path, dir);
    EXPECT_EQ(c.model_name, model);
    EXPECT_EQ(c.model.config, config);
  }
  EXPECT_EQ(resolve({"--model", "hf:" + dir, "--max-seq-len", "96", "--seq-len", "32"}, no_gpu())
                .model.config.max_seq_len, 96);
  const std::string message = usage_message({"--model", "hf:" + dir, "--max-seq-len", "1024"});
  EXPECT_NE(message.find("--max-seq-len 1024 disagrees with the model hf:" + dir +
                         " (max_seq_len 96)"), std::string::npos) << message;
  const std::string too_long = usage_message({"--model", dir, "--seq-len", "128"});
  EXPECT_NE(too_long.find("--seq-len 128"), std::string::npos) << too_long;

  const auto file_error = [](const std::vector<std::string>& args) {
    try {
      resolve(args, no_gpu());
    } catch (const UsageError& e) {
      ADD_FAILURE() << "a usage error: " << e.what();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error";
    return std::string();
  };
  EXPECT_NE(file_error({"--model", "hf:" + (folder / "nowhere").string()}).find("no such directory"),
            std::string::npos);
  EXPECT_NE(file_error({"--model", "hf:" + folder.string()}).find("no config.json"),
            std::string::npos);
  EXPECT_NE(file_error({"--model", folder.string()}).find("a directory without config.json"),
            std::string::npos);
  // A preset name that is also a model directory here is ambiguous.
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::create_directories(folder / "cwd");
  std::filesystem::current_path(folder / "cwd");
  write_hf_model("d3", config, params.data());
  const std::string ambiguous = usage_message({"--model", "d3"});
  EXPECT_EQ(resolve({"--model", "hf:d3", "--seq-len", "64"}, no_gpu()).model_source,
            ModelSource::kHfDirectory);
  EXPECT_EQ(resolve({"--model", "./d3", "--seq-len", "64"}, no_gpu()).model_source,
            ModelSource::kHfDirectory);
  std::filesystem::current_path(cwd);
  EXPECT_NE(ambiguous.find("--model d3 is both a preset and a directory holding config.json: "
                           "write hf:d3"), std::string::npos) << ambiguous;
  // The safetensors header is checked at resolution, before --out is touched.
  std::filesystem::resize_file(folder / "model" / "model.safetensors", 100);
  EXPECT_NE(file_error({"--model", dir}).find("model.safetensors"), std::string::npos);
  std::filesystem::remove_all(folder);
}

// --attn-kernel and --attn-deterministic: parsed, passed through, and refused where they cannot
// apply (the GPU kernel itself is checked against the device by the CUDA model).
TEST(TrainOptions, FlashKernelChoiceAndDeterminism) {
  const TrainConfig defaults = resolve({"--device", "cuda"}, with_gpu());
  EXPECT_EQ(defaults.model.flash_kernel, FlashKernelChoice::kAuto);
  EXPECT_FALSE(defaults.model.deterministic_attention);
  const TrainConfig hopper = resolve(
      {"--device", "cuda", "--attn-kernel", "hopper", "--attn-deterministic", "1"}, with_gpu());
  EXPECT_EQ(hopper.model.flash_kernel, FlashKernelChoice::kHopper);
  EXPECT_TRUE(hopper.model.deterministic_attention);
  EXPECT_EQ(
      resolve({"--device", "cuda", "--attn-kernel", "portable"}, with_gpu()).model.flash_kernel,
      FlashKernelChoice::kPortable);
  EXPECT_NE(usage_message({"--attn-kernel", "fast"}).find("--attn-kernel must be auto, portable"),
            std::string::npos);
  EXPECT_NE(usage_message({"--device", "cpu", "--attn-kernel", "hopper"}).find("needs --device cuda"),
            std::string::npos);
  EXPECT_NE(usage_message({"--device", "cuda", "--attn", "naive", "--attn-kernel", "portable"},
                          with_gpu())
                .find("needs --attn flash"),
            std::string::npos);
  EXPECT_NE(usage_message({"--attn-deterministic", "2"}).find("--attn-deterministic must be 0 or 1"),
            std::string::npos);
}

// --classifier-chunk-rows: passed through to the CUDA model (0: automatic), refused on the CPU.
TEST(TrainOptions, ClassifierChunkRows) {
  EXPECT_EQ(resolve({"--device", "cuda"}, with_gpu()).model.classifier_chunk_rows, 0);
  EXPECT_EQ(resolve({"--device", "cuda", "--classifier-chunk-rows", "37"}, with_gpu())
                .model.classifier_chunk_rows,
            37);
  EXPECT_NE(usage_message({"--classifier-chunk-rows", "-1"})
                .find("--classifier-chunk-rows must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(usage_message({"--device", "cpu", "--classifier-chunk-rows", "64"})
                .find("--classifier-chunk-rows needs --device cuda"),
            std::string::npos);
}

// --cuda-graph on|off: on by default, passed through; anything else is refused.
TEST(TrainOptions, CudaGraphSwitch) {
  EXPECT_TRUE(resolve({"--device", "cuda"}, with_gpu()).model.cuda_graphs);
  EXPECT_FALSE(resolve({"--device", "cuda", "--cuda-graph", "off"}, with_gpu()).model.cuda_graphs);
  EXPECT_TRUE(resolve({"--device", "cuda", "--cuda-graph", "on"}, with_gpu()).model.cuda_graphs);
  EXPECT_NE(usage_message({"--cuda-graph", "yes"}).find("--cuda-graph must be on or off"),
            std::string::npos);
}

// --recompute none|fc: passed through to the CUDA model (none by default), refused on the CPU.
TEST(TrainOptions, Recompute) {
  EXPECT_FALSE(resolve({"--device", "cuda"}, with_gpu()).model.recompute_fc);
  EXPECT_FALSE(resolve({"--device", "cuda", "--recompute", "none"}, with_gpu()).model.recompute_fc);
  EXPECT_TRUE(resolve({"--device", "cuda", "--recompute", "fc"}, with_gpu()).model.recompute_fc);
  EXPECT_NE(usage_message({"--recompute", "all"}).find("--recompute must be none or fc"),
            std::string::npos);
  EXPECT_NE(usage_message({"--device", "cpu", "--recompute", "fc"})
                .find("--recompute fc needs --device cuda"),
            std::string::npos);
}

}  // namespace
}  // namespace gpt2
