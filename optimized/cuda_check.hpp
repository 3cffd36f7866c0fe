#pragma once
// The one error-checking macro for CUDA runtime calls and launches.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#define CUDA_CHECK(expr)                                                                       \
  do {                                                                                         \
    const cudaError_t tandem_cuda_err_ = (expr);                                               \
    if (tandem_cuda_err_ != cudaSuccess)                                                       \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +        \
                               ": " #expr " failed: " + cudaGetErrorString(tandem_cuda_err_)); \
  } while (0)
