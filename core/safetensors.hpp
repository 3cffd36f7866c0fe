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

#include "core/atomic_file.hpp"
#include "core/tensor.hpp"

namespace tandem {

enum class DType { F64, F32, BF16, F8_E4M3, F8_E8M0, U8, I32, I64 };

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

// The header alone, for files read piecewise: each tensor's place in the data buffer.
struct StEntry {
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets in the data buffer
};
struct StHeader {
  std::map<std::string, StEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // the data buffer's offset in the file: 8 + header length
};
// Where the data buffer starts in a file of `file_size` bytes whose first 8 bytes are `first`.
uint64_t safetensors_data_start(std::string_view first, uint64_t file_size,
                                const std::string& source);
// The header's JSON for a data buffer of `data_size` bytes; validated as parse_safetensors does.
StHeader parse_safetensors_header(std::string_view json, uint64_t data_size,
                                  const std::string& source);

// A safetensors file too large to read whole (a checkpoint shard): its header, and a tensor's
// bytes read on demand.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path, bool follow_symlinks = true);
  const StHeader& header() const { return header_; }
  const std::string& name() const { return file_.name(); }
  // Bytes [offset, offset + count) of the tensor's payload.
  std::string read(const StEntry& e, uint64_t offset, uint64_t count) const;

 private:
  FileReader file_;
  StHeader header_;
};
std::string serialize_safetensors(const Safetensors& st);
Safetensors read_safetensors(const std::filesystem::path& path);
void write_safetensors(const std::filesystem::path& path, const Safetensors& st);  // atomic

}  // namespace tandem
