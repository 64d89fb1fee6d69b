/**
 * @file file_io.h
 * @brief File helpers: atomic whole-file writes, the one file reader, globbing.
 *
 * InputFile is the project's one way of reading a file (whole files, token shards, checkpoints):
 * it refuses a missing path ("<path>: no such file") and a folder ("<path>: is a directory, not
 * a file"), takes the size from the opened descriptor (so it is the size of what is then read;
 * 0 for pipes and /proc files) and throws on a short read naming the file, the part being read
 * and the reason.
 * AtomicFileWriter writes to "<path>.tmp.<pid>" in the same folder, and commit() flushes,
 * fsyncs, renames onto <path> and fsyncs the folder; a writer destroyed without commit()
 * removes its temporary file. So a kill at any moment leaves either the old file or the new
 * one, never a half-written <path>. All failures throw gpt2::Error naming the file.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gpt2 {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_path_;
  FILE* file_ = nullptr;
  bool committed_ = false;
};

class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  /// Exactly bytes; throws "<path>: read of <what> failed after N of M bytes: <reason>" (the
  /// reason is "unexpected end of file" when the file is shorter than its size said).
  void read_exactly(void* data, size_t bytes, const char* what);
  /// Up to bytes; how many were read, 0 at the end of the file. Throws on a read error.
  size_t read_some(void* data, size_t bytes);

 private:
  std::string path_;
  FILE* file_ = nullptr;
  uint64_t size_ = 0;
};

/// Whole file as bytes; throws gpt2::Error("<path>: ...") when missing or unreadable.
std::vector<char> read_file_bytes(const std::string& path);

/// Whole file as text (same errors).
std::string read_file_text(const std::string& path);

/// Paths matching a glob pattern (or the one literal path), sorted. Throws gpt2::Error naming
/// the pattern when nothing matches ("no file matches 'x*.bin'") and when a literal path is
/// missing ("x.bin: no such file").
std::vector<std::string> expand_glob(const std::string& pattern);

bool file_exists(const std::string& path);

/// mkdir -p; throws gpt2::Error on failure.
void make_directories(const std::string& path);

}  // namespace gpt2
