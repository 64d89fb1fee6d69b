/**
 * @file compressed_fixtures.h
 * @brief Test inputs compressed in process: gzip (zlib's deflate with the gzip wrapper) and
 *        zstd (one frame per call, with its content checksum), written with write_text_file.
 *        A build without zlib or zstd has neither (the functions throw); the tests that need
 *        them start with GPT2_REQUIRE_COMPRESSION(), which skips saying why.
 */
#pragma once

#include <gtest/gtest.h>
#if defined(GPT2_HAVE_ZLIB)
#include <zlib.h>
#endif
#if defined(GPT2_HAVE_ZSTD)
#include <zstd.h>
#endif

#include <fstream>
#include <stdexcept>
#include <string>

#if defined(GPT2_HAVE_ZLIB) && defined(GPT2_HAVE_ZSTD)
#define GPT2_REQUIRE_COMPRESSION() \
  do {                             \
  } while (0)
#else
#define GPT2_REQUIRE_COMPRESSION()                                                    \
  GTEST_SKIP() << "this build has no zlib or no zstd (Debian: zlib1g-dev libzstd-dev): " \
                  "gpt2-tokenize reads no compressed files"
#endif

namespace gpt2::testing {

#if defined(GPT2_HAVE_ZLIB)
inline std::string gzip_bytes(const std::string& text) {
  z_stream stream{};
  // 15 + 16: the largest window, written with a gzip header and trailer.
  if (deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  std::string out(deflateBound(&stream, static_cast<uLong>(text.size())) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  return out;
}
#else
inline std::string gzip_bytes(const std::string&) { throw std::runtime_error("no zlib"); }
#endif

#if defined(GPT2_HAVE_ZSTD)
inline std::string zstd_bytes(const std::string& text) {
  // With the content checksum, as the zstd command writes by default: corruption is detected.
  ZSTD_CCtx* context = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 1);
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t size = ZSTD_compress2(context, out.data(), out.size(), text.data(), text.size());
  ZSTD_freeCCtx(context);
  if (ZSTD_isError(size)) throw std::runtime_error(ZSTD_getErrorName(size));
  out.resize(size);
  return out;
}
#else
inline std::string zstd_bytes(const std::string&) { throw std::runtime_error("no zstd"); }
#endif

inline void write_text_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace gpt2::testing
