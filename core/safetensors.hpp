#pragma once
// safetensors I/O (https://github.com/huggingface/safetensors format): u64 little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then
// one byte buffer that the tensors cover exactly, without holes or overlaps.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace tandem {

enum class DType { F64, F32, BF16, F8_E4M3, U8, I32, I64 };

std::string_view dtype_name(DType d);
size_t dtype_size(DType d);

struct StTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::string bytes;  // little-endian payload
};

struct Safetensors {
  std::map<std::string, StTensor> tensors;
  std::map<std::string, std::string> metadata;

  // Typed access; a missing tensor, wrong dtype or wrong shape is BadInput naming `source`.
  const StTensor& get(const std::string& name, const std::string& source) const;
  template <class T>
  Tensor<T> get_as(const std::string& name, const std::string& source) const;
  template <class T>
  void put(const std::string& name, const Tensor<T>& t);
};

// Parses bytes read from `source` (used in messages). Validates everything.
Safetensors parse_safetensors(std::string_view bytes, const std::string& source);
std::string serialize_safetensors(const Safetensors& st);
Safetensors read_safetensors(const std::filesystem::path& path);
void write_safetensors(const std::filesystem::path& path, const Safetensors& st);  // atomic

}  // namespace tandem
