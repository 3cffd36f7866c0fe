// Model config parser (core/model_config): any text gives a config or BadInput naming the field;
// a parsed config survives to_json -> parse unchanged.
#include "core/error.hpp"
#include "core/model_config.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json round_trip;
  try {
    round_trip = to_json(parse_model_config(parse_json(text, "fuzz.json"), "fuzz.json"));
  } catch (const BadInput&) {
    return 0;
  }
  // Outside the try: a config that parsed must serialise to one that parses back the same
  // (a BadInput here is a finding).
  const ModelConfig back = parse_model_config(round_trip, "round trip");
  if (to_json(back) != round_trip)
    fuzz::fail("config changed in a to_json round trip: " + std::string(text));
  return 0;
}
