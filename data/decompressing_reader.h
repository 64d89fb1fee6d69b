/**
 * @file decompressing_reader.h
 * @brief Reads a file's bytes, decompressing gzip (.gz, zlib) or zstd (.zst) by its extension.
 *
 * compression_of(path) picks the codec from the name alone: ".gz" gzip, ".zst" zstd, anything
 * else plain bytes. read() streams the decompressed bytes in pieces (0 at the end), so memory
 * stays at a few buffers whatever the file's size. Several concatenated gzip members or zstd
 * frames are read one after the other, as gzip -d and zstd -d do.
 * A compressed file must end where a member or frame ends: a file that stops inside one
 * (truncated, or empty) and corrupt data both throw gpt2::Error. The message says what is wrong
 * ("truncated gzip data: the file ends inside a compressed member", "corrupt zstd data: ...")
 * without the path: the caller adds the path and the line it had reached. A failing read of the
 * file itself throws InputFile's message, which names the path.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gpt2 {

enum class Compression { kNone, kGzip, kZstd };

Compression compression_of(const std::string& path);

/// "gzip", "zstd" or "none".
const char* compression_name(Compression compression);

class DecompressingReader {
 public:
  explicit DecompressingReader(const std::string& path);
  ~DecompressingReader();
  DecompressingReader(const DecompressingReader&) = delete;
  DecompressingReader& operator=(const DecompressingReader&) = delete;

  /// Up to capacity decompressed bytes; 0 only at the end of the data.
  size_t read(char* out, size_t capacity);

  /// Bytes of the file itself read so far (compressed bytes for a compressed file).
  uint64_t file_bytes_read() const;

  class Codec;

 private:
  std::unique_ptr<Codec> codec_;
};

}  // namespace gpt2
