#pragma once
// Typed, validated access to JSON objects. Every error names the source file and the dotted
// field path, e.g. "tiny.json: field 'residual.d': expected an integer in [8, 65536], got -3".
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// Parses JSON text; a syntax error is BadInput naming the source and byte offset.
nlohmann::json parse_json(std::string_view text, const std::string& source);

class JsonFields {
 public:
  JsonFields(const nlohmann::json& j, std::string source, std::string path = "");

  int64_t integer(const char* key, int64_t lo, int64_t hi) const;
  int64_t integer_or(const char* key, int64_t fallback, int64_t lo, int64_t hi) const;
  uint64_t unsigned_integer(const char* key) const;
  double number(const char* key, double lo, double hi) const;
  double number_or(const char* key, double fallback, double lo, double hi) const;
  std::string string(const char* key) const;
  bool boolean(const char* key) const;
  std::string string_or(const char* key, std::string fallback) const;
  JsonFields object(const char* key) const;
  const nlohmann::json& array(const char* key) const;  // present and an array
  bool has(const char* key) const { return j_.contains(key); }
  // Rejects keys not in `known` (a typo in a config must not be silently ignored).
  void reject_unknown(std::initializer_list<std::string_view> known) const;
  // "source: field 'path.key'"
  std::string where(std::string_view key) const;
  const nlohmann::json& json() const { return j_; }

 private:
  const nlohmann::json& at(const char* key) const;
  const nlohmann::json& j_;
  std::string source_, path_;
};

}  // namespace tandem
