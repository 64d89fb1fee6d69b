/**
 * @file tensor_map.cu
 * @brief make_tensor_map_bf16_3d: cuTensorMapEncodeTiled through the runtime's entry point.
 */
#include "kernels/gpu/tensor_map.cuh"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "base/error.h"

namespace gpt2::gpu {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    GPT2_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                     cudaEnableDefault, &status));
    GPT2_CHECK(status == cudaDriverEntryPointSuccess && fn != nullptr,
               "the CUDA driver has no cuTensorMapEncodeTiled (needs a CUDA 12+ driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

}  // namespace

CUtensorMap make_tensor_map_bf16_3d(const void* base, const uint64_t (&dims)[3],
                                    uint64_t stride1_bytes, uint64_t stride2_bytes,
                                    uint32_t box0, uint32_t box1) {
  GPT2_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "TMA base address not 16-byte aligned");
  GPT2_CHECK(stride1_bytes % 16 == 0 && stride2_bytes % 16 == 0,
             "TMA strides must be multiples of 16 bytes (got ", stride1_bytes, ", ", stride2_bytes,
             ")");
  GPT2_CHECK(box0 * 2 <= 128 && box1 >= 1 && box1 <= 256, "TMA box ", box0, "x", box1,
             " does not fit the 128-byte swizzle");
  CUtensorMap map;
  const cuuint64_t global_dims[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t global_strides[2] = {stride1_bytes, stride2_bytes};
  const cuuint32_t box[3] = {box0, box1, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult result = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), global_dims,
      global_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  GPT2_CHECK(result == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult ", int(result),
             ") for dims ", dims[0], "x", dims[1], "x", dims[2], ", box ", box0, "x", box1);
  return map;
}

}  // namespace gpt2::gpu
