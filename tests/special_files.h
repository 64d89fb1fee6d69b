/**
 * @file special_files.h
 * @brief Outputs that are not regular files, made in a test's own folder: a Unix socket, and a
 *        FIFO with a reader thread.
 *
 * FifoReader opens the FIFO for reading on a thread (which waits for a writer) and collects
 * what arrives until the writer closes it. A second name of the FIFO (a hard link) is kept, so
 * that finish() can end the reader even when the code under test replaced the FIFO instead of
 * writing into it: the reader then gets nothing, and the test fails rather than hangs.
 */
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace gpt2::testing {

/// A Unix socket bound at path (the node stays when the descriptor is closed).
inline void make_unix_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof address.sun_path) << path;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << path;
  ::close(fd);
}

class FifoReader {
 public:
  /// Makes the FIFO at path (and path + "_kept") and starts reading it.
  explicit FifoReader(const std::string& path) : kept_(path + "_kept") {
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
    EXPECT_EQ(::link(path.c_str(), kept_.c_str()), 0) << kept_;
    reader_ = std::thread([this, path] {
      const int fd = ::open(path.c_str(), O_RDONLY);
      char buf[4096];
      for (ssize_t n; fd >= 0 && (n = ::read(fd, buf, sizeof buf)) > 0;)
        bytes_.insert(bytes_.end(), buf, buf + n);
      if (fd >= 0) ::close(fd);
    });
  }
  ~FifoReader() {
    if (reader_.joinable()) finish();
  }
  FifoReader(const FifoReader&) = delete;
  FifoReader& operator=(const FifoReader&) = delete;

  /// Call after the writer is done: what the reader received.
  const std::vector<char>& finish() {
    const int unblock = ::open(kept_.c_str(), O_WRONLY | O_NONBLOCK);  // a reader still waiting
    if (unblock >= 0) ::close(unblock);
    reader_.join();
    return bytes_;
  }

 private:
  std::string kept_;
  std::vector<char> bytes_;
  std::thread reader_;
};

}  // namespace gpt2::testing
