#pragma once
// Model configuration: loaded from JSON, validated field by field (errors name the field).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/dspark_config.hpp"
#include "core/engram_config.hpp"
#include "core/json_fields.hpp"
#include "core/model_shape.hpp"
#include "core/residual_config.hpp"
#include "core/vision_config.hpp"

namespace tandem {

struct ModelConfig {
  std::string name;
  uint64_t seed = 0;
  ResidualConfig residual;
  EngramConfig engram;
  VisionConfig vision;
  DsparkConfig dspark;
  ModelShape shape;  // the "model" section: the end-to-end model's blocks
};

VisionConfig parse_vision_config(const JsonFields& f);
nlohmann::json to_json(const VisionConfig& c);

DsparkConfig parse_dspark_config(const JsonFields& f);
ModelShape parse_model_shape(const JsonFields& f);
nlohmann::json to_json(const ModelShape& s);
nlohmann::json to_json(const DsparkConfig& c);

ResidualConfig parse_residual_config(const JsonFields& f);
nlohmann::json to_json(const ResidualConfig& c);
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);
// Every section; parse_model_config reads it back to the same config.
nlohmann::json to_json(const ModelConfig& m);
ModelConfig load_model_config(const std::filesystem::path& path);
// Built-in presets ("tiny"); BadInput for an unknown name.
ModelConfig builtin_model(std::string_view name);

}  // namespace tandem
