// safetensors parser (core/safetensors): any bytes give a file or BadInput; a parsed file
// serialises and parses back to the same tensors.
#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  try {
    const Safetensors st =
        parse_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    const Safetensors back = parse_safetensors(serialize_safetensors(st), "round trip");
    if (back.tensors.size() != st.tensors.size()) fuzz::fail("tensor count changed");
    for (const auto& [name, t] : st.tensors) {
      const auto it = back.tensors.find(name);
      if (it == back.tensors.end() || it->second.shape != t.shape || it->second.dtype != t.dtype ||
          it->second.bytes != t.bytes)
        fuzz::fail("tensor '" + name + "' changed in a round trip");
    }
  } catch (const BadInput&) {
  }
  return 0;
}
