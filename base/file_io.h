/**
 * @file file_io.h
 * @brief File helpers: atomic whole-file writes, the one file reader, globbing.
 *
 * InputFile is the project's one way of reading a file (whole files, token shards, checkpoints):
 * it refuses a missing path ("<path>: no such file") and a folder ("<path>: is a directory, not
 * a file"), takes the size from the opened descriptor (so it is the size of what is then read;
 * 0 for pipes and /proc files) and throws on a short read naming the file, the part being read
 * and the reason.
 * AtomicFileWriter respects what the path is:
 *   - a new path or a regular file: written to "<path>.tmp.<pid>" in the same folder; commit()
 *     flushes, fsyncs, renames onto <path> and fsyncs the folder; a writer destroyed without
 *     commit() removes its temporary file. So a kill at any moment leaves either the old file
 *     or the new one, never a half-written <path>.
 *   - a symbolic link: written through to the file it finally names (link by link, relative
 *     targets against the link's folder, also when that file does not exist yet), atomically
 *     there as above; the link stays a link.
 *   - a character device or a FIFO (/dev/null, /dev/stdout, a named pipe): streamed, opened
 *     for writing as it is (a FIFO waits for its reader), never replaced; nothing is undone
 *     when the writer is abandoned.
 *   - a directory, a socket or a block device: refused (gpt2::Error); check_output_path() says
 *     so earlier, as a usage error naming the option.
 * All failures throw gpt2::Error naming the file.
 * Reads are bounded: read_file_bytes / read_file_text refuse a file of more than max_bytes
 * (checked against the size of a regular file before anything is allocated, and while reading
 * one whose size is unknown: a pipe, a device, a /proc file).
 * same_file() is the one test of "these two paths are one file" (outputs against outputs and
 * inputs); refuse_shared_outputs() applies it to a command's paths.
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
  std::string target_path_;  // the file renamed onto: path_, or the file its links name
  std::string temp_path_;    // empty when streaming
  FILE* file_ = nullptr;
  bool committed_ = false;
};

/// The whole of `text` to `path` through an AtomicFileWriter, its folders created first.
void write_text_file(const std::string& path, const std::string& text);

/// Throws gpt2::UsageError "<option> <path> is a socket: ..." when path (through any symbolic
/// links) is something AtomicFileWriter refuses besides a directory: a socket or a block device.
/// Directories are left to the writer (exit code 1, "is a directory"), as before.
void check_output_path(const std::string& option, const std::string& path);

/// True when a and b are one file: both exist and have the same device and inode, or neither
/// exists and both spell the same absolute path once "." and "..", and the symbolic links on the
/// way and at the end, are resolved.
bool same_file(const std::string& a, const std::string& b);

/// A path a command reads or writes, with the option that named it.
struct CommandPath {
  std::string option;  // "--output"
  std::string path;
  bool is_output = false;
};

/// Throws gpt2::UsageError when an output is the same file (same_file) as an input ("--output X
/// is also an --input file (Y): refusing to overwrite an input") or as another output
/// ("--val-output X is the same file as --output Y: ...").
void refuse_shared_outputs(const std::vector<CommandPath>& paths);

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

/// The largest file read_file_bytes / read_file_text read unless told otherwise.
constexpr size_t kDefaultMaxReadBytes = size_t{1} << 30;

/// Whole file as bytes; throws gpt2::Error("<path>: ...") when missing or unreadable, and
/// "<path>: larger than the N-byte limit for this file" beyond max_bytes.
std::vector<char> read_file_bytes(const std::string& path,
                                  size_t max_bytes = kDefaultMaxReadBytes);

/// Whole file as text (same errors).
std::string read_file_text(const std::string& path, size_t max_bytes = kDefaultMaxReadBytes);

/// Paths matching a glob pattern (or the one literal path), sorted. Throws gpt2::Error naming
/// the pattern when nothing matches ("no file matches 'x*.bin'") and when a literal path is
/// missing ("x.bin: no such file").
std::vector<std::string> expand_glob(const std::string& pattern);

bool file_exists(const std::string& path);

/// mkdir -p; throws gpt2::Error on failure.
void make_directories(const std::string& path);

}  // namespace gpt2
