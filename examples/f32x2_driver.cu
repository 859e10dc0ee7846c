// A driver unit for `liftgate explain --compile-check --unit`: it instantiates FlashInfer's
// header-only float2 helpers (flashinfer/trtllm/fmha/kernelUtils.h), whose `mul.f32x2` path is
// gated on __CUDA_ARCH__ >= 1000, so the assembler sees the gated code for the target.
#include <cstdint>

#include <flashinfer/trtllm/fmha/kernelUtils.h>

__global__ void scale(float2* out, const float2* a, const float2* b) {
  tensorrt_llm::kernels::mul(out[threadIdx.x], a[threadIdx.x], b[threadIdx.x]);
}
