#include "core/safetensors.hpp"

#include <algorithm>
#include <cstring>

#include "core/atomic_file.hpp"
#include "core/dtype.hpp"
#include "core/json_fields.hpp"

namespace tandem {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {{DType::F64, "F64", 8},         {DType::F32, "F32", 4},
                                 {DType::BF16, "BF16", 2},       {DType::F8_E4M3, "F8_E4M3", 1},
                                 {DType::F8_E8M0, "F8_E8M0", 1}, {DType::U8, "U8", 1},
                                 {DType::I32, "I32", 4},         {DType::I64, "I64", 8}};

const DTypeInfo& info(DType d) {
  return *std::find_if(std::begin(kDTypes), std::end(kDTypes),
                       [d](const DTypeInfo& i) { return i.dtype == d; });
}

// The storage dtype for each C++ element type tandem exchanges.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<double>() {
  return DType::F64;
}
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::BF16;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::U8;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::I32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::I64;
}

constexpr uint64_t kMaxHeader = 100u << 20;  // 100 MB, as the reference implementation

}  // namespace

std::string_view dtype_name(DType d) { return info(d).name; }
size_t dtype_size(DType d) { return info(d).size; }

const StTensor& Safetensors::get(const std::string& name, const std::string& source) const {
  const auto it = tensors.find(name);
  if (it == tensors.end()) throw_bad_input("{}: tensor '{}' missing", source, name);
  return it->second;
}

template <class T>
Tensor<T> Safetensors::get_as(const std::string& name, const std::string& source) const {
  const StTensor& t = get(name, source);
  if (t.dtype != dtype_of<T>())
    throw_bad_input("{}: tensor '{}': dtype {} where {} is expected", source, name,
                    dtype_name(t.dtype), dtype_name(dtype_of<T>()));
  Tensor<T> r(t.shape);
  if (!t.bytes.empty()) std::memcpy(r.data.data(), t.bytes.data(), t.bytes.size());
  return r;
}

template <class T>
void Safetensors::put(const std::string& name, const Tensor<T>& t) {
  StTensor s{dtype_of<T>(), t.shape, std::string(t.data.size() * sizeof(T), '\0')};
  if (!s.bytes.empty()) std::memcpy(s.bytes.data(), t.data.data(), s.bytes.size());
  tensors[name] = std::move(s);
}

#define TANDEM_ST_TYPES(X) X(double) X(float) X(bf16) X(uint8_t) X(int32_t) X(int64_t)
#define TANDEM_ST_INSTANTIATE(T)                                                           \
  template Tensor<T> Safetensors::get_as<T>(const std::string&, const std::string&) const; \
  template void Safetensors::put<T>(const std::string&, const Tensor<T>&);
TANDEM_ST_TYPES(TANDEM_ST_INSTANTIATE)
#undef TANDEM_ST_INSTANTIATE
#undef TANDEM_ST_TYPES

uint64_t safetensors_data_start(std::string_view first, uint64_t file_size,
                                const std::string& source) {
  if (first.size() < 8 || file_size < 8)
    throw_bad_input("{}: truncated: {} bytes, no header length", source, file_size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<uint8_t>(first[i]);
  if (header_len > kMaxHeader || header_len > file_size - 8)
    throw_bad_input("{}: header length {} exceeds the file ({} bytes)", source, header_len,
                    file_size);
  return 8 + header_len;
}

StHeader parse_safetensors_header(std::string_view json, uint64_t data_size,
                                  const std::string& source) {
  const nlohmann::json header = parse_json(json, source + " (header)");
  JsonFields(header, source);  // must be an object
  StHeader h;
  h.data_start = 8 + json.size();
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw_bad_input("{}: '__metadata__' must be an object", source);
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          throw_bad_input("{}: '__metadata__.{}' must be a string", source, brief_text(k));
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const JsonFields f(entry, source, brief_text(name));
    f.reject_unknown({"dtype", "shape", "data_offsets"});
    StEntry t;
    const std::string dt = f.string("dtype");
    const auto di = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                 [&](const DTypeInfo& i) { return i.name == dt; });
    if (di == std::end(kDTypes))
      throw_bad_input("{}: unsupported dtype '{}'", f.where("dtype"), dt);
    t.dtype = di->dtype;
    const auto& shape = f.array("shape");
    uint64_t elements = 1;
    for (const auto& s : shape) {
      if (!s.is_number_unsigned() || s.get<uint64_t>() > (1ull << 40))
        throw_bad_input("{}: dimensions must be integers in [0, 2^40], got {}", f.where("shape"),
                        brief(shape));
      t.shape.push_back(s.get<int64_t>());
      if (__builtin_mul_overflow(elements, s.get<uint64_t>(), &elements))
        throw_bad_input("{}: element count overflows", f.where("shape"));
    }
    const auto& off = f.array("data_offsets");
    if (off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
        off[0].get<uint64_t>() > off[1].get<uint64_t>() || off[1].get<uint64_t>() > data_size)
      throw_bad_input("{}: expected [begin, end] with begin <= end <= {} (data size), got {}",
                      f.where("data_offsets"), data_size, brief(off));
    t.begin = off[0].get<uint64_t>(), t.end = off[1].get<uint64_t>();
    uint64_t need = 0;
    if (__builtin_mul_overflow(elements, di->size, &need) || need != t.end - t.begin)
      throw_bad_input("{}: {} bytes, but shape {} of {} needs {}", f.where("data_offsets"),
                      t.end - t.begin, brief(shape), dt, elements * di->size);
    spans.emplace_back(t.begin, t.end);
    h.tensors.emplace(name, std::move(t));
  }
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (const auto& [b, e] : spans) {
    if (b != covered)
      throw_bad_input("{}: data buffer has a {} at byte {}", source,
                      b < covered ? "overlap" : "hole", std::min(b, covered));
    covered = e;
  }
  if (covered != data_size)
    throw_bad_input("{}: {} trailing bytes not covered by any tensor", source, data_size - covered);
  return h;
}

Safetensors parse_safetensors(std::string_view bytes, const std::string& source) {
  const uint64_t start = safetensors_data_start(bytes, bytes.size(), source);
  const StHeader h =
      parse_safetensors_header(bytes.substr(8, start - 8), bytes.size() - start, source);
  Safetensors st;
  st.metadata = h.metadata;
  for (const auto& [name, e] : h.tensors)
    st.tensors.emplace(name, StTensor{e.dtype, e.shape,
                                      std::string(bytes.substr(start + e.begin, e.end - e.begin))});
  return st;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path, bool follow_symlinks)
    : file_(path, follow_symlinks) {
  const std::string first = file_.read(0, std::min<uint64_t>(8, file_.size()));
  const uint64_t start = safetensors_data_start(first, file_.size(), file_.name());
  header_ = parse_safetensors_header(file_.read(8, start - 8), file_.size() - start, file_.name());
}

std::string SafetensorsFile::read(const StEntry& e, uint64_t offset, uint64_t count) const {
  if (offset > e.end - e.begin || count > e.end - e.begin - offset)
    throw_bad_input("{}: bytes [{}, {}) of a {}-byte tensor", file_.name(), offset, offset + count,
                    e.end - e.begin);
  return file_.read(header_.data_start + e.begin + offset, count);
}

std::string serialize_safetensors(const Safetensors& st) {
  nlohmann::json header = nlohmann::json::object();
  if (!st.metadata.empty()) header["__metadata__"] = st.metadata;
  std::string data;
  for (const auto& [name, t] : st.tensors) {
    header[name] = {{"dtype", dtype_name(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // align the buffer to 8 bytes
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

Safetensors read_safetensors(const std::filesystem::path& path) {
  return parse_safetensors(read_file(path), path.string());
}

void write_safetensors(const std::filesystem::path& path, const Safetensors& st) {
  const std::string bytes = serialize_safetensors(st);
  write_file_atomic(path, std::string_view(bytes));
}

}  // namespace tandem
