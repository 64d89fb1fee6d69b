/**
 * @file checkpoint.cpp
 * @brief llm.c model files (fp32 version 3, bf16 version 5) and the training-state file.
 *
 * Both formats are little-endian on disk; the code writes host memory as is, so it
 * static_asserts a little-endian host instead of byte-swapping. Reads validate the header
 * (magic, version, config via validate_config) and the exact file size before touching the
 * payload, and every message starts with the file's path. Parameters are streamed in fixed
 * chunks so a bf16 file of the 1.5B model needs no second full-size buffer.
 * bf16 <-> fp32 is base/bf16.h (round to nearest even; NaN stays NaN; widening exact).
 * The training state's header and payload (m then v, fp32) are guarded by an FNV-1a 64 hash;
 * model files are hashed as they are written and read, so a state can record its model's hash.
 * Writes go through AtomicFileWriter: a killed process leaves the old file or the new one.
 */
#include "model/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "base/bf16.h"
#include "base/error.h"
#include "base/file_io.h"
#include "model/parameters.h"

namespace gpt2 {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint files are little-endian; this code writes host memory as is");

namespace {

constexpr int kModelHeaderInts = 256;
constexpr size_t kModelHeaderBytes = kModelHeaderInts * sizeof(int32_t);
constexpr int kStateHeaderInts = 256;
constexpr size_t kStateHeaderBytes = kStateHeaderInts * sizeof(int64_t);
// Conversion chunk: bounded extra memory for bf16 files whatever the model size.
constexpr size_t kChunkElements = size_t(1) << 20;

// Header slots of the training-state file (see checkpoint.h).
enum StateSlot : int {
  kSlotMagic = 0, kSlotVersion = 1, kSlotStep = 2, kSlotNumParameters = 3, kSlotBatchSize = 4,
  kSlotSeqLen = 5, kSlotTotalBatchSize = 6, kSlotSeed = 7, kSlotWorldSize = 8,
  kSlotLoaderEpoch = 9, kSlotLoaderShard = 10, kSlotLoaderBatch = 11, kSlotRngState = 12,
  kSlotHash = 16, kSlotPayloadBytes = 17, kSlotModelHash = 18, kSlotModelBytes = 19,
  kSlotModelName = 20,  // kModelNameSlots slots of NUL-padded text
  // Version 3:
  kSlotRunId = 52, kSlotSkippedInARow = 53, kSlotSkippedTotal = 54, kSlotSteps = 55,
  kSlotMaxLr = 56, kSlotWarmupSteps = 57, kSlotLrSchedule = 58, kSlotFinalLrFrac = 59,
  kSlotWeightDecay = 60, kSlotGradClip = 61, kSlotOnNonfinite = 62, kSlotMaxSkippedInARow = 63,
  kSlotContextParallel = 64,  // 0 (a state written before it existed): 1
};
constexpr int kModelNameSlots = 32;
static_assert(kModelNameSlots * sizeof(int64_t) == kMaxModelFileName + 1);
static_assert(kSlotModelName + kModelNameSlots == kSlotRunId);
// Version 2 (no run id, streak or settings) is still read.
constexpr int64_t kOldestReadableStateVersion = 2;

// A float in a header slot: its IEEE bits, so it reads back exactly.
int64_t float_slot(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
float slot_float(int64_t slot) {
  const auto bits = static_cast<uint32_t>(slot);
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// FNV-1a 64 over bytes, continuing from hash (start with kFnvOffset).
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t fnv1a64(uint64_t hash, const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= kFnvPrime;
  }
  return hash;
}


struct ModelHeader {
  ModelConfig config;
  int32_t version = 0;
};

// Reads and validates the 256-int header and the file size against it.
ModelHeader read_model_header(InputFile& file, const std::string& path, uint64_t* hash) {
  if (file.size() < kModelHeaderBytes)
    GPT2_FAIL(path, ": file is ", file.size(), " bytes, shorter than the ", kModelHeaderBytes,
              "-byte llm.c model header (truncated or not a model file)");
  int32_t header[kModelHeaderInts];
  file.read_exactly(header, sizeof header, "the header");
  if (hash) *hash = fnv1a64(kFnvOffset, header, sizeof header);
  if (header[0] != kModelMagic)
    GPT2_FAIL(path, ": bad magic number ", header[0], " (expected ", kModelMagic,
              "): not an llm.c model file");
  const int32_t version = header[1];
  if (version != kModelVersionFp32 && version != kModelVersionBf16)
    GPT2_FAIL(path, ": unsupported model file version ", version, " (expected ",
              kModelVersionFp32, " for fp32 or ", kModelVersionBf16, " for bf16)");
  ModelHeader result;
  result.version = version;
  ModelConfig& c = result.config;
  c.max_seq_len = header[2];
  c.vocab_size = header[3];
  c.num_layers = header[4];
  c.num_heads = header[5];
  c.channels = header[6];
  c.padded_vocab_size = header[7];
  try {
    validate_config(c);
  } catch (const Error& e) {
    GPT2_FAIL(path, ": inconsistent header: ", e.what());
  }
  // Bound the element count before size_t arithmetic on header values can wrap around.
  const double approx_elements =
      double(c.padded_vocab_size) * c.channels + double(c.max_seq_len) * c.channels +
      double(c.num_layers) * c.channels * (12.0 * c.channels + 13.0) + 2.0 * c.channels;
  if (approx_elements > 1e15)
    GPT2_FAIL(path, ": inconsistent header: ", c.describe(), " describes ", approx_elements,
              " parameters");
  const size_t element_bytes = version == kModelVersionFp32 ? sizeof(float) : sizeof(uint16_t);
  const uint64_t expected =
      kModelHeaderBytes + ParameterLayout::for_config(c).total * element_bytes;
  if (file.size() != expected)
    GPT2_FAIL(path, ": file is ", file.size(), " bytes but its header (", c.describe(), ", ",
              version == kModelVersionFp32 ? "fp32" : "bf16", ") requires ", expected,
              " bytes (", file.size() < expected ? "truncated" : "trailing bytes", ")");
  return result;
}

}  // namespace

bool TrainingSettings::operator==(const TrainingSettings& o) const {
  return steps == o.steps && float_slot(max_lr) == float_slot(o.max_lr) &&
         warmup_steps == o.warmup_steps && lr_schedule == o.lr_schedule &&
         float_slot(final_lr_frac) == float_slot(o.final_lr_frac) &&
         float_slot(weight_decay) == float_slot(o.weight_decay) &&
         float_slot(grad_clip) == float_slot(o.grad_clip) && on_nonfinite == o.on_nonfinite &&
         max_skipped_in_a_row == o.max_skipped_in_a_row;
}

ModelFileDigest write_model_checkpoint(const std::string& path, const ModelConfig& config,
                                       const float* params, int32_t version) {
  GPT2_CHECK(version == kModelVersionFp32 || version == kModelVersionBf16, "version ", version);
  validate_config(config);
  int32_t header[kModelHeaderInts] = {};
  header[0] = kModelMagic;
  header[1] = version;
  header[2] = config.max_seq_len;
  header[3] = config.vocab_size;
  header[4] = config.num_layers;
  header[5] = config.num_heads;
  header[6] = config.channels;
  header[7] = config.padded_vocab_size;
  const size_t total = ParameterLayout::for_config(config).total;

  AtomicFileWriter writer(path);
  ModelFileDigest digest;
  const auto write = [&](const void* data, size_t bytes) {
    writer.write(data, bytes);
    digest.hash = fnv1a64(digest.hash, data, bytes);
    digest.bytes += bytes;
  };
  digest.hash = kFnvOffset;
  write(header, sizeof header);
  if (version == kModelVersionFp32) {
    write(params, total * sizeof(float));
  } else {
    std::vector<uint16_t> chunk(std::min(total, kChunkElements));
    for (size_t start = 0; start < total; start += chunk.size()) {
      const size_t n = std::min(chunk.size(), total - start);
      for (size_t i = 0; i < n; ++i) chunk[i] = float_to_bf16_bits(params[start + i]);
      write(chunk.data(), n * sizeof(uint16_t));
    }
  }
  writer.commit();
  return digest;
}

ModelConfig read_model_checkpoint_config(const std::string& path) {
  InputFile file(path);
  return read_model_header(file, path, nullptr).config;
}

ModelCheckpoint read_model_checkpoint(const std::string& path) {
  InputFile file(path);
  ModelCheckpoint checkpoint;
  const ModelHeader header = read_model_header(file, path, &checkpoint.digest.hash);
  checkpoint.config = header.config;
  const size_t total = ParameterLayout::for_config(header.config).total;
  checkpoint.params.resize(total);
  if (header.version == kModelVersionFp32) {
    file.read_exactly(checkpoint.params.data(), total * sizeof(float), "the parameters");
    checkpoint.digest.hash =
        fnv1a64(checkpoint.digest.hash, checkpoint.params.data(), total * sizeof(float));
  } else {
    std::vector<uint16_t> chunk(std::min(total, kChunkElements));
    for (size_t start = 0; start < total; start += chunk.size()) {
      const size_t n = std::min(chunk.size(), total - start);
      file.read_exactly(chunk.data(), n * sizeof(uint16_t), "the parameters");
      checkpoint.digest.hash = fnv1a64(checkpoint.digest.hash, chunk.data(), n * sizeof(uint16_t));
      for (size_t i = 0; i < n; ++i) checkpoint.params[start + i] = bf16_bits_to_float(chunk[i]);
    }
  }
  checkpoint.digest.bytes = file.size();
  return checkpoint;
}

void write_training_state(const std::string& path, const TrainingState& state) {
  const size_t n = static_cast<size_t>(state.num_parameters);
  GPT2_CHECK(state.num_parameters >= 0 && state.adam_m.size() == n && state.adam_v.size() == n,
             "num_parameters ", state.num_parameters, ", m ", state.adam_m.size(), ", v ",
             state.adam_v.size());
  GPT2_CHECK(state.settings.has_value(), "a training state is written with its settings");
  GPT2_CHECK(!state.model_file.empty() && state.model_file.size() <= kMaxModelFileName &&
                 state.model_file.find('/') == std::string::npos &&
                 state.model_file.find('\0') == std::string::npos,
             "model file name '", state.model_file, "'");
  const size_t vector_bytes = n * sizeof(float);

  int64_t header[kStateHeaderInts] = {};
  header[kSlotMagic] = kStateMagic;
  header[kSlotVersion] = kStateVersion;
  header[kSlotStep] = state.step;
  header[kSlotNumParameters] = state.num_parameters;
  header[kSlotBatchSize] = state.batch_size;
  header[kSlotSeqLen] = state.seq_len;
  header[kSlotTotalBatchSize] = state.total_batch_size;
  header[kSlotSeed] = state.seed;
  header[kSlotWorldSize] = state.world_size;
  header[kSlotLoaderEpoch] = state.loader.epoch;
  header[kSlotLoaderShard] = state.loader.shard_cursor;
  header[kSlotLoaderBatch] = state.loader.batch_cursor;
  for (int i = 0; i < 4; ++i) header[kSlotRngState + i] = static_cast<int64_t>(state.sample_rng[i]);
  header[kSlotPayloadBytes] = static_cast<int64_t>(2 * vector_bytes);
  header[kSlotModelHash] = static_cast<int64_t>(state.model_digest.hash);
  header[kSlotModelBytes] = static_cast<int64_t>(state.model_digest.bytes);
  std::memcpy(&header[kSlotModelName], state.model_file.data(), state.model_file.size());
  header[kSlotRunId] = static_cast<int64_t>(state.run_id);
  header[kSlotContextParallel] = state.context_parallel;
  header[kSlotSkippedInARow] = state.skipped_in_a_row;
  header[kSlotSkippedTotal] = state.skipped_total;
  const TrainingSettings& settings = *state.settings;
  header[kSlotSteps] = settings.steps;
  header[kSlotMaxLr] = float_slot(settings.max_lr);
  header[kSlotWarmupSteps] = settings.warmup_steps;
  header[kSlotLrSchedule] = settings.lr_schedule;
  header[kSlotFinalLrFrac] = float_slot(settings.final_lr_frac);
  header[kSlotWeightDecay] = float_slot(settings.weight_decay);
  header[kSlotGradClip] = float_slot(settings.grad_clip);
  header[kSlotOnNonfinite] = settings.on_nonfinite;
  header[kSlotMaxSkippedInARow] = settings.max_skipped_in_a_row;
  uint64_t hash = fnv1a64(kFnvOffset, header, sizeof header);  // the hash slot is still 0
  hash = fnv1a64(hash, state.adam_m.data(), vector_bytes);
  hash = fnv1a64(hash, state.adam_v.data(), vector_bytes);
  header[kSlotHash] = static_cast<int64_t>(hash);

  AtomicFileWriter writer(path);
  writer.write(header, sizeof header);
  writer.write(state.adam_m.data(), vector_bytes);
  writer.write(state.adam_v.data(), vector_bytes);
  writer.commit();
}

TrainingState read_training_state(const std::string& path) {
  InputFile file(path);
  if (file.size() < kStateHeaderBytes)
    GPT2_FAIL(path, ": file is ", file.size(), " bytes, shorter than the ", kStateHeaderBytes,
              "-byte training-state header (truncated or not a training-state file)");
  int64_t header[kStateHeaderInts];
  file.read_exactly(header, sizeof header, "the header");
  if (header[kSlotMagic] != kStateMagic)
    GPT2_FAIL(path, ": bad magic number ", header[kSlotMagic], " (expected ", kStateMagic,
              "): not a training-state file");
  const int64_t version = header[kSlotVersion];
  if (version < kOldestReadableStateVersion || version > kStateVersion)
    GPT2_FAIL(path, ": unsupported training-state version ", version, " (expected ",
              kOldestReadableStateVersion, " to ", kStateVersion, version == 1
                  ? ": version 1 files do not record their model file's hash, so the pair "
                    "cannot be verified"
                  : "", ")");
  const int64_t num_parameters = header[kSlotNumParameters];
  // 2^40 parameters is far beyond any model here and keeps the byte arithmetic from wrapping.
  if (num_parameters < 0 || num_parameters > (int64_t(1) << 40))
    GPT2_FAIL(path, ": inconsistent header: ", num_parameters, " parameters");
  const uint64_t vector_bytes = static_cast<uint64_t>(num_parameters) * sizeof(float);
  if (header[kSlotPayloadBytes] != static_cast<int64_t>(2 * vector_bytes))
    GPT2_FAIL(path, ": inconsistent header: payload of ", header[kSlotPayloadBytes],
              " bytes for ", num_parameters, " parameters (expected ", 2 * vector_bytes, ")");
  const uint64_t expected = kStateHeaderBytes + 2 * vector_bytes;
  if (file.size() != expected)
    GPT2_FAIL(path, ": file is ", file.size(), " bytes but its header (", num_parameters,
              " parameters) requires ", expected, " bytes (",
              file.size() < expected ? "truncated" : "trailing bytes", ")");

  TrainingState state;
  state.version = version;
  state.step = header[kSlotStep];
  state.num_parameters = num_parameters;
  state.batch_size = header[kSlotBatchSize];
  state.seq_len = header[kSlotSeqLen];
  state.total_batch_size = header[kSlotTotalBatchSize];
  state.seed = header[kSlotSeed];
  state.world_size = header[kSlotWorldSize];
  state.loader.epoch = header[kSlotLoaderEpoch];
  state.loader.shard_cursor = header[kSlotLoaderShard];
  state.loader.batch_cursor = header[kSlotLoaderBatch];
  for (int i = 0; i < 4; ++i) state.sample_rng[i] = static_cast<uint64_t>(header[kSlotRngState + i]);
  state.model_digest.hash = static_cast<uint64_t>(header[kSlotModelHash]);
  state.model_digest.bytes = static_cast<uint64_t>(header[kSlotModelBytes]);
  const char* name = reinterpret_cast<const char*>(&header[kSlotModelName]);
  state.model_file.assign(name, strnlen(name, kMaxModelFileName + 1));
  if (version >= 3) {
    state.run_id = static_cast<uint64_t>(header[kSlotRunId]);
    state.context_parallel = std::max<int64_t>(1, header[kSlotContextParallel]);
    state.skipped_in_a_row = header[kSlotSkippedInARow];
    state.skipped_total = header[kSlotSkippedTotal];
    TrainingSettings settings;
    settings.steps = header[kSlotSteps];
    settings.max_lr = slot_float(header[kSlotMaxLr]);
    settings.warmup_steps = header[kSlotWarmupSteps];
    settings.lr_schedule = header[kSlotLrSchedule];
    settings.final_lr_frac = slot_float(header[kSlotFinalLrFrac]);
    settings.weight_decay = slot_float(header[kSlotWeightDecay]);
    settings.grad_clip = slot_float(header[kSlotGradClip]);
    settings.on_nonfinite = header[kSlotOnNonfinite];
    settings.max_skipped_in_a_row = header[kSlotMaxSkippedInARow];
    state.settings = settings;
  }
  state.adam_m.resize(static_cast<size_t>(num_parameters));
  state.adam_v.resize(static_cast<size_t>(num_parameters));
  file.read_exactly(state.adam_m.data(), vector_bytes, "the AdamW m vector");
  file.read_exactly(state.adam_v.data(), vector_bytes, "the AdamW v vector");
  const auto stored = static_cast<uint64_t>(header[kSlotHash]);
  header[kSlotHash] = 0;
  uint64_t hash = fnv1a64(kFnvOffset, header, sizeof header);
  hash = fnv1a64(hash, state.adam_m.data(), vector_bytes);
  hash = fnv1a64(hash, state.adam_v.data(), vector_bytes);
  if (hash != stored)
    GPT2_FAIL(path, ": hash mismatch (stored ", stored, ", computed ", hash,
              "): the file is corrupted");
  if (state.model_file.empty() || state.model_file.size() > kMaxModelFileName)
    GPT2_FAIL(path, ": inconsistent header: no model file name");
  return state;
}

}  // namespace gpt2
