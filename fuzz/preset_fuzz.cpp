// Traffic-simulator preset parser (sim/presets, `tandem traffic --preset-file`): any text gives
// a preset or BadInput naming the field; a parsed preset simulates the default workload
// without crashing and with finite byte counts.
#include <cmath>

#include "core/error.hpp"
#include "core/json_fields.hpp"
#include "fuzz/fuzz_util.hpp"
#include "sim/traffic.hpp"

namespace {

bool all_finite(const nlohmann::json& j) {
  if (j.is_number_float()) return std::isfinite(j.get<double>());
  for (const auto& v : j)  // objects and arrays; scalars iterate over themselves
    if ((v.is_structured() || v.is_number_float()) && &v != &j && !all_finite(v)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = parse_json(text, "fuzz.json");
    const sim::Preset p = sim::parse_preset(JsonFields(j, "fuzz.json"));
    const sim::Report r = sim::simulate(p, sim::Workload{});
    if (!all_finite(sim::to_json(r)))
      fuzz::fail("preset gives non-finite bytes: " + std::string(text));
  } catch (const BadInput&) {
  }
  return 0;
}
