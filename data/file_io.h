/**
 * @file file_io.h
 * @brief File helpers: atomic whole-file writes, whole-file reads, globbing.
 *
 * AtomicFileWriter writes to "<path>.tmp.<pid>" in the same folder, and commit() flushes,
 * fsyncs, renames onto <path> and fsyncs the folder; a writer destroyed without commit()
 * removes its temporary file. So a kill at any moment leaves either the old file or the new
 * one, never a half-written <path>. All failures throw gpt2::Error naming the file.
 */
#pragma once

#include <cstddef>
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
