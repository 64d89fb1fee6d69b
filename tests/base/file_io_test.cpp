/**
 * @file file_io_test.cpp
 * @brief Tests for base/file_io.h: atomic writes, whole-file reads, globbing, mkdir -p.
 *
 * Each test works in its own fresh folder (mkdtemp under ::testing::TempDir()), removed at the
 * end. Atomicity is checked by its observable contract: until commit() the destination keeps
 * its old bytes, and neither commit nor abandonment leaves a temporary file behind. The write
 * failure test provokes a real short write with RLIMIT_FSIZE (EFBIG) instead of needing a full
 * disk. Outputs that are not regular files are made in the test folder (a symbolic link, a FIFO
 * read by a thread, a socket, and, where mknod is allowed, a character device numbered like
 * /dev/null): the system's own device files are never written.
 */
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "base/file_io.h"
#include "special_files.h"
#include "test_fixtures.h"

namespace gpt2 {
namespace {

using testing::error_message;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FileIoTest : public testing::ScratchDirTest {
 protected:
  FileIoTest() : ScratchDirTest("gpt2_file_io") {}

  void write_plain(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << "could not write " << path(name);
  }

  std::string read_plain(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  // Sorted names in the test folder: shows whether temporary files were left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

// Runs `body` and returns the gpt2::Error message it throws (fails the test if none).
TEST_F(FileIoTest, CommitCreatesTheFileAndLeavesNoTemporary) {
  const std::string bytes("hello\0world", 11);  // an embedded NUL must survive
  {
    AtomicFileWriter writer(path("out.bin"));
    writer.write(bytes.data(), 5);
    writer.write(bytes.data() + 5, bytes.size() - 5);
    EXPECT_FALSE(file_exists(path("out.bin"))) << "destination must not appear before commit";
    writer.commit();
  }
  EXPECT_EQ(read_plain("out.bin"), bytes);
  EXPECT_THAT(entries(), ElementsAre("out.bin"));
}

TEST_F(FileIoTest, CommitReplacesAnExistingFile) {
  write_plain("out.txt", "old contents that are longer than the new ones");
  {
    AtomicFileWriter writer(path("out.txt"));
    writer.write("new", 3);
    EXPECT_EQ(read_plain("out.txt"), "old contents that are longer than the new ones")
        << "the old file must stay intact until commit";
    writer.commit();
  }
  EXPECT_EQ(read_plain("out.txt"), "new");
  EXPECT_THAT(entries(), ElementsAre("out.txt"));
}

// write_text_file: the folders made first, the old file replaced whole, nothing left behind.
TEST_F(FileIoTest, WriteTextFileMakesItsFoldersAndReplacesTheFile) {
  write_text_file(path("a/b/out.csv"), "x,y\n1,2\n");
  write_text_file(path("a/b/out.csv"), "x\n");
  EXPECT_EQ(read_plain("a/b/out.csv"), "x\n");
  std::vector<std::string> inner;
  for (const auto& entry : std::filesystem::directory_iterator(path("a/b")))
    inner.push_back(entry.path().filename().string());
  EXPECT_THAT(inner, ElementsAre("out.csv"));
}

TEST_F(FileIoTest, AbandonedWriterKeepsTheOldFileAndRemovesItsTemporary) {
  write_plain("model.ckpt", "old");
  {
    AtomicFileWriter writer(path("model.ckpt"));
    writer.write("partial new checkpoint", 22);
    EXPECT_EQ(entries().size(), 2u) << "the writer works on a temporary file beside the target";
  }  // destroyed without commit, as when an exception unwinds mid-save
  EXPECT_EQ(read_plain("model.ckpt"), "old");
  EXPECT_THAT(entries(), ElementsAre("model.ckpt"));
}

TEST_F(FileIoTest, AbandonedWriterForANewFileLeavesNothing) {
  { AtomicFileWriter writer(path("never.bin")); writer.write("x", 1); }
  EXPECT_FALSE(file_exists(path("never.bin")));
  EXPECT_TRUE(entries().empty());
}

TEST_F(FileIoTest, WriterIntoAMissingFolderNamesTheFile) {
  const std::string target = path("no/such/folder/out.bin");
  const std::string message = error_message([&] { AtomicFileWriter writer(target); });
  EXPECT_THAT(message, HasSubstr(target));
  EXPECT_THAT(message, HasSubstr("No such file or directory"));
}

// A file size limit makes the kernel refuse the write (EFBIG), like a full disk would.
TEST_F(FileIoTest, ShortWriteThrowsNamingTheFileAndTheReasonAndKeepsTheOldFile) {
  write_plain("big.bin", "old");
  struct sigaction ignore_xfsz {}, previous_action {};
  ignore_xfsz.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore_xfsz, &previous_action), 0);
  rlimit previous_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &previous_limit), 0);
  rlimit small_limit = previous_limit;
  small_limit.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small_limit), 0);

  std::string message;
  {
    const std::vector<char> payload(1 << 20, 'x');
    AtomicFileWriter writer(path("big.bin"));
    message = error_message([&] {
      writer.write(payload.data(), payload.size());
      writer.commit();  // the failure may only surface when the buffer is flushed
    });
  }
  ::setrlimit(RLIMIT_FSIZE, &previous_limit);
  ::sigaction(SIGXFSZ, &previous_action, nullptr);

  EXPECT_THAT(message, HasSubstr(path("big.bin")));
  EXPECT_THAT(message, HasSubstr("File too large"));
  EXPECT_EQ(read_plain("big.bin"), "old");
  EXPECT_THAT(entries(), ElementsAre("big.bin"));
}

void write_through(const std::string& path, const std::string& bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes.data(), bytes.size());
  writer.commit();
}

bool is_symlink(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode);
}

TEST_F(FileIoTest, ASymbolicLinkIsWrittenThroughToItsTargetAtomically) {
  std::filesystem::create_directories(path("elsewhere"));
  write_plain("elsewhere/train.bin", "old shard");
  std::filesystem::create_symlink("elsewhere/train.bin", path("train.bin"));  // relative
  write_through(path("train.bin"), "new shard");
  EXPECT_TRUE(is_symlink(path("train.bin")));
  EXPECT_EQ(read_plain("elsewhere/train.bin"), "new shard");
  EXPECT_THAT(entries(), ElementsAre("elsewhere", "train.bin"));

  // A chain of links, the last one dangling: the file it names is created.
  std::filesystem::create_symlink(path("elsewhere/new.bin"), path("second"));
  std::filesystem::create_symlink("second", path("first"));
  write_through(path("first"), "made");
  EXPECT_TRUE(is_symlink(path("first")) && is_symlink(path("second")));
  EXPECT_EQ(read_plain("elsewhere/new.bin"), "made");

  // Abandoned: the target keeps its bytes and no temporary file is left beside it.
  {
    AtomicFileWriter writer(path("train.bin"));
    writer.write("lost", 4);
  }
  EXPECT_EQ(read_plain("elsewhere/train.bin"), "new shard");
  EXPECT_EQ(std::filesystem::directory_iterator(path("elsewhere"))->path().filename().string()
                .find(".tmp."), std::string::npos);
}

TEST_F(FileIoTest, AFifoIsStreamedAndStaysAFifo) {
  testing::FifoReader reader(path("pipe"));
  const std::string shard(100000, 'x');
  write_through(path("pipe"), shard);
  const std::vector<char>& received = reader.finish();
  EXPECT_EQ(std::string(received.begin(), received.end()), shard);
  struct stat info {};
  ASSERT_EQ(::lstat(path("pipe").c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode));
  EXPECT_THAT(entries(), ElementsAre("pipe", "pipe_kept"));
}

TEST_F(FileIoTest, ACharacterDeviceIsWrittenInPlaceNotReplaced) {
  // A node numbered like /dev/null (1, 3), in the test folder: mknod needs privileges.
  if (::mknod(path("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod is not allowed here: " << std::strerror(errno);
  write_through(path("null"), "discarded");
  struct stat info {};
  ASSERT_EQ(::lstat(path("null").c_str(), &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode)) << "the device node was replaced";
  EXPECT_THAT(entries(), ElementsAre("null"));
}

TEST_F(FileIoTest, SocketsAreRefusedAsOutputs) {
  testing::make_unix_socket(path("sock"));
  EXPECT_THAT(error_message([&] { AtomicFileWriter writer(path("sock")); }),
              HasSubstr(path("sock") + ": is a socket"));
  try {
    check_output_path("--output", path("sock"));
    ADD_FAILURE() << "a socket passed as an output";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--output " + path("sock") + " is a socket", 0), 0u)
        << e.what();
  }
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0600), 0);
  write_plain("file", "x");
  for (const char* fine : {"pipe", "file", "missing", "."}) {
    EXPECT_NO_THROW(check_output_path("--output", path(fine))) << fine;
  }
}

TEST_F(FileIoTest, SameFileComparesFilesAndNormalizedPaths) {
  write_plain("o.bin", "x");
  write_plain("other.bin", "y");
  std::filesystem::create_symlink("o.bin", path("link.bin"));
  std::filesystem::create_hard_link(path("o.bin"), path("hard.bin"));
  EXPECT_TRUE(same_file(path("o.bin"), path("./o.bin")));
  EXPECT_TRUE(same_file(path("o.bin"), path("link.bin")));
  EXPECT_TRUE(same_file(path("o.bin"), path("hard.bin")));
  EXPECT_FALSE(same_file(path("o.bin"), path("other.bin")));
  // Neither exists yet: the same spelling once normalized, or a dangling link to the other.
  EXPECT_TRUE(same_file(path("new.bin"), dir_ + "/sub/../new.bin"));
  std::filesystem::create_symlink("new.bin", path("to_new.bin"));
  EXPECT_TRUE(same_file(path("to_new.bin"), path("new.bin")));
  EXPECT_FALSE(same_file(path("new.bin"), path("newer.bin")));
  EXPECT_FALSE(same_file(path("new.bin"), path("o.bin")));
}

TEST_F(FileIoTest, SharedOutputsAreRefusedNamingBothOptions) {
  const auto usage_error = [](const std::vector<CommandPath>& paths) {
    try {
      refuse_shared_outputs(paths);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  const std::string out = path("o.bin"), in = path("doc.txt");
  write_plain("doc.txt", "text");
  EXPECT_EQ(usage_error({{"--output", out, true}, {"--val-output", path("./o.bin"), true}}),
            "--val-output " + path("./o.bin") + " is the same file as --output " + out +
                ": each output needs a file of its own");
  EXPECT_EQ(usage_error({{"--output", path("./doc.txt"), true}, {"--input", in, false}}),
            "--output " + path("./doc.txt") + " is also an --input file (" + in +
                "): refusing to overwrite an input");
  EXPECT_EQ(usage_error({{"--output", out, true}, {"--val-output", path("v.bin"), true},
                         {"--input", in, false}, {"--input", in, false}}),
            "<accepted>");  // inputs may repeat; only outputs must be distinct
}

TEST_F(FileIoTest, ReadsAreBoundedBeforeAndWhileReading) {
  write_plain("big.txt", std::string(1000, 'x'));
  EXPECT_EQ(read_file_text(path("big.txt"), 1000).size(), 1000u);
  EXPECT_EQ(error_message([&] { read_file_text(path("big.txt"), 999); }),
            path("big.txt") + ": larger than the 999-byte limit for this file");
  // A device without end: the bound stops the read.
  EXPECT_EQ(error_message([&] { read_file_bytes("/dev/zero", 1 << 20); }),
            "/dev/zero: larger than the 1048576-byte limit for this file");
}

TEST_F(FileIoTest, ReadFileBytesAndTextReturnTheWholeFile) {
  std::string bytes;
  for (int i = 0; i < 200000; ++i) bytes.push_back(static_cast<char>(i * 31 % 256));
  write_plain("data.bin", bytes);
  const std::vector<char> read = read_file_bytes(path("data.bin"));
  EXPECT_EQ(std::string(read.begin(), read.end()), bytes);
  EXPECT_EQ(read_file_text(path("data.bin")), bytes);

  write_plain("empty.txt", "");
  EXPECT_TRUE(read_file_bytes(path("empty.txt")).empty());
}

TEST_F(FileIoTest, ReadingAMissingFileOrAFolderSaysSo) {
  const std::string missing = path("missing.txt");
  EXPECT_EQ(error_message([&] { read_file_bytes(missing); }), missing + ": no such file");
  EXPECT_EQ(error_message([&] { read_file_text(missing); }), missing + ": no such file");
  const std::string message = error_message([&] { read_file_bytes(dir_); });
  EXPECT_THAT(message, HasSubstr(dir_));
  EXPECT_THAT(message, HasSubstr("is a directory"));
}

TEST_F(FileIoTest, InputFileReportsItsSizeAndShortReadsNamingTheFileAndThePart) {
  write_plain("ten.bin", "0123456789");
  InputFile file(path("ten.bin"));
  EXPECT_EQ(file.size(), 10u);
  char buf[20];
  file.read_exactly(buf, 4, "the magic");
  EXPECT_EQ(std::string(buf, 4), "0123");
  EXPECT_EQ(error_message([&] { file.read_exactly(buf, 8, "the header"); }),
            path("ten.bin") +
                ": read of the header failed after 6 of 8 bytes: unexpected end of file");
  EXPECT_EQ(file.read_some(buf, sizeof buf), 0u);
  EXPECT_EQ(error_message([&] { InputFile missing(path("missing.bin")); }),
            path("missing.bin") + ": no such file");
  EXPECT_EQ(error_message([&] { InputFile folder(dir_); }), dir_ + ": is a directory, not a file");
}

TEST_F(FileIoTest, ReadFileTextReadsFilesWhoseSizeIsUnknown) {
  // /proc files report size 0 yet have content.
  const std::string status = read_file_text("/proc/self/status");
  EXPECT_NE(status.find("VmRSS"), std::string::npos);
}

TEST_F(FileIoTest, ExpandGlobReturnsMatchesInByteOrder) {
  for (const char* name : {"shard_10.bin", "shard_9.bin", "shard_B.bin", "shard_a.bin",
                           "other.txt"}) {
    write_plain(name, "");
  }
  // Byte order: digits < upper case < lower case, and "10" < "9" (no natural sort).
  EXPECT_THAT(expand_glob(path("shard_*.bin")),
              ElementsAre(path("shard_10.bin"), path("shard_9.bin"), path("shard_B.bin"),
                          path("shard_a.bin")));
  EXPECT_THAT(expand_glob(path("shard_[0-9]*.bin")),
              ElementsAre(path("shard_10.bin"), path("shard_9.bin")));
  EXPECT_THAT(expand_glob(path("shard_?.bin")),
              ElementsAre(path("shard_9.bin"), path("shard_B.bin"), path("shard_a.bin")));
}

TEST_F(FileIoTest, ExpandGlobTreatsAPatternWithoutWildcardsAsALiteralPath) {
  write_plain("one.bin", "");
  EXPECT_THAT(expand_glob(path("one.bin")), ElementsAre(path("one.bin")));
  const std::string missing = path("two.bin");
  EXPECT_EQ(error_message([&] { expand_glob(missing); }), missing + ": no such file");
}

TEST_F(FileIoTest, ExpandGlobWithNoMatchNamesThePattern) {
  write_plain("train_000.bin", "");
  const std::string pattern = path("val_*.bin");
  EXPECT_EQ(error_message([&] { expand_glob(pattern); }), "no file matches '" + pattern + "'");
}

TEST_F(FileIoTest, FileExists) {
  write_plain("here.txt", "x");
  EXPECT_TRUE(file_exists(path("here.txt")));
  EXPECT_FALSE(file_exists(path("gone.txt")));
}

TEST_F(FileIoTest, MakeDirectoriesCreatesEveryLevelAndIsIdempotent) {
  const std::string nested = path("a/b/c");
  make_directories(nested);
  struct stat info {};
  ASSERT_EQ(::stat(nested.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  make_directories(nested);           // already there: fine
  make_directories(nested + "/");     // trailing slash: fine
  make_directories(path("a//b/d"));   // doubled slash: fine
  EXPECT_TRUE(file_exists(path("a/b/d")));
}

TEST_F(FileIoTest, MakeDirectoriesFailsWhenAFileIsInTheWay) {
  write_plain("blocker", "x");
  const std::string target = path("blocker/sub");
  const std::string message = error_message([&] { make_directories(target); });
  EXPECT_THAT(message, HasSubstr(target));
  EXPECT_THAT(message, HasSubstr(path("blocker")));
}

}  // namespace
}  // namespace gpt2
