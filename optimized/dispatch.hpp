#pragma once
// The host entry of every kernel: validate (problem/), then run on the backend `opt` selects.
// Included by each component's optimized/<stem>.cpp only.
#include "core/error.hpp"
#include "optimized/backend.hpp"

// Runs fn on the backend `opt` selects; without CUDA in the build, cuda is bad input.
#if defined(TANDEM_WITH_CUDA)
#define TANDEM_CUDA_OR_THROW(fn, ...) cuda_backend::fn(__VA_ARGS__)
#else
#define TANDEM_CUDA_OR_THROW(fn, ...) throw BadInput("backend cuda: " + cuda_status().detail)
#endif
#define TANDEM_DISPATCH(opt, fn, ...)                           \
  ((opt).backend == Backend::emu ? emu_backend::fn(__VA_ARGS__) \
                                 : TANDEM_CUDA_OR_THROW(fn, __VA_ARGS__))
