/**
 * @file training_state.cpp
 * @brief The training-state file: a 256-int64 header (slots in training_state.h), then AdamW m
 *        and v (fp32) and the precision state's bytes, all guarded by one FNV-1a 64 hash.
 *
 * Little-endian on disk, written from host memory as is. Reads check magic, version, sizes
 * and the hash before returning; every message starts with the file's path. Writes go through
 * AtomicFileWriter.
 */
#include "train/training_state.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/file_io.h"
#include "base/fnv1a.h"

namespace gpt2 {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "training states are little-endian; this code writes host memory as is");

namespace {

constexpr int kStateHeaderInts = 256;
constexpr size_t kStateHeaderBytes = kStateHeaderInts * sizeof(int64_t);

// Header slots of the training-state file (see training_state.h).
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
  // Version 4:
  kSlotPrecisionStateBytes = 65,
};
// The largest precision state read: far beyond any (d12's FP8 scales are 46 KiB), and it keeps
// a corrupted length from asking for gigabytes.
constexpr int64_t kMaxPrecisionStateBytes = int64_t{1} << 30;
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

}  // namespace

bool TrainingSettings::operator==(const TrainingSettings& o) const {
  return steps == o.steps && float_slot(max_lr) == float_slot(o.max_lr) &&
         warmup_steps == o.warmup_steps && lr_schedule == o.lr_schedule &&
         float_slot(final_lr_frac) == float_slot(o.final_lr_frac) &&
         float_slot(weight_decay) == float_slot(o.weight_decay) &&
         float_slot(grad_clip) == float_slot(o.grad_clip) && on_nonfinite == o.on_nonfinite &&
         max_skipped_in_a_row == o.max_skipped_in_a_row;
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
  const size_t precision_bytes = state.precision_state.size();
  header[kSlotPayloadBytes] = static_cast<int64_t>(2 * vector_bytes + precision_bytes);
  header[kSlotPrecisionStateBytes] = static_cast<int64_t>(precision_bytes);
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
  hash = fnv1a64(hash, state.precision_state.data(), precision_bytes);
  header[kSlotHash] = static_cast<int64_t>(hash);

  AtomicFileWriter writer(path);
  writer.write(header, sizeof header);
  writer.write(state.adam_m.data(), vector_bytes);
  writer.write(state.adam_v.data(), vector_bytes);
  writer.write(state.precision_state.data(), precision_bytes);
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
  const int64_t precision_bytes = version >= 4 ? header[kSlotPrecisionStateBytes] : 0;
  if (precision_bytes < 0 || precision_bytes > kMaxPrecisionStateBytes)
    GPT2_FAIL(path, ": inconsistent header: a precision state of ", precision_bytes, " bytes");
  const uint64_t payload_bytes = 2 * vector_bytes + static_cast<uint64_t>(precision_bytes);
  if (header[kSlotPayloadBytes] != static_cast<int64_t>(payload_bytes))
    GPT2_FAIL(path, ": inconsistent header: payload of ", header[kSlotPayloadBytes],
              " bytes for ", num_parameters, " parameters and a precision state of ",
              precision_bytes, " bytes (expected ", payload_bytes, ")");
  const uint64_t expected = kStateHeaderBytes + payload_bytes;
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
  for (int i = 0; i < 4; ++i)
    state.sample_rng[i] = static_cast<uint64_t>(header[kSlotRngState + i]);
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
  state.precision_state.resize(static_cast<size_t>(precision_bytes));
  file.read_exactly(state.precision_state.data(), state.precision_state.size(),
                    "the precision state");
  const auto stored = static_cast<uint64_t>(header[kSlotHash]);
  header[kSlotHash] = 0;
  uint64_t hash = fnv1a64(kFnvOffset, header, sizeof header);
  hash = fnv1a64(hash, state.adam_m.data(), vector_bytes);
  hash = fnv1a64(hash, state.adam_v.data(), vector_bytes);
  hash = fnv1a64(hash, state.precision_state.data(), state.precision_state.size());
  if (hash != stored)
    GPT2_FAIL(path, ": hash mismatch (stored ", stored, ", computed ", hash,
              "): the file is corrupted");
  if (state.model_file.empty() || state.model_file.size() > kMaxModelFileName)
    GPT2_FAIL(path, ": inconsistent header: no model file name");
  return state;
}

}  // namespace gpt2
