/**
 * @file checkpoint.cpp
 * @brief llm.c model files (fp32 version 3, bf16 version 5).
 *
 * The format is little-endian on disk; the code writes host memory as is, so it
 * static_asserts a little-endian host instead of byte-swapping. Reads validate the header
 * (magic, version, config via validate_config) and the exact file size before touching the
 * payload, and every message starts with the file's path. Parameters are streamed in fixed
 * chunks so a bf16 file of the 1.5B model needs no second full-size buffer.
 * bf16 <-> fp32 is base/bf16.h (round to nearest even; NaN stays NaN; widening exact).
 * Model files are hashed (FNV-1a 64, base/fnv1a.h) as they are written and read, so a training
 * state (train/training_state.h) can record its model's hash.
 * Writes go through AtomicFileWriter: a killed process leaves the old file or the new one.
 */
#include "model/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "base/bf16.h"
#include "base/error.h"
#include "base/fnv1a.h"
#include "base/file_io.h"
#include "model/parameters.h"

namespace gpt2 {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint files are little-endian; this code writes host memory as is");

namespace {

constexpr int kModelHeaderInts = 256;
constexpr size_t kModelHeaderBytes = kModelHeaderInts * sizeof(int32_t);
// Conversion chunk: bounded extra memory for bf16 files whatever the model size.
constexpr size_t kChunkElements = size_t(1) << 20;

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

}  // namespace gpt2
