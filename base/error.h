/**
 * @file error.h
 * @brief The project's one error header: plain, CUDA and cuBLAS checks.
 *
 * Every failed check throws; nothing below main() calls exit(). main() catches and exits
 * non-zero with the message (run_tool_main does it for every program):
 *   - gpt2::UsageError  bad command-line values          -> exit code 2
 *   - gpt2::Error       anything else (bad files, OOM...) -> exit code 1
 * Messages for input problems name the file/option and the problem; internal checks
 * (GPT2_CHECK, GPT2_CUDA_CHECK...) add file, line and the failed expression.
 * The *_NOTHROW variants print and continue, for destructors. The MPI and NCCL checks exist in
 * the translation units that define GPT2_HAVE_MPI / GPT2_HAVE_NCCL (parallel/), which include the
 * libraries' headers; the rest of the project never sees them.
 */
#pragma once

#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>

namespace gpt2 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

/// A program's main(): runs body() (which returns the exit code) and turns what it throws into
/// the exit codes above, printing "program: error: message" to stderr after what is on stdout.
template <typename Body>
int run_tool_main(const char* program, Body&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename Head, typename... Tail>
void append_all(std::ostringstream& os, const Head& head, const Tail&... tail) {
  os << head;
  append_all(os, tail...);
}
}  // namespace detail

/// Concatenates its arguments with operator<<, e.g. str_cat("got ", n, " tokens").
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append_all(os, args...);
  return os.str();
}

[[noreturn]] inline void throw_internal(const char* file, int line, const char* expr,
                                        const std::string& detail) {
  throw Error(str_cat(file, ":", line, ": check failed: ", expr,
                      detail.empty() ? "" : " (", detail, detail.empty() ? "" : ")"));
}

}  // namespace gpt2

/// Internal invariant: throws gpt2::Error with file, line, expression and an optional message.
#define GPT2_CHECK(cond, ...)                                                         \
  do {                                                                                \
    if (!(cond)) ::gpt2::throw_internal(__FILE__, __LINE__, #cond,                    \
                                        ::gpt2::str_cat("", ##__VA_ARGS__));      \
  } while (0)

/// User-facing input error: throws gpt2::Error with exactly the message given.
#define GPT2_FAIL(...) throw ::gpt2::Error(::gpt2::str_cat(__VA_ARGS__))

/// Bad command-line value: throws gpt2::UsageError (exit code 2).
#define GPT2_USAGE_FAIL(...) throw ::gpt2::UsageError(::gpt2::str_cat(__VA_ARGS__))

#if defined(__CUDACC__) || defined(GPT2_HAVE_CUDA)
#include <cuda_runtime.h>

#define GPT2_CUDA_CHECK(call)                                                             \
  do {                                                                                    \
    cudaError_t gpt2_err_ = (call);                                                       \
    if (gpt2_err_ != cudaSuccess)                                                         \
      ::gpt2::throw_internal(__FILE__, __LINE__, #call, cudaGetErrorString(gpt2_err_));   \
  } while (0)

#define GPT2_CUDA_CHECK_NOTHROW(call)                                                       \
  do {                                                                                      \
    cudaError_t gpt2_err_ = (call);                                                         \
    if (gpt2_err_ != cudaSuccess)                                                           \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                  \
              cudaGetErrorString(gpt2_err_));                                               \
  } while (0)

/// After a kernel launch: the launch error always; in Debug builds (CMAKE_BUILD_TYPE=Debug
/// defines GPT2_SYNC_LAUNCHES, kernels/CMakeLists.txt) a device synchronize too, so a faulting
/// kernel is named at its launch site.
#ifdef GPT2_SYNC_LAUNCHES
#define GPT2_CUDA_CHECK_LAUNCH()                     \
  do {                                               \
    GPT2_CUDA_CHECK(cudaGetLastError());             \
    GPT2_CUDA_CHECK(cudaDeviceSynchronize());        \
  } while (0)
#else
#define GPT2_CUDA_CHECK_LAUNCH() GPT2_CUDA_CHECK(cudaGetLastError())
#endif
#endif  // CUDA

#if defined(GPT2_HAVE_CUBLAS)
#include <cublas_v2.h>
#define GPT2_CUBLAS_CHECK(call)                                                          \
  do {                                                                                   \
    cublasStatus_t gpt2_st_ = (call);                                                    \
    if (gpt2_st_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::gpt2::throw_internal(__FILE__, __LINE__, #call, cublasGetStatusString(gpt2_st_)); \
  } while (0)
#endif

#if defined(GPT2_HAVE_MPI)
// MPI's C API only: the deprecated C++ bindings do not compile warning-free.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#define GPT2_MPI_CHECK(call)                                                                  \
  do {                                                                                        \
    const int gpt2_mpi_rc_ = (call);                                                          \
    if (gpt2_mpi_rc_ != MPI_SUCCESS) {                                                        \
      char gpt2_mpi_msg_[MPI_MAX_ERROR_STRING];                                               \
      int gpt2_mpi_len_ = 0;                                                                  \
      MPI_Error_string(gpt2_mpi_rc_, gpt2_mpi_msg_, &gpt2_mpi_len_);                          \
      ::gpt2::throw_internal(__FILE__, __LINE__, #call,                                       \
                             std::string(gpt2_mpi_msg_, static_cast<size_t>(gpt2_mpi_len_))); \
    }                                                                                         \
  } while (0)
#endif

#if defined(GPT2_HAVE_NCCL)
#include <nccl.h>
#define GPT2_NCCL_CHECK(call)                                                                  \
  do {                                                                                         \
    const ncclResult_t gpt2_nccl_rc_ = (call);                                                 \
    if (gpt2_nccl_rc_ != ncclSuccess)                                                          \
      ::gpt2::throw_internal(__FILE__, __LINE__, #call, ncclGetErrorString(gpt2_nccl_rc_));    \
  } while (0)
#define GPT2_NCCL_CHECK_NOTHROW(call)                                                          \
  do {                                                                                         \
    const ncclResult_t gpt2_nccl_rc_ = (call);                                                 \
    if (gpt2_nccl_rc_ != ncclSuccess)                                                          \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                    \
              ncclGetErrorString(gpt2_nccl_rc_));                                              \
  } while (0)
#endif
