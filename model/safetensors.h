/**
 * @file safetensors.h
 * @brief The safetensors format (Hugging Face): reading F32, F16 and BF16 tensors as fp32,
 *        writing F32.
 *
 * A file is: N as a little-endian uint64; N bytes of JSON header, an object mapping each tensor
 * name to {"dtype", "shape", "data_offsets": [begin, end)} plus an optional "__metadata__" object
 * of strings; then the data section, which the offsets index. Tensors are row-major and
 * little-endian.
 * Reading validates the whole header before any tensor is read, as the reference implementation
 * does: N within the file (and at most kMaxSafetensorsHeaderBytes), the header one JSON object
 * with distinct keys, every entry a known dtype, a shape of non-negative integers and offsets
 * with end - begin = the bytes of that shape, and the tensors, in offset order, tiling the data
 * section exactly (no overlap, no gap, nothing after the last). Every error is a gpt2::Error
 * starting "<path>: " and naming the tensor or the field. Tensors are then read in data order
 * (one pass, no seeking; tensors passed over are skipped), each converted to fp32 straight into
 * the caller's buffer, so reading needs no memory beyond the caller's and a bounded chunk.
 * Writing: F32 only; tensors sorted by name (the reference writer's order for one dtype), the
 * header "__metadata__" first and padded with spaces to a multiple of 8 bytes so the data
 * section starts 8-byte aligned (as the reference writer does), through AtomicFileWriter.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/file_io.h"

namespace gpt2 {

/// The reference implementation's limit on N; a larger header is refused.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

/// Every dtype of the format (so a file with, e.g., a BOOL buffer still parses); only F32, F16
/// and BF16 convert to fp32.
enum class SafetensorsDtype {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64
};
const char* to_string(SafetensorsDtype dtype);  // "F32", "BF16", ...
size_t element_bytes(SafetensorsDtype dtype);
bool converts_to_f32(SafetensorsDtype dtype);  // F32, F16, BF16

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // [begin, end) in the data section
  uint64_t end = 0;
  uint64_t num_elements() const;
};

/// "[768, 2304]"
std::string shape_string(const std::vector<int64_t>& shape);

class SafetensorsReader {
 public:
  /// Opens and validates the whole header (see the file comment); reads no tensor yet.
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return file_.path(); }
  /// Every tensor in data order (increasing offset).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  /// nullptr when the file has no tensor of that name.
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// tensor.num_elements() fp32 values into values (F16 and BF16 widened exactly). Tensors must
  /// be read in data order; those passed over are skipped. Throws for a dtype other than F32,
  /// F16 or BF16, and for a read that fails.
  void read_f32(const SafetensorsTensor& tensor, float* values);

 private:
  void skip_to(uint64_t file_offset);

  InputFile file_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
  uint64_t data_start_ = 0;  // file offset of the data section
  uint64_t position_ = 0;    // file offset of the next byte read
};

/// One tensor to write: fill writes its num_elements fp32 values (row-major) into values.
struct SafetensorsOutput {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(float* values)> fill;
};

/// Writes an F32 safetensors file atomically (see the file comment). Names must be distinct and
/// must not be "__metadata__".
void write_safetensors_f32(const std::string& path, std::vector<SafetensorsOutput> tensors,
                           const std::map<std::string, std::string>& metadata);

}  // namespace gpt2
