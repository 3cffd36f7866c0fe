#pragma once
#include <stdexcept>
#include <string>

// NOTE: fmt stays out of nvcc's front end (it cannot evaluate fmt's consteval checks), so .cu
// translation units see BadInput but not the formatting helper.
#if !defined(__CUDACC__)
#include <fmt/format.h>
#endif

namespace tandem {

// Exit codes of the tandem program (DESIGN section 8).
enum class ExitCode : int { ok = 0, verification_failed = 1, bad_input = 2, internal = 3 };

// Bad input (config, golden files, safetensors, CLI flags, shapes, ids): the message names the
// file and field; the program exits 2.
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An optimized kernel produced a value the harness cannot use downstream (a token id out of
// range, an expert index of -1, a NaN where the next kernel refuses one): a verification failure
// of the code under test (exit 1, the case named, the run goes on), never bad input.
class KernelFault : public std::runtime_error {
 public:
  KernelFault(std::string tensor, const std::string& message)
      : std::runtime_error(message), tensor_(std::move(tensor)) {}
  // The first output found wrong (named as in the case's tensors or taps).
  const std::string& tensor() const { return tensor_; }

 private:
  std::string tensor_;
};

#if !defined(__CUDACC__)
template <class... Args>
[[noreturn]] void throw_bad_input(fmt::format_string<Args...> f, Args&&... args) {
  throw BadInput(fmt::format(f, std::forward<Args>(args)...));
}
#endif

}  // namespace tandem
