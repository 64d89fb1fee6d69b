/**
 * @file decompressing_reader.cpp
 * @brief Plain, gzip (zlib's inflate) and zstd (ZSTD_decompressStream) readers behind one read().
 *
 * Each codec owns the InputFile and a 256 KiB input buffer. "Inside a member/frame" is tracked
 * explicitly: it starts true (an empty compressed file is truncated too), turns false when
 * zlib returns Z_STREAM_END or zstd returns 0 (a frame fully decoded and flushed), and true
 * again when more input follows. The end of the file while inside one is the truncation error.
 */
#include "data/decompressing_reader.h"

#if defined(GPT2_HAVE_ZLIB)
#include <zlib.h>
#endif
#if defined(GPT2_HAVE_ZSTD)
#include <zstd.h>
#endif

#include <algorithm>
#include <climits>
#include <vector>

#include "base/error.h"
#include "base/file_io.h"

namespace gpt2 {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

constexpr size_t kInputBufferBytes = size_t{256} << 10;

}  // namespace

Compression compression_of(const std::string& path) {
  if (ends_with(path, ".gz")) return Compression::kGzip;
  if (ends_with(path, ".zst")) return Compression::kZstd;
  return Compression::kNone;
}

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::kGzip: return "gzip";
    case Compression::kZstd: return "zstd";
    case Compression::kNone: break;
  }
  return "none";
}

class DecompressingReader::Codec {
 public:
  explicit Codec(const std::string& path) : file_(path) {}
  virtual ~Codec() = default;
  virtual size_t read(char* out, size_t capacity) = 0;
  uint64_t file_bytes_read() const { return file_bytes_read_; }

 protected:
  /// Refills the input buffer when it is used up; false at the end of the file.
  bool refill_input() {
    if (input_pos_ < input_.size()) return true;
    if (at_file_end_) return false;
    input_.resize(kInputBufferBytes);
    const size_t got = file_.read_some(input_.data(), input_.size());
    input_.resize(got);
    input_pos_ = 0;
    file_bytes_read_ += got;
    if (got == 0) at_file_end_ = true;
    return got > 0;
  }

  InputFile file_;
  std::vector<char> input_;
  size_t input_pos_ = 0;
  bool at_file_end_ = false;
  uint64_t file_bytes_read_ = 0;
};

namespace {

class PlainCodec : public DecompressingReader::Codec {
 public:
  using Codec::Codec;
  size_t read(char* out, size_t capacity) override {
    const size_t got = file_.read_some(out, capacity);
    file_bytes_read_ += got;
    return got;
  }
};

#if defined(GPT2_HAVE_ZLIB)
class GzipCodec : public DecompressingReader::Codec {
 public:
  explicit GzipCodec(const std::string& path) : Codec(path) {
    // 15 + 16: the largest window, gzip wrapper only (a raw zlib stream is not a .gz file).
    if (inflateInit2(&stream_, 15 + 16) != Z_OK) GPT2_FAIL(path, ": cannot start zlib's inflate");
  }
  ~GzipCodec() override { inflateEnd(&stream_); }

  size_t read(char* out, size_t capacity) override {
    const uInt want = static_cast<uInt>(std::min<size_t>(capacity, UINT_MAX));
    for (;;) {
      if (!refill_input()) {
        if (inside_member_) GPT2_FAIL("truncated gzip data: the file ends inside a compressed "
                                      "member");
        return 0;
      }
      if (!inside_member_) {
        inflateReset(&stream_);  // another member follows the last one
        inside_member_ = true;
      }
      stream_.next_in = reinterpret_cast<Bytef*>(input_.data() + input_pos_);
      stream_.avail_in = static_cast<uInt>(input_.size() - input_pos_);
      stream_.next_out = reinterpret_cast<Bytef*>(out);
      stream_.avail_out = want;
      const int rc = inflate(&stream_, Z_NO_FLUSH);
      input_pos_ = input_.size() - stream_.avail_in;
      if (rc == Z_STREAM_END) {
        inside_member_ = false;
      } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
        GPT2_FAIL("corrupt gzip data: ", stream_.msg != nullptr ? stream_.msg : "bad stream");
      } else if (rc == Z_MEM_ERROR) {
        GPT2_FAIL("out of memory in zlib's inflate");
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        GPT2_FAIL("gzip data: zlib error ", rc);
      }
      const size_t produced = want - stream_.avail_out;
      if (produced > 0) return produced;
    }
  }

 private:
  z_stream stream_{};
  bool inside_member_ = true;
};

#endif  // GPT2_HAVE_ZLIB

#if defined(GPT2_HAVE_ZSTD)
class ZstdCodec : public DecompressingReader::Codec {
 public:
  explicit ZstdCodec(const std::string& path) : Codec(path), context_(ZSTD_createDCtx()) {
    if (context_ == nullptr) GPT2_FAIL(path, ": cannot create a zstd decompression context");
  }
  ~ZstdCodec() override { ZSTD_freeDCtx(context_); }

  size_t read(char* out, size_t capacity) override {
    for (;;) {
      ZSTD_inBuffer in{nullptr, 0, 0};
      const bool input_left = refill_input();
      if (input_left) in = {input_.data() + input_pos_, input_.size() - input_pos_, 0};
      if (!input_left && !inside_frame_) return 0;
      // Without input the call still flushes what the context holds of the current frame.
      ZSTD_outBuffer output{out, capacity, 0};
      const size_t rc = ZSTD_decompressStream(context_, &output, &in);
      input_pos_ += in.pos;
      if (ZSTD_isError(rc)) GPT2_FAIL("corrupt zstd data: ", ZSTD_getErrorName(rc));
      inside_frame_ = rc != 0;  // 0: a frame is fully decoded and flushed
      if (output.pos > 0) return output.pos;
      if (!input_left) {
        if (inside_frame_) {
          GPT2_FAIL("truncated zstd data: the file ends inside a compressed frame");
        }
        return 0;
      }
    }
  }

 private:
  ZSTD_DCtx* context_;
  bool inside_frame_ = true;
};
#endif  // GPT2_HAVE_ZSTD

}  // namespace

DecompressingReader::DecompressingReader(const std::string& path) {
  switch (compression_of(path)) {
    case Compression::kGzip:
#if defined(GPT2_HAVE_ZLIB)
      codec_ = std::make_unique<GzipCodec>(path);
      break;
#else
      GPT2_FAIL(path, ": this build reads no gzip files (zlib was not found when it was "
                "configured; Debian: apt-get install zlib1g-dev, then rebuild)");
#endif
    case Compression::kZstd:
#if defined(GPT2_HAVE_ZSTD)
      codec_ = std::make_unique<ZstdCodec>(path);
      break;
#else
      GPT2_FAIL(path, ": this build reads no zstd files (zstd was not found when it was "
                "configured; Debian: apt-get install libzstd-dev, then rebuild)");
#endif
    case Compression::kNone: codec_ = std::make_unique<PlainCodec>(path); break;
  }
}

DecompressingReader::~DecompressingReader() = default;

size_t DecompressingReader::read(char* out, size_t capacity) {
  return capacity == 0 ? 0 : codec_->read(out, capacity);
}

uint64_t DecompressingReader::file_bytes_read() const { return codec_->file_bytes_read(); }

}  // namespace gpt2
