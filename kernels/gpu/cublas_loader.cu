/**
 * @file cublas_loader.cu
 * @brief cuBLAS and cuBLASLt loaded on first use, not when a program starts.
 *
 * Linked as a shared library, libcublasLt is relocated and partly read in at every start: about
 * 150 MB of resident memory before main(), in every tool built with CUDA, even for --help or a
 * --device cpu run. So the CUDA code is linked against the definitions below instead (CMake
 * option GPT2_LAZY_CUBLAS, on by default): each is the cuBLAS function of that name, with the
 * header's own prototype (a mismatch does not compile), which opens the library the first time
 * any of them is called (dlopen of libcublas.so.<major> / libcublasLt.so.<major>, the soname
 * this build's headers name, searched as the dynamic loader searches; failing that, the file
 * CMake found), looks the real function up once and calls it. A call then costs one indirect
 * jump; what runs is exactly the library's function with the same arguments, CUDA graph
 * capture included. A library or function that cannot be found throws gpt2::Error naming it.
 * Only the functions this project calls are here: a new one fails to link until it is added.
 * The executable does not export these names, so the libraries' calls between themselves
 * reach each other, never this file.
 */
#include <dlfcn.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "base/error.h"

namespace gpt2 {
namespace {

#define GPT2_STRINGIFY_VALUE(x) #x
#define GPT2_STRINGIFY(x) GPT2_STRINGIFY_VALUE(x)

struct LibraryName {
  const char* soname;      // what the dynamic loader is asked for first
  const char* configured;  // the file CMake found, tried second
};
constexpr LibraryName kCublas{"libcublas.so." GPT2_STRINGIFY(CUBLAS_VER_MAJOR),
                              GPT2_CUBLAS_LIBRARY};
constexpr LibraryName kCublasLt{"libcublasLt.so." GPT2_STRINGIFY(CUBLAS_VER_MAJOR),
                                GPT2_CUBLASLT_LIBRARY};

void* open_library(const LibraryName& name) {
  void* handle = ::dlopen(name.soname, RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  const std::string first_reason = ::dlerror();
  handle = ::dlopen(name.configured, RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  GPT2_FAIL("the CUDA backend needs cuBLAS and cannot load it: ", first_reason, "; ",
            name.configured, ": ", ::dlerror(), " (add cuBLAS's folder to LD_LIBRARY_PATH)");
}

// One handle per library, opened by the first call that needs it (thread-safe; a failed open
// is tried again by the next call).
void* library(const LibraryName& name) {
  if (&name == &kCublas) {
    static void* const cublas = open_library(kCublas);
    return cublas;
  }
  static void* const cublas_lt = open_library(kCublasLt);
  return cublas_lt;
}

template <typename Function>
Function* real_function(const LibraryName& name, const char* function) {
  void* address = ::dlsym(library(name), function);
  if (address == nullptr)
    GPT2_FAIL(name.soname, " has no function ", function, " (a cuBLAS older than the headers "
              "this was built with?)");
  return reinterpret_cast<Function*>(address);
}

}  // namespace
}  // namespace gpt2

// The real function `name` of the library `lib` (kCublas or kCublasLt), looked up at the first
// call; GPT2_REAL_OF_TYPE for a name the header also gives a C++ overload.
#define GPT2_REAL_OF_TYPE(lib, name, Type) \
  static const auto real = ::gpt2::real_function<Type>(::gpt2::lib, #name)
#define GPT2_REAL(lib, name) GPT2_REAL_OF_TYPE(lib, name, decltype(name))

// The C functions of the names cublas_api.h also overloads in C++ (with legacy types).
using CublasGemmEx = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                    int, int, const void*, const void*, cudaDataType, int,
                                    const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using CublasGemmStridedBatchedEx =
    cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                   const void*, const void*, cudaDataType, int, long long int, const void*,
                   cudaDataType, int, long long int, const void*, void*, cudaDataType, int,
                   long long int, int, cublasComputeType_t, cublasGemmAlgo_t);

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  GPT2_REAL(kCublas, cublasCreate_v2);
  return real(handle);
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  GPT2_REAL(kCublas, cublasDestroy_v2);
  return real(handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  GPT2_REAL(kCublas, cublasSetStream_v2);
  return real(handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  GPT2_REAL(kCublas, cublasSetMathMode);
  return real(handle, mode);
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  GPT2_REAL(kCublas, cublasGetStatusString);
  return real(status);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc,
                                         cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  GPT2_REAL_OF_TYPE(kCublas, cublasGemmEx, CublasGemmEx);
  return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
              Ctype, ldc, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  GPT2_REAL_OF_TYPE(kCublas, cublasGemmStridedBatchedEx, CublasGemmStridedBatchedEx);
  return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
              strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  GPT2_REAL(kCublasLt, cublasLtCreate);
  return real(handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  GPT2_REAL(kCublasLt, cublasLtDestroy);
  return real(handle);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A,
    cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
    const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
    const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
    cudaStream_t stream) {
  GPT2_REAL(kCublasLt, cublasLtMatmul);
  return real(handle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
              workspace, workspaceSizeInBytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                                     cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  GPT2_REAL(kCublasLt, cublasLtMatmulDescCreate);
  return real(matmulDesc, computeType, scaleType);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  GPT2_REAL(kCublasLt, cublasLtMatmulDescDestroy);
  return real(matmulDesc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t sizeInBytes) {
  GPT2_REAL(kCublasLt, cublasLtMatmulDescSetAttribute);
  return real(matmulDesc, attr, buf, sizeInBytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  GPT2_REAL(kCublasLt, cublasLtMatmulPreferenceCreate);
  return real(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  GPT2_REAL(kCublasLt, cublasLtMatmulPreferenceDestroy);
  return real(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t sizeInBytes) {
  GPT2_REAL(kCublasLt, cublasLtMatmulPreferenceSetAttribute);
  return real(pref, attr, buf, sizeInBytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  GPT2_REAL(kCublasLt, cublasLtMatrixLayoutCreate);
  return real(matLayout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  GPT2_REAL(kCublasLt, cublasLtMatrixLayoutDestroy);
  return real(matLayout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  GPT2_REAL(kCublasLt, cublasLtMatmulAlgoGetHeuristic);
  return real(handle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
              heuristicResultsArray, returnAlgoCount);
}

}  // extern "C"
