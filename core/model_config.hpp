#pragma once
// Model configuration: loaded from JSON, validated field by field (errors name the field).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/dspark_config.hpp"
#include "core/engram_config.hpp"
#include "core/json_fields.hpp"
#include "core/model_shape.hpp"
#include "core/residual_config.hpp"
#include "core/vision_config.hpp"

namespace tandem {

// A config's sections, in order; a component reads some of them (cases/case.hpp).
inline const std::vector<std::string> kModelSections = {"residual", "engram", "vision", "dspark",
                                                        "model"};

struct ModelConfig {
  std::string name;
  uint64_t seed = 0;
  ResidualConfig residual;
  EngramConfig engram;
  VisionConfig vision;
  DsparkConfig dspark;
  ModelShape shape;  // the "model" section: the end-to-end model's blocks
  // The sections read from the config; the others hold their defaults and are not used.
  std::vector<std::string> sections = kModelSections;
  bool has(std::string_view section) const;
};

// The verification prompt's positions: model.prompt_tokens of text, and the image's layout
// (rows of visual tokens with their NEWLINE, START and END) when model.prompt_image.
int64_t verification_prompt_tokens(const ModelConfig& m);

VisionConfig parse_vision_config(const JsonFields& f);
nlohmann::json to_json(const VisionConfig& c);

DsparkConfig parse_dspark_config(const JsonFields& f);
// q_lora_rank, o_groups and o_lora_rank of a section whose attention has `heads` heads (each
// optional: AttentionLora's defaults), validated against the kernels' limits.
AttentionLora parse_attention_lora(const JsonFields& f, int heads);
void put_attention_lora(nlohmann::json& j, const AttentionLora& a);
ModelShape parse_model_shape(const JsonFields& f);
nlohmann::json to_json(const ModelShape& s);
nlohmann::json to_json(const DsparkConfig& c);

ResidualConfig parse_residual_config(const JsonFields& f);
nlohmann::json to_json(const ResidualConfig& c);
// Reads `sections` of a config (each must be there; the others are not read): each section is
// validated on its own, and where sections that a component joins are read together, their
// agreement (heads | residual.d; Engram's width and layers, and the end-to-end budget, when
// every section is read; the MoE, attention and query budgets). So a config at the release's
// sizes runs the components whose sections it holds, each at any size its kernels support.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source,
                               const std::vector<std::string>& sections = kModelSections);
// The sections a config's JSON holds.
std::vector<std::string> model_sections_of(const nlohmann::json& j);
// The sections read; parse_model_config reads it back to the same config.
nlohmann::json to_json(const ModelConfig& m);
nlohmann::json load_model_json(const std::filesystem::path& path);
ModelConfig load_model_config(const std::filesystem::path& path);  // every section
// Built-in configs: "tiny" (every section: the CI model) and "v4.1-flash" (the components that
// run at the release's sizes); BadInput for an unknown name. `sections`: those to read (empty:
// every one the config holds).
nlohmann::json builtin_model_json(std::string_view name);
ModelConfig builtin_model(std::string_view name, const std::vector<std::string>& sections = {});

}  // namespace tandem
