/**
 * @file safetensors.cpp
 * @brief safetensors: header validation, streaming fp32 reads, F32 writes (see safetensors.h).
 *
 * The file is little-endian and the code reads and writes host memory as is, hence the
 * static_assert. All offset arithmetic is uint64 and checked against the file size before it
 * can wrap: a shape's element count is bounded by the data section's size before it is
 * multiplied by the element size. F16 -> fp32 is base/fp16.h, BF16 -> fp32 base/bf16.h.
 */
#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "base/bf16.h"
#include "base/error.h"
#include "base/fp16.h"
#include "base/json.h"

namespace gpt2 {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors files are little-endian; this code reads host memory as is");

namespace {

constexpr const char* kMetadataKey = "__metadata__";
constexpr size_t kHeaderAlignment = 8;
// Conversion and skipping chunk: bounded extra memory whatever the tensor size.
constexpr size_t kChunkBytes = size_t(1) << 22;

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  size_t bytes;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},     {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},         {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1}, {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},       {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},     {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},       {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},       {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
};

const DtypeInfo& dtype_info(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes)
    if (info.dtype == dtype) return info;
  GPT2_CHECK(false, "unknown SafetensorsDtype ", static_cast<int>(dtype));
}

// One tensor entry of the header; `where` is "<path>: tensor '<name>'" for the messages.
SafetensorsTensor parse_tensor_entry(const std::string& name, const Json& entry,
                                     uint64_t data_bytes, const std::string& where) {
  if (!entry.is_object())
    GPT2_FAIL(where, ": the header entry is not an object with dtype, shape and data_offsets");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field)) GPT2_FAIL(where, ": the header entry has no '", field, "'");

  SafetensorsTensor tensor;
  tensor.name = name;
  const Json& dtype = entry.at("dtype");
  bool known = false;
  if (dtype.is_string()) {
    for (const DtypeInfo& info : kDtypes) {
      if (dtype.get<std::string>() == info.name) {
        tensor.dtype = info.dtype;
        known = true;
      }
    }
  }
  if (!known) GPT2_FAIL(where, ": unknown dtype ", dump_json(dtype));

  const Json& offsets = entry.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    GPT2_FAIL(where, ": data_offsets ", dump_json(offsets),
              " is not a pair [begin, end] of non-negative integers");
  tensor.begin = offsets[0].get<uint64_t>();
  tensor.end = offsets[1].get<uint64_t>();
  if (tensor.end < tensor.begin)
    GPT2_FAIL(where, ": data_offsets [", tensor.begin, ", ", tensor.end, "] end before they begin");
  if (tensor.end > data_bytes)
    GPT2_FAIL(where, ": data_offsets [", tensor.begin, ", ", tensor.end,
              "] run past the end of the data section (", data_bytes,
              " bytes): the file is truncated or the offsets are out of range");

  const Json& shape = entry.at("shape");
  if (!shape.is_array())
    GPT2_FAIL(where, ": shape ", dump_json(shape), " is not an array of non-negative integers");
  // The byte count in uint64 with every product checked: a shape cannot wrap it around.
  uint64_t bytes = element_bytes(tensor.dtype);
  bool overflows = false;
  bool has_zero_extent = false;
  for (const Json& dim : shape) {
    if (!dim.is_number_unsigned())
      GPT2_FAIL(where, ": shape ", dump_json(shape), " is not an array of non-negative integers");
    const uint64_t extent = dim.get<uint64_t>();
    if (extent > uint64_t(std::numeric_limits<int64_t>::max()))
      GPT2_FAIL(where, ": shape ", dump_json(shape), " has a dimension beyond int64");
    overflows = __builtin_mul_overflow(bytes, extent, &bytes) || overflows;
    has_zero_extent = has_zero_extent || extent == 0;
    tensor.shape.push_back(static_cast<int64_t>(extent));
  }
  if (has_zero_extent) bytes = 0;
  if (overflows && !has_zero_extent)
    GPT2_FAIL(where, ": shape ", dump_json(shape), " of ", to_string(tensor.dtype),
              " needs more than 2^64 bytes");
  if (tensor.end - tensor.begin != bytes)
    GPT2_FAIL(where, ": data_offsets [", tensor.begin, ", ", tensor.end, "] hold ",
              tensor.end - tensor.begin, " bytes but shape ", shape_string(tensor.shape), " of ",
              to_string(tensor.dtype), " needs ", bytes);
  return tensor;
}

}  // namespace

const char* to_string(SafetensorsDtype dtype) { return dtype_info(dtype).name; }

size_t element_bytes(SafetensorsDtype dtype) { return dtype_info(dtype).bytes; }

bool converts_to_f32(SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::kF32 || dtype == SafetensorsDtype::kF16 ||
         dtype == SafetensorsDtype::kBF16;
}

uint64_t SafetensorsTensor::num_elements() const {
  uint64_t n = 1;
  for (const int64_t extent : shape) n *= static_cast<uint64_t>(extent);
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += str_cat(i ? ", " : "", shape[i]);
  return text + "]";
}

// ---------------------------------------------------------------------------------------------
// Reading

SafetensorsReader::SafetensorsReader(const std::string& path) : file_(path) {
  const uint64_t file_bytes = file_.size();
  if (file_bytes < sizeof(uint64_t))
    GPT2_FAIL(path, ": file is ", file_bytes,
              " bytes, shorter than the 8-byte header length of a safetensors file");
  uint64_t header_bytes = 0;
  file_.read_exactly(&header_bytes, sizeof header_bytes, "the header length");
  if (header_bytes > file_bytes - sizeof(uint64_t))
    GPT2_FAIL(path, ": header length ", header_bytes, " runs past the end of the file (",
              file_bytes, " bytes): truncated or not a safetensors file");
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    GPT2_FAIL(path, ": header length ", header_bytes, " exceeds the format's limit of ",
              kMaxSafetensorsHeaderBytes, " bytes");
  std::string header_text(static_cast<size_t>(header_bytes), '\0');
  file_.read_exactly(header_text.data(), header_text.size(), "the header");
  data_start_ = sizeof(uint64_t) + header_bytes;
  position_ = data_start_;
  const uint64_t data_bytes = file_bytes - data_start_;

  const Json header = parse_json_unique_keys(header_text, path);
  if (!header.is_object()) GPT2_FAIL(path, ": the safetensors header is not a JSON object");
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) GPT2_FAIL(path, ": __metadata__ is not an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          GPT2_FAIL(path, ": __metadata__ '", key, "' is ", dump_json(value), ", not a string");
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    tensors_.push_back(
        parse_tensor_entry(name, entry, data_bytes, str_cat(path, ": tensor '", name, "'")));
  }

  // In offset order the tensors must tile the data section: [0, e1), [e1, e2), ... [ek, size).
  std::stable_sort(tensors_.begin(), tensors_.end(),
                   [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& tensor : tensors_) {
    if (tensor.begin < covered)
      GPT2_FAIL(path, ": tensor '", tensor.name, "': data_offsets [", tensor.begin, ", ",
                tensor.end, "] overlap tensor '", previous->name, "' [", previous->begin, ", ",
                previous->end, "]");
    if (tensor.begin > covered)
      GPT2_FAIL(path, ": tensor '", tensor.name, "': data_offsets [", tensor.begin, ", ",
                tensor.end, "] leave bytes [", covered, ", ", tensor.begin,
                ") of the data section to no tensor");
    covered = tensor.end;
    previous = &tensor;
  }
  if (covered != data_bytes)
    GPT2_FAIL(path, ": the data section is ", data_bytes, " bytes but its tensors end at byte ",
              covered, " (", data_bytes - covered, " bytes after the last tensor)");
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

const SafetensorsTensor* SafetensorsReader::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsReader::skip_to(uint64_t file_offset) {
  GPT2_CHECK(file_offset >= position_, "safetensors tensors are read in data order: offset ",
             file_offset, " is behind the read position ", position_);
  std::vector<char> scratch(static_cast<size_t>(std::min<uint64_t>(file_offset - position_,
                                                                   kChunkBytes)));
  while (position_ < file_offset) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(file_offset - position_, kChunkBytes));
    file_.read_exactly(scratch.data(), n, "the data section");
    position_ += n;
  }
}

void SafetensorsReader::read_f32(const SafetensorsTensor& tensor, float* values) {
  if (!converts_to_f32(tensor.dtype))
    GPT2_FAIL(path(), ": tensor '", tensor.name, "' is ", to_string(tensor.dtype),
              ": only F32, F16 and BF16 tensors are read as fp32");
  skip_to(data_start_ + tensor.begin);
  const std::string what = str_cat("tensor '", tensor.name, "'");
  const uint64_t n = tensor.num_elements();
  if (tensor.dtype == SafetensorsDtype::kF32) {
    file_.read_exactly(values, static_cast<size_t>(n * sizeof(float)), what.c_str());
  } else {
    const bool is_bf16 = tensor.dtype == SafetensorsDtype::kBF16;
    std::vector<uint16_t> chunk(static_cast<size_t>(
        std::min<uint64_t>(n, kChunkBytes / sizeof(uint16_t))));
    for (uint64_t start = 0; start < n; start += chunk.size()) {
      const size_t count = static_cast<size_t>(std::min<uint64_t>(chunk.size(), n - start));
      file_.read_exactly(chunk.data(), count * sizeof(uint16_t), what.c_str());
      for (size_t i = 0; i < count; ++i)
        values[start + i] = is_bf16 ? bf16_bits_to_float(chunk[i]) : half_bits_to_float(chunk[i]);
    }
  }
  position_ = data_start_ + tensor.end;
}

// ---------------------------------------------------------------------------------------------
// Writing

void write_safetensors_f32(const std::string& path, std::vector<SafetensorsOutput> tensors,
                           const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsOutput& a, const SafetensorsOutput& b) { return a.name < b.name; });
  Json header = Json::object();
  if (!metadata.empty()) {
    Json& meta = header[kMetadataKey];
    meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
  }
  uint64_t offset = 0;
  uint64_t largest = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsOutput& tensor = tensors[i];
    GPT2_CHECK(tensor.name != kMetadataKey && (i == 0 || tensors[i - 1].name != tensor.name),
               "tensor name '", tensor.name, "'");
    uint64_t elements = 1;
    for (const int64_t extent : tensor.shape) {
      GPT2_CHECK(extent >= 0, tensor.name, " ", shape_string(tensor.shape));
      elements *= static_cast<uint64_t>(extent);
    }
    Json entry = Json::object();
    entry["dtype"] = "F32";
    entry["shape"] = tensor.shape;
    entry["data_offsets"] = Json::array({offset, offset + elements * sizeof(float)});
    header[tensor.name] = std::move(entry);
    offset += elements * sizeof(float);
    largest = std::max(largest, elements);
  }
  std::string header_text = dump_json(header);
  header_text.append((kHeaderAlignment - header_text.size() % kHeaderAlignment) % kHeaderAlignment,
                     ' ');
  const uint64_t header_bytes = header_text.size();

  AtomicFileWriter writer(path);
  writer.write(&header_bytes, sizeof header_bytes);
  writer.write(header_text.data(), header_text.size());
  std::vector<float> values(static_cast<size_t>(largest));
  for (const SafetensorsOutput& tensor : tensors) {
    uint64_t elements = 1;
    for (const int64_t extent : tensor.shape) elements *= static_cast<uint64_t>(extent);
    tensor.fill(values.data());
    writer.write(values.data(), static_cast<size_t>(elements * sizeof(float)));
  }
  writer.commit();
}

}  // namespace gpt2
