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

// Deepest nesting parse_json accepts (real configs and manifests nest 4 levels); deeper input
// is refused while parsing, before anything recursive (printing, comparing) can touch it.
inline constexpr int kMaxJsonDepth = 64;

// Parses JSON text. A syntax error, nesting deeper than kMaxJsonDepth and a key repeated in one
// object are BadInput naming the source (and byte offset or field).
nlohmann::json parse_json(std::string_view text, const std::string& source);
// A value or text for an error message: at most ~60 characters, larger arrays and objects
// summarised by their size (a message never prints a megabyte the user sent).
std::string brief(const nlohmann::json& v);
std::string brief_text(std::string_view s);

// What one config section may imply (sizes that pass each field's range can still multiply into
// terabytes or hours): the working memory of its verification rows, and their arithmetic in
// multiply-adds. The release's shapes stay within both (README "Limits"); the exceptions are
// stated there (the full Engram tables).
// A 24 GiB machine, room to spare: two rows at once (verify's --jobs 2) and the rest. 8 GiB since
// stop 46 (4 before): V4.1-Flash's DSpark drafter at the release's widths (7.6 GB by its
// estimate, an upper bound; the section's rows peaked at 6.8 GB on 2 host threads).
inline constexpr double kMaxWorkingBytes = 8.0 * (1ull << 30);
// Minutes under the emulator, seconds on a GPU: V4.1-Flash's DSpark section (the release's
// vocabulary and 64 heads, ~5.7e10) runs in under a minute on 2 cores (README "Limits").
inline constexpr double kMaxWork = 6e10;

class JsonFields {
 public:
  JsonFields(const nlohmann::json& j, std::string source, std::string path = "");

  int64_t integer(const char* key, int64_t lo, int64_t hi) const;
  int64_t integer_or(const char* key, int64_t fallback, int64_t lo, int64_t hi) const;
  uint64_t unsigned_integer(const char* key) const;
  double number(const char* key, double lo, double hi) const;
  double number_or(const char* key, double fallback, double lo, double hi) const;
  std::string string(const char* key) const;
  // A name the program prints (a config's, a release's, a case's): not empty, no control
  // character (C0, DEL or C1: an echoed ESC could drive the user's terminal).
  std::string label(const char* key) const;
  bool boolean(const char* key) const;
  std::string string_or(const char* key, std::string fallback) const;
  JsonFields object(const char* key) const;
  JsonFields element(const char* key, size_t i) const;  // entry i of array `key`, an object
  const nlohmann::json& array(const char* key) const;   // present and an array
  bool has(const char* key) const { return j_.contains(key); }
  // Rejects keys not in `known` (a typo in a config must not be silently ignored).
  void reject_unknown(std::initializer_list<std::string_view> known) const;
  // Refuses sizes whose product exceeds kMaxWorkingBytes or kMaxWork, naming `fields` (e.g.
  // "tokens x sites x d") and the estimates.
  void within_budget(std::string_view fields, double bytes, double work) const;
  // "source: field 'path.key'"
  std::string where(std::string_view key) const;
  const nlohmann::json& json() const { return j_; }

 private:
  const nlohmann::json& at(const char* key) const;
  const nlohmann::json& j_;
  std::string source_, path_;
};

}  // namespace tandem
