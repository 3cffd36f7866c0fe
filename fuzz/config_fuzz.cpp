// Model config parser (core/model_config): any text gives a config or BadInput naming the field;
// a parsed config survives to_json -> parse unchanged.
#include "core/error.hpp"
#include "core/model_config.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ModelConfig m = parse_model_config(parse_json(text, "fuzz.json"), "fuzz.json");
    const nlohmann::json again = {{"name", m.name},
                                  {"seed", m.seed},
                                  {"residual", to_json(m.residual)},
                                  {"engram", to_json(m.engram)},
                                  {"vision", to_json(m.vision)},
                                  {"dspark", to_json(m.dspark)}};
    const ModelConfig back = parse_model_config(again, "again");
    if (to_json(back.residual) != to_json(m.residual) ||
        to_json(back.engram) != to_json(m.engram) || to_json(back.vision) != to_json(m.vision) ||
        to_json(back.dspark) != to_json(m.dspark))
      fuzz::fail("config changed in a to_json round trip: " + std::string(text));
  } catch (const BadInput&) {
  }
  return 0;
}
