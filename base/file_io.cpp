/**
 * @file file_io.cpp
 * @brief Atomic whole-file writes, the one file reader, globbing, mkdir -p (POSIX).
 *
 * Contract (see file_io.h): every failure throws gpt2::Error whose message starts with the
 * file (or pattern) and ends with the system's reason (strerror). AtomicFileWriter looks at
 * the path first (stat follows every link, so /dev/stdout's /proc links work too): a device or
 * FIFO is opened and streamed; otherwise the file written is the one a symbolic link finally
 * names (followed here link by link, as the kernel would, since it may not exist yet), and it
 * stays untouched until commit() renames a fully written, fsynced temporary file onto it; the
 * folder is fsynced afterwards so the rename itself survives a power cut. The destructor never
 * throws: an uncommitted writer just closes and unlinks its temporary file.
 * expand_glob sorts by byte order (strcmp), independent of the locale, so every rank and
 * every run sees shards in the same order.
 */
#include "base/file_io.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace gpt2 {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::string parent_folder(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The rename is only durable once the folder entry is on disk. Some file systems refuse
// fsync on a directory (EINVAL); the data itself is already synced, so that is not an error.
void fsync_folder(const std::string& file_path) {
  const std::string folder = parent_folder(file_path);
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) {
    GPT2_FAIL(file_path, ": cannot open folder '", folder, "' to sync: ", errno_text(errno));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) {
    GPT2_FAIL(file_path, ": cannot sync folder '", folder, "': ", errno_text(err));
  }
}

bool has_glob_characters(const std::string& pattern) {
  return pattern.find_first_of("*?[") != std::string::npos;
}

// The file a write to path lands on: path itself, or the file its chain of symbolic links
// finally names (which may not exist yet), each relative target taken against its link's folder.
std::string final_link_target(const std::string& path) {
  std::string current = path;
  for (int hops = 0; hops < 40; ++hops) {  // Linux's own limit (ELOOP)
    struct stat info {};
    if (::lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return current;
    char target[PATH_MAX];
    const ssize_t length = ::readlink(current.c_str(), target, sizeof target);
    if (length < 0 || length == static_cast<ssize_t>(sizeof target))
      GPT2_FAIL(path, ": cannot read the symbolic link '", current, "': ",
                length < 0 ? errno_text(errno) : std::string("target too long"));
    const std::string text(target, static_cast<size_t>(length));
    current = text.front() == '/' ? text : parent_folder(current) + "/" + text;
  }
  GPT2_FAIL(path, ": too many levels of symbolic links");
}

// What a path is, through its links, for the writer: "" when it writes there as a file
// (missing or regular), "stream" for a character device or FIFO, else what it refuses.
const char* unwritable_kind(const struct stat& info) {
  if (S_ISDIR(info.st_mode)) return "a directory";
  if (S_ISSOCK(info.st_mode)) return "a socket";
  if (S_ISBLK(info.st_mode)) return "a block device";
  return nullptr;
}

bool is_stream(const struct stat& info) {
  return S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// AtomicFileWriter

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
  if (path.empty()) GPT2_FAIL("cannot write a file with an empty path");
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    if (const char* kind = unwritable_kind(info)) {
      GPT2_FAIL(path, ": is ", kind, ": only a file, a character device or a FIFO is written");
    }
    if (is_stream(info)) {
      // Written in place: renaming a file onto a device or FIFO would replace the node itself.
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
      if (fd < 0) GPT2_FAIL(path, ": cannot open for writing: ", errno_text(errno));
      file_ = ::fdopen(fd, "wb");
      if (file_ == nullptr) {
        const int err = errno;
        ::close(fd);
        GPT2_FAIL(path, ": cannot open for writing: ", errno_text(err));
      }
      return;
    }
  }
  target_path_ = final_link_target(path);
  temp_path_ = str_cat(target_path_, ".tmp.", static_cast<long>(::getpid()));
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (file_ == nullptr) {
    GPT2_FAIL(path_, ": cannot create temporary file '", temp_path_, "': ", errno_text(errno));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
  // Best effort; a destructor must not throw. A stream has no temporary file.
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  GPT2_CHECK(file_ != nullptr && !committed_, "write after commit or failed commit");
  if (bytes == 0) return;
  const size_t written = std::fwrite(data, 1, bytes, file_);
  if (written != bytes) {
    const int err = errno;
    GPT2_FAIL(path_, ": write failed after ", written, " of ", bytes, " bytes: ",
              err != 0 ? errno_text(err) : std::string("short write"));
  }
}

void AtomicFileWriter::commit() {
  GPT2_CHECK(file_ != nullptr && !committed_, "commit called twice or after a failed commit");
  // Buffered data may only hit the disk here, so ENOSPC typically surfaces at fflush/fsync.
  if (std::fflush(file_) != 0) GPT2_FAIL(path_, ": write failed: ", errno_text(errno));
  const bool streaming = temp_path_.empty();
  if (!streaming && ::fsync(::fileno(file_)) != 0)
    GPT2_FAIL(path_, ": fsync failed: ", errno_text(errno));
  FILE* file = file_;
  file_ = nullptr;  // fclose releases the stream even when it fails
  if (std::fclose(file) != 0) GPT2_FAIL(path_, ": close failed: ", errno_text(errno));
  if (streaming) {
    committed_ = true;
    return;
  }
  if (std::rename(temp_path_.c_str(), target_path_.c_str()) != 0) {
    GPT2_FAIL(path_, ": cannot rename '", temp_path_, "' onto ",
              target_path_ == path_ ? "it" : target_path_, ": ", errno_text(errno));
  }
  committed_ = true;
  fsync_folder(target_path_);
}

void check_output_path(const std::string& option, const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || S_ISDIR(info.st_mode)) return;
  if (const char* kind = unwritable_kind(info)) {
    GPT2_USAGE_FAIL(option, " ", path, " is ", kind, ": outputs are regular files (written "
                    "atomically), or character devices and FIFOs (streamed)");
  }
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat info_a {}, info_b {};
  const bool a_exists = ::stat(a.c_str(), &info_a) == 0;
  const bool b_exists = ::stat(b.c_str(), &info_b) == 0;
  if (a_exists && b_exists) return info_a.st_dev == info_b.st_dev && info_a.st_ino == info_b.st_ino;
  if (a_exists != b_exists) return false;
  const auto spelled = [](const std::string& path) {
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(final_link_target(path), ec);
    return std::filesystem::weakly_canonical(absolute, ec).lexically_normal();
  };
  return spelled(a) == spelled(b);
}

void refuse_shared_outputs(const std::vector<CommandPath>& paths) {
  for (size_t i = 0; i < paths.size(); ++i) {
    const CommandPath& output = paths[i];
    if (!output.is_output || output.path.empty()) continue;
    for (size_t j = 0; j < paths.size(); ++j) {
      const CommandPath& other = paths[j];
      if (j == i || other.path.empty() || (other.is_output && j > i)) continue;
      if (!same_file(output.path, other.path)) continue;
      if (other.is_output)
        GPT2_USAGE_FAIL(output.option, " ", output.path, " is the same file as ", other.option,
                        " ", other.path, ": each output needs a file of its own");
      GPT2_USAGE_FAIL(output.option, " ", output.path, " is also an ", other.option, " file (",
                      other.path, "): refusing to overwrite an input");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Reads

InputFile::InputFile(const std::string& path) : path_(path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) GPT2_FAIL(path, ": no such file");
    GPT2_FAIL(path, ": cannot read: ", errno_text(errno));
  }
  if (S_ISDIR(info.st_mode)) GPT2_FAIL(path, ": is a directory, not a file");
  file_ = std::fopen(path.c_str(), "rb");
  if (file_ == nullptr) GPT2_FAIL(path, ": cannot open: ", errno_text(errno));
  struct stat opened {};
  if (::fstat(::fileno(file_), &opened) != 0) {
    const int err = errno;
    std::fclose(file_);
    GPT2_FAIL(path, ": cannot stat: ", errno_text(err));
  }
  size_ = static_cast<uint64_t>(std::max<off_t>(opened.st_size, 0));
}

InputFile::~InputFile() { std::fclose(file_); }

void InputFile::read_exactly(void* data, size_t bytes, const char* what) {
  const size_t got = std::fread(data, 1, bytes, file_);
  if (got != bytes) {
    GPT2_FAIL(path_, ": read of ", what, " failed after ", got, " of ", bytes, " bytes: ",
              std::ferror(file_) ? errno_text(errno) : std::string("unexpected end of file"));
  }
}

size_t InputFile::read_some(void* data, size_t bytes) {
  const size_t got = std::fread(data, 1, bytes, file_);
  if (got < bytes && std::ferror(file_)) GPT2_FAIL(path_, ": read failed: ", errno_text(errno));
  return got;
}

namespace {

[[noreturn]] void fail_too_large(const std::string& path, size_t max_bytes) {
  GPT2_FAIL(path, ": larger than the ", max_bytes, "-byte limit for this file");
}

// Reads to EOF rather than trusting the size, which is 0 for pipes and /proc files; the buffer
// is sized once from the size, so a regular file is read straight into it, without a copy.
// max_bytes bounds both: the size before anything is allocated, the bytes read after it.
template <typename Bytes>
Bytes read_whole_file(const std::string& path, size_t max_bytes) {
  InputFile file(path);
  if (file.size() > max_bytes) fail_too_large(path, max_bytes);
  Bytes bytes(static_cast<size_t>(file.size()), '\0');
  size_t filled = 0;
  while (filled < bytes.size()) {
    const size_t got = file.read_some(&bytes[filled], bytes.size() - filled);
    if (got == 0) break;
    filled += got;
  }
  if (filled < bytes.size()) {
    bytes.resize(filled);
    return bytes;
  }
  char chunk[1 << 16];
  for (size_t got; (got = file.read_some(chunk, sizeof chunk)) > 0;) {
    if (got > max_bytes - bytes.size()) fail_too_large(path, max_bytes);
    bytes.insert(bytes.end(), chunk, chunk + got);
  }
  return bytes;
}

}  // namespace

std::vector<char> read_file_bytes(const std::string& path, size_t max_bytes) {
  return read_whole_file<std::vector<char>>(path, max_bytes);
}

std::string read_file_text(const std::string& path, size_t max_bytes) {
  return read_whole_file<std::string>(path, max_bytes);
}

// ---------------------------------------------------------------------------------------------
// Paths

std::vector<std::string> expand_glob(const std::string& pattern) {
  if (pattern.empty()) GPT2_FAIL("no file matches '' (empty pattern)");
  if (!has_glob_characters(pattern)) {
    if (!file_exists(pattern)) GPT2_FAIL(pattern, ": no such file");
    return {pattern};
  }
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) {
    paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  }
  ::globfree(&matches);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) {
    GPT2_FAIL("no file matches '", pattern, "'");
  }
  if (rc != 0) {
    GPT2_FAIL("'", pattern, "': glob failed (", rc == GLOB_NOSPACE ? "out of memory" : "read error",
              ")");
  }
  std::sort(paths.begin(), paths.end());  // byte order: std::string compares like strcmp
  return paths;
}

bool file_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

void write_text_file(const std::string& path, const std::string& text) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) make_directories(path.substr(0, slash));
  AtomicFileWriter writer(path);
  writer.write(text.data(), text.size());
  writer.commit();
}

void make_directories(const std::string& path) {
  if (path.empty()) GPT2_FAIL("cannot create a directory with an empty path");
  // Create every prefix ending before a '/', then the whole path.
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = path.substr(0, end);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0777) != 0) {
      const int err = errno;
      struct stat info {};
      const bool is_folder = ::stat(prefix.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
      if (!is_folder) {  // an existing folder is fine whatever mkdir said (EEXIST, EROFS...)
        GPT2_FAIL(path, ": cannot create directory '", prefix, "': ",
                  err == EEXIST ? std::string("a file of that name exists") : errno_text(err));
      }
    }
    if (end == std::string::npos) break;
  }
}

}  // namespace gpt2
