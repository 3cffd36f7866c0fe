#pragma once
// Global memory for one backend: cudaMalloc on a GPU, host memory under the emulator. New
// arrays are poisoned (all-ones bytes = NaN) so an element a kernel forgets to write shows.
// Under the emulator every array sits between two guard zones of poison (kDeviceGuardBytes):
// a kernel's read past either end reads NaN (floats) or -1 (integers), which the comparisons
// catch, and a write there is found when the array is downloaded (a KernelFault naming the
// array's size and the offset) or, for an array never downloaded, when it dies (reported like a
// device trap). What a GPU would show as an illegal address or silent corruption, without ASan.
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "optimized/backend.hpp"
#include "optimized/kernel.cuh"
#if defined(TANDEM_EMU)
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "core/error.hpp"
#endif

namespace tandem::TANDEM_BACKEND_NS {

#if defined(TANDEM_EMU)
// Wider than the longest vector access (16 bytes) a tail loop can overrun by.
inline constexpr size_t kDeviceGuardBytes = 256;
#endif

template <class T>
class DeviceArray {
  struct Unpoisoned {};

 public:
  explicit DeviceArray(size_t n) : DeviceArray(n, Unpoisoned{}) { poison(); }
  // A copy of `src`: every element written, so no poison first (a release-width weight matrix
  // is hundreds of MB).
  explicit DeviceArray(const std::vector<T>& src) : DeviceArray(src.size(), Unpoisoned{}) {
    upload(src);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
#if defined(TANDEM_EMU)
    if (raw_ && !guard_reported_)
      if (const std::optional<std::ptrdiff_t> at = damaged_guard()) {
        std::fprintf(stderr, "emu: %s\n", guard_message(*at).c_str());
        std::abort();
      }
#else
    cudaFree(ptr_);
#endif
  }

 private:
  DeviceArray(size_t n, Unpoisoned) : n_(n) {
#if defined(TANDEM_EMU)
    static_assert(alignof(T) <= kDeviceGuardBytes && kDeviceGuardBytes % 16 == 0,
                  "the guard keeps the array's 16-byte alignment");
    // new std::byte[] is aligned for every fundamental type; the guards keep 16 bytes of it.
    raw_.reset(new std::byte[bytes() + 2 * kDeviceGuardBytes]);
    memset(raw_.get(), 0xff, kDeviceGuardBytes);
    memset(raw_.get() + kDeviceGuardBytes + bytes(), 0xff, kDeviceGuardBytes);
    ptr_ = reinterpret_cast<T*>(raw_.get() + kDeviceGuardBytes);
#else
    if (n_ > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes()));  // an empty optional input stays null
#endif
  }

 public:
  friend void swap(DeviceArray& a, DeviceArray& b) noexcept {
    std::swap(a.n_, b.n_);
    std::swap(a.ptr_, b.ptr_);
#if defined(TANDEM_EMU)
    a.raw_.swap(b.raw_);
    std::swap(a.guard_reported_, b.guard_reported_);
#endif
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t bytes() const { return n_ * sizeof(T); }

  // An optional input may be empty: nothing to touch (memset/memcpy need non-null pointers).
  void poison() {
    if (n_ == 0) return;
#if defined(TANDEM_EMU)
    memset(static_cast<void*>(ptr_), 0xff, bytes());
#else
    CUDA_CHECK(cudaMemset(ptr_, 0xff, bytes()));
#endif
  }
  void upload(const std::vector<T>& src) {
    if (n_ == 0) return;
#if defined(TANDEM_EMU)
    memcpy(static_cast<void*>(ptr_), src.data(), bytes());
#else
    CUDA_CHECK(cudaMemcpy(ptr_, src.data(), bytes(), cudaMemcpyHostToDevice));
#endif
  }
  std::vector<T> download() const {
#if defined(TANDEM_EMU)
    if (const std::optional<std::ptrdiff_t> at = damaged_guard()) {
      guard_reported_ = true;
      throw KernelFault("device memory", guard_message(*at));
    }
#endif
    std::vector<T> out(n_);
    if (n_ == 0) return out;
#if defined(TANDEM_EMU)
    memcpy(static_cast<void*>(out.data()), ptr_, bytes());
#else
    CUDA_CHECK(cudaMemcpy(out.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
#endif
    return out;
  }

 private:
#if defined(TANDEM_EMU)
  // The first guard byte not poison, as an offset from the array's first byte (negative:
  // before it).
  std::optional<std::ptrdiff_t> damaged_guard() const {
    const std::byte* const begin = raw_.get() + kDeviceGuardBytes;
    for (std::ptrdiff_t i = -std::ptrdiff_t(kDeviceGuardBytes); i < 0; ++i)
      if (begin[i] != std::byte{0xff}) return i;
    const std::ptrdiff_t end = std::ptrdiff_t(bytes());
    for (std::ptrdiff_t i = end; i < end + std::ptrdiff_t(kDeviceGuardBytes); ++i)
      if (begin[i] != std::byte{0xff}) return i;
    return std::nullopt;
  }
  std::string guard_message(std::ptrdiff_t at) const {
    return fmt::format(
        "a kernel wrote outside a device array of {} bytes ({} elements): byte {} was changed",
        bytes(), n_, at);
  }
#endif

  size_t n_;
  T* ptr_ = nullptr;
#if defined(TANDEM_EMU)
  std::unique_ptr<std::byte[]> raw_;
  mutable bool guard_reported_ = false;  // download threw for it: the destructor stays quiet
#endif
};

// Brackets one host-level run: sets the emulator's schedule and starts its byte counts;
// end_run returns the launches' counts (emu) or waits for the device (cuda).
inline void begin_run(const RunOptions& opt) {
#if defined(TANDEM_EMU)
  emu::set_schedule(opt.schedule);
  emu::set_block_workers(opt.block_workers);
  emu::set_hazard_watch(opt.watch_hazards);
  emu::take_launch_log();
#else
  (void)opt;
#endif
}
inline LaunchLog end_run() {
#if defined(TANDEM_EMU)
  emu::set_hazard_watch(true);  // a launch outside a run (a test's own) is watched
  return emu::take_launch_log();
#else
  CUDA_CHECK(cudaDeviceSynchronize());
  return {};
#endif
}

// Host float tensors <-> device arrays of the storage dtype Act (values representable in Act).
// A projection's weights [out, in] as GEMV kernels read them (dot4_kmajor): k-major [in, stride]
// with stride = out rounded up to 4 (zeros after out), so a thread's four output channels are one
// 16-byte load per input.
inline std::vector<float> k_major(const Tensor<float>& w) {
  if (w.data.empty()) return {};
  const int64_t out = w.dim(0), in = w.dim(1), stride = (out + 3) / 4 * 4;
  std::vector<float> t(static_cast<size_t>(in * stride), 0.0f);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) t[size_t(k * stride + o)] = w.data[size_t(o * in + k)];
  return t;
}

template <class Act>
std::vector<Act> to_storage(const Tensor<float>& t) {
  std::vector<Act> out(t.data.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = from_float<Act>(t.data[i]);
  return out;
}

template <class Act>
Tensor<float> download_floats(const DeviceArray<Act>& a, Shape shape) {
  const std::vector<Act> v = a.download();
  Tensor<float> t(std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data[i] = to_float<Act>(v[i]);
  return t;
}

}  // namespace tandem::TANDEM_BACKEND_NS
