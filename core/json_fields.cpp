#include "core/json_fields.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.hpp"

namespace tandem {

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  using Event = nlohmann::json::parse_event_t;
  // Per open object: the keys seen so far, and the object's dotted path.
  struct Open {
    std::set<std::string> keys;
    std::string path, last_key;
  };
  std::vector<Open> open;
  auto guard = [&](int depth, Event event, nlohmann::json& parsed) {
    if (depth > kMaxJsonDepth)
      throw_bad_input("{}: JSON nested deeper than {} levels", source, kMaxJsonDepth);
    if (event == Event::object_start) {
      std::string path = open.empty() ? "" : open.back().path;
      if (!open.empty() && !open.back().last_key.empty())
        path += (path.empty() ? "" : ".") + open.back().last_key;
      open.push_back({{}, std::move(path), {}});
    } else if (event == Event::object_end) {
      open.pop_back();
    } else if (event == Event::key) {
      Open& o = open.back();
      o.last_key = parsed.get<std::string>();
      if (!o.keys.insert(o.last_key).second)
        throw_bad_input("{}: field '{}{}{}' appears twice", source, o.path,
                        o.path.empty() ? "" : ".", brief_text(o.last_key));
    }
    return true;
  };
  // nlohmann's lexer takes a NUL byte for the end of the input: what follows would be ignored.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw_bad_input("{}: invalid JSON: a NUL byte at byte {}", source, nul);
  try {
    return nlohmann::json::parse(text.begin(), text.end(), guard);
  } catch (const nlohmann::json::parse_error& e) {
    throw_bad_input("{}: invalid JSON at byte {}: {}", source, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    throw_bad_input("{}: invalid JSON: {}", source, e.what());
  }
}

namespace {

// The length of the control character at s[i]: 1 for C0 and DEL, 2 for a C1 control in UTF-8
// (U+0080..U+009F: 0xc2 0x80..0x9f; some terminals act on them as on ESC sequences), else 0.
size_t control_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x20 || c == 0x7f) return 1;
  const bool c1 =
      c == 0xc2 && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xe0) == 0x80;
  return c1 ? 2 : 0;
}

}  // namespace

std::string brief_text(std::string_view s) {
  constexpr size_t kShown = 60;
  std::string out;  // one line: control characters escaped
  const std::string_view shown = s.substr(0, kShown);
  for (size_t i = 0; i < shown.size(); ++i) {
    const size_t n = control_at(shown, i);
    if (n == 0) {
      out += shown[i];
      continue;
    }
    for (const char c : shown.substr(i, n))
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    i += n - 1;
  }
  return s.size() <= kShown ? out : fmt::format("{}... ({} characters)", out, s.size());
}

std::string brief(const nlohmann::json& v) {
  if (v.is_array() && v.size() > 16) return fmt::format("an array of {} values", v.size());
  if (v.is_object() && v.size() > 16) return fmt::format("an object of {} fields", v.size());
  return brief_text(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

JsonFields::JsonFields(const nlohmann::json& j, std::string source, std::string path)
    : j_(j), source_(std::move(source)), path_(std::move(path)) {
  if (!j_.is_object())
    throw_bad_input("{}: {} must be a JSON object", source_,
                    path_.empty() ? std::string("top level") : fmt::format("field '{}'", path_));
}

std::string JsonFields::where(std::string_view key) const {
  return fmt::format("{}: field '{}{}{}'", source_, path_, path_.empty() ? "" : ".", key);
}

const nlohmann::json& JsonFields::at(const char* key) const {
  const auto it = j_.find(key);
  if (it == j_.end()) throw_bad_input("{}: missing", where(key));
  return *it;
}

int64_t JsonFields::integer(const char* key, int64_t lo, int64_t hi) const {
  const auto& v = at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi ||
      (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    throw_bad_input("{}: expected an integer in [{}, {}], got {}", where(key), lo, hi, brief(v));
  return v.get<int64_t>();
}

int64_t JsonFields::integer_or(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
  return has(key) ? integer(key, lo, hi) : fallback;
}

uint64_t JsonFields::unsigned_integer(const char* key) const {
  const auto& v = at(key);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    throw_bad_input("{}: expected a non-negative integer, got {}", where(key), brief(v));
  return v.get<uint64_t>();
}

double JsonFields::number(const char* key, double lo, double hi) const {
  const auto& v = at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo ||
      v.get<double>() > hi)
    throw_bad_input("{}: expected a finite number in [{}, {}], got {}", where(key), lo, hi,
                    brief(v));
  return v.get<double>();
}

double JsonFields::number_or(const char* key, double fallback, double lo, double hi) const {
  return has(key) ? number(key, lo, hi) : fallback;
}

std::string JsonFields::string(const char* key) const {
  const auto& v = at(key);
  if (!v.is_string()) throw_bad_input("{}: expected a string, got {}", where(key), brief(v));
  return v.get<std::string>();
}

std::string JsonFields::label(const char* key) const {
  std::string s = string(key);
  if (s.empty()) throw_bad_input("{}: expected a name, got an empty string", where(key));
  for (size_t i = 0; i < s.size(); ++i)
    if (control_at(s, i) > 0)
      throw_bad_input("{}: a control character at byte {} of {}", where(key), i, brief_text(s));
  return s;
}

bool JsonFields::boolean(const char* key) const {
  const auto& v = at(key);
  if (!v.is_boolean()) throw_bad_input("{}: expected true or false, got {}", where(key), brief(v));
  return v.get<bool>();
}

std::string JsonFields::string_or(const char* key, std::string fallback) const {
  return has(key) ? string(key) : fallback;
}

JsonFields JsonFields::object(const char* key) const {
  return JsonFields(at(key), source_, path_.empty() ? key : path_ + "." + key);
}

JsonFields JsonFields::element(const char* key, size_t i) const {
  const nlohmann::json& a = array(key);
  if (i >= a.size()) throw_bad_input("{}: has {} entries, no [{}]", where(key), a.size(), i);
  return JsonFields(a[i], source_,
                    fmt::format("{}{}{}[{}]", path_, path_.empty() ? "" : ".", key, i));
}

const nlohmann::json& JsonFields::array(const char* key) const {
  const auto& v = at(key);
  if (!v.is_array()) throw_bad_input("{}: expected an array", where(key));
  return v;
}

void JsonFields::within_budget(std::string_view fields, double bytes, double work) const {
  if (bytes > kMaxWorkingBytes)
    throw_bad_input("{}: these sizes need ~{:.3g} GB of working memory; the limit is {:.3g} GB",
                    where(fields), bytes / 1e9, kMaxWorkingBytes / 1e9);
  if (work > kMaxWork)
    throw_bad_input("{}: these sizes imply ~{:.3g} multiply-adds; the limit is {:.3g}",
                    where(fields), work, kMaxWork);
}

void JsonFields::reject_unknown(std::initializer_list<std::string_view> known) const {
  for (const auto& [k, v] : j_.items())
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw_bad_input("{}: unknown field", where(brief_text(k)));
}

}  // namespace tandem
