#include "golden/golden.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/atomic_file.hpp"
#include "core/git_commit.hpp"
#include "core/json_fields.hpp"
#include "core/model_config.hpp"
#include "core/safetensors.hpp"
#include "golden/attention_case.hpp"
#include "golden/case_files.hpp"
#include "golden/dspark_case.hpp"
#include "golden/engram_case.hpp"
#include "golden/model_case.hpp"
#include "golden/moe_case.hpp"
#include "golden/residual_case.hpp"
#include "golden/vision_case.hpp"
#include "reference/drafter.hpp"
#include "reference/dspark.hpp"
#include "reference/model_util.hpp"

namespace tandem::golden {

// What a generator entry produces: the manifest's config, the blob, and each output's rule.
struct BuiltCase {
  nlohmann::json config;
  Safetensors blob;
  std::vector<std::pair<std::string, std::string>> outputs;  // name -> "exact" | "tolerance"
};

struct CaseSpec {
  std::string name, component;
  uint64_t seed;
  std::function<BuiltCase(uint64_t seed)> build;
};

namespace {

constexpr const char* kMapFile = "engram_synthetic_map.safetensors";

// ---------------------------------------------------------------- residual cases
ResidualConfig residual_cfg(int d, int sites, int tokens, double norm_eps = kV4NormEps) {
  ResidualConfig c;
  c.d = d, c.sites = sites, c.tokens = tokens, c.norm_eps = norm_eps;
  return c;
}

ResidualPath parse_path(const JsonFields& f) {
  const std::string p = f.string("path");
  if (p == residual_path_name(ResidualPath::v4_unfused)) return ResidualPath::v4_unfused;
  if (p == residual_path_name(ResidualPath::v41_single_pass)) return ResidualPath::v41_single_pass;
  throw_bad_input("{}: expected v4-unfused or v41-single-pass, got '{}'", f.where("path"), p);
}

ActDType parse_act(const JsonFields& f) {
  const std::string a = f.string("act");
  if (a == "f32") return ActDType::f32;
  if (a == "bf16") return ActDType::bf16;
  throw_bad_input("{}: expected f32 or bf16, got '{}'", f.where("act"), a);
}

std::vector<std::string> residual_outputs(int sites) {
  std::vector<std::string> names;
  for (int l = 0; l < sites; ++l) {
    names.push_back(fmt::format("site{}.y", l));
    names.push_back(fmt::format("site{}.x", l));
  }
  names.push_back("y_out");
  names.push_back("x_out");
  return names;
}

// A reference output set as tensors in residual_outputs() order.
std::vector<Tensor<double>*> residual_tensors(reference::ResidualRefOutputs& o) {
  std::vector<Tensor<double>*> t;
  for (size_t l = 0; l < o.taps_y.size(); ++l) t.push_back(&o.taps_y[l]), t.push_back(&o.taps_x[l]);
  t.push_back(&o.y_out);
  t.push_back(&o.x_out);
  return t;
}

BuiltCase build_residual(const ResidualConfig& cfg, ResidualPath path, ActDType act,
                         uint64_t seed) {
  BuiltCase b;
  b.config = {
      {"residual", to_json(cfg)}, {"path", residual_path_name(path)}, {"act", act_dtype_name(act)}};
  const ResidualStackInputs in = make_residual_inputs(cfg, cfg.tokens, act, seed);
  reference::ResidualRefOutputs truth = reference::run_truth(in, path);
  put_residual_inputs(b.blob, in);
  const auto names = residual_outputs(cfg.sites);
  const auto tensors = residual_tensors(truth);
  for (size_t i = 0; i < names.size(); ++i) {
    b.blob.put("expected." + names[i], *tensors[i]);
    b.outputs.emplace_back(names[i], "tolerance");
  }
  return b;
}

// ---------------------------------------------------------------- engram cases
// Small tables keep the blobs small (the layout and math are those of the full model).
EngramConfig engram_cfg(int d, int tokens, int heads, int max_order, int64_t table_base,
                        int wkv_fp8_block = 32) {
  EngramConfig c;
  c.wkv_fp8_block = wkv_fp8_block;  // the release's V4.1 FP8 linear; 128 as V4's; 0 unquantized
  c.layer_ids = {1, 3};
  c.heads = heads;
  c.max_order = max_order;
  c.table_base = table_base;
  c.vocab = 4096;
  c.compressed_vocab = 3001;
  c.d = d;
  c.tokens = tokens;
  c.norm_eps = kV41NormEps;  // Engram is a V4.1 component
  return c;
}

reference::CompressionMap engram_case_map() {
  return reference::synthetic_compression_map(4096, 3001, 11);
}

// Engram inputs from a blob: the raw ids and map are stored, everything derived is recomputed.
EngramInputs engram_inputs_from(const Safetensors& st, const EngramConfig& cfg, ActDType act,
                                int layer_index, const std::string& src) {
  const reference::CompressionMap map = reference::compression_map_from(st, cfg, src);
  EngramInputs in;
  in.cfg = cfg;
  in.act = act;
  const auto layers = engram_tables(cfg);
  if (layer_index < 0 || layer_index >= static_cast<int>(layers.size()))
    throw_bad_input("{}: layer_index {} outside engram.layer_ids", src, layer_index);
  in.tables = layers[layer_index];
  const Tensor<int64_t> ids = st.get_as<int64_t>("ids", src);
  if (ids.shape != Shape{cfg.tokens})
    throw_bad_input("{}: tensor 'ids' has shape {}, config.engram.tokens is {}", src,
                    fmt::join(ids.shape, "x"), cfg.tokens);
  in.compressed = reference::compress(ids.data, map);
  in.history = reference::compress(st.get_as<int64_t>("history", src).data, map);
  in.compressed_pad = map.map.at(cfg.pad_id);
  in.table = st.get_as<uint8_t>("table", src).data;
  in.h = st.get_as<float>("h", src);
  in.wkv = st.get_as<float>("wkv", src);
  in.gate_w = st.get_as<float>("gate_w", src);
  try {
    validate_engram_inputs(in);
  } catch (const BadInput& e) {
    throw_bad_input("{}: {}", src, e.what());
  }
  return in;
}

BuiltCase build_engram(const EngramConfig& cfg, ActDType act, int layer_index, uint64_t seed) {
  BuiltCase b;
  b.config = {{"engram", to_json(cfg)}, {"act", act_dtype_name(act)}, {"layer_index", layer_index}};
  const auto map = engram_case_map();
  const std::vector<int64_t> ids = synthetic_token_ids(cfg.tokens, cfg.vocab, seed);
  const std::vector<int64_t> history{17, 4095, 2};
  EngramInputs in = make_engram_inputs(cfg, map, ids, layer_index, act, seed);
  in.history = reference::compress(history, map);
  const EngramReference ref = run_engram_reference(in);
  b.blob.put("map", Tensor<int32_t>({cfg.vocab}, map.map));
  b.blob.put("ids", Tensor<int64_t>({cfg.tokens}, ids));
  b.blob.put("history", Tensor<int64_t>({3}, history));
  b.blob.put("table", Tensor<uint8_t>({static_cast<int64_t>(in.table.size())}, in.table));
  b.blob.put("h", in.h);
  b.blob.put("wkv", in.wkv);
  b.blob.put("gate_w", in.gate_w);
  b.blob.put("expected.addresses", ref.addresses);
  b.blob.put("expected.rows", ref.rows);
  b.blob.put("expected.gates", ref.truth.gates);
  b.blob.put("expected.h_out", ref.truth.h_out);
  b.outputs = {
      {"addresses", "exact"}, {"rows", "exact"}, {"gates", "tolerance"}, {"h_out", "tolerance"}};
  return b;
}

// ---------------------------------------------------------------- vision cases

VisionCase vision_case(int w, int h, ActDType act, uint64_t seed) {
  VisionCase c;
  c.image_w = w, c.image_h = h, c.act = act, c.seed = seed;
  return c;
}

BuiltCase build_vision(const VisionCase& c) {
  BuiltCase b;
  b.config = {{"vision", to_json(static_cast<const VisionConfig&>(c))},
              {"act", act_dtype_name(c.act)}};
  const VisionInputs in = make_vision_inputs(c);
  b.blob.put("grid", in.grid);
  b.blob.put("rope.x", in.rope.x);
  b.blob.put("rope.row", Tensor<int32_t>({int64_t(in.rope.row.size())}, in.rope.row));
  b.blob.put("rope.col", Tensor<int32_t>({int64_t(in.rope.col.size())}, in.rope.col));
  b.blob.put("gate.logits", in.gate.logits);
  b.blob.put("gate.is_image",
             Tensor<uint8_t>({int64_t(in.gate.is_image.size())}, in.gate.is_image));
  b.blob.put("gate.bias_text", Tensor<float>({c.experts}, in.gate.bias_text));
  b.blob.put("gate.bias_vl", Tensor<float>({c.experts}, in.gate.bias_vl));
  const auto experts = reference::moe_gate<float>(in.gate).experts;
  b.blob.put("expected.unshuffle", reference::unshuffle(in.grid));
  b.blob.put("expected.rope", reference::rope_2d<double>(in.rope));
  b.blob.put("expected.experts", experts);
  b.blob.put("expected.gate_weights", reference::moe_weights<double>(in.gate, experts));
  b.outputs = {{"unshuffle", "exact"},
               {"rope", "tolerance"},
               {"experts", "exact"},
               {"gate_weights", "tolerance"}};
  return b;
}

// ---------------------------------------------------------------- dspark cases
// Verification: seeded distributions and drafts; draws keyed by the manifest's seed.
// Scheduled: per-request draft counts and request ids, as a scheduled batch passes them.
BuiltCase build_dspark_verify(int64_t R, int K, int64_t V, bool greedy, uint64_t seed,
                              bool scheduled = false) {
  VerifyInputs in = make_verify_inputs(R, K, V, seed, greedy);
  if (scheduled) schedule_batch(in, seed);
  BuiltCase b;
  b.config = {{"requests", R}, {"budget", K}, {"vocab", V}, {"greedy", greedy}};
  b.blob.put("draft", in.draft);
  b.blob.put("p_draft", in.p_draft);
  b.blob.put("p_target", in.p_target);
  b.blob.put("position", Tensor<int64_t>({R}, {in.position.begin(), in.position.end()}));
  if (scheduled) {
    b.config["scheduled"] = true;
    b.blob.put("drafted", Tensor<int32_t>({R}, in.drafted));
    b.blob.put("request", Tensor<int64_t>({R}, {in.request.begin(), in.request.end()}));
  }
  const VerifyOutputs out = reference::dspark_verify(in);
  b.blob.put("expected.accepted", Tensor<int32_t>({R}, out.accepted));
  b.blob.put("expected.emitted", out.emitted);
  b.outputs = {{"accepted", "exact"}, {"emitted", "exact"}};
  return b;
}

constexpr int kDecodeSteps = 16, kDecodeRequests = 3;

Tensor<double> to_tensor(const Eigen::MatrixXd& m) {
  Tensor<double> t({m.rows(), m.cols()});
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) t.data[i * m.cols() + j] = m(i, j);
  return t;
}
Eigen::MatrixXd to_matrix(const Tensor<double>& t) {
  Eigen::MatrixXd m(t.dim(0), t.dim(1));
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) m(i, j) = t.data[i * m.cols() + j];
  return m;
}

// The drafter's one pass over a window of seeded features, and scheduled speculative decoding of
// a batch through the small backbone with the drafter (reference and kernel verification must
// give these texts).
struct DrafterOutputs {
  Tensor<int32_t> draft, text;
  Tensor<double> logits, confidence;
};
DrafterOutputs run_drafter_case(const DsparkConfig& cfg, const Tensor<double>& features,
                                int32_t last, uint64_t seed, const reference::Verifier& verify) {
  const reference::DsparkDrafter drafter(cfg, features.dim(1), seed);
  const reference::DraftChoice choice{false, seed, 0, uint32_t(features.dim(0)) + 1,
                                      cfg.temperature};
  const reference::Draft d = drafter.propose(to_matrix(features), last, cfg.gamma, choice);
  const DsparkDecode decode =
      dspark_decode(cfg, seed, kDecodeRequests, false, kDecodeSteps, verify);
  Tensor<int32_t> text({kDecodeRequests, int64_t(decode.decode.text[0].size())});
  for (int r = 0; r < kDecodeRequests; ++r)  // every text has the prompt's 6 + kDecodeSteps
    std::copy(decode.decode.text[r].begin(), decode.decode.text[r].end(),
              text.ptr() + r * text.dim(1));
  return {Tensor<int32_t>({cfg.gamma}, d.tokens), text, to_tensor(d.logits),
          Tensor<double>({cfg.gamma}, d.confidence)};
}

BuiltCase build_dspark_drafter(const DsparkConfig& cfg, int64_t positions, uint64_t seed) {
  BuiltCase b;
  b.config = {{"dspark", to_json(cfg)}};
  const Tensor<double> features =
      to_tensor(reference::seeded_matrix(positions, 3 * cfg.backbone_width, seed, 1, 1.0));
  const int32_t last = int32_t(seed % uint64_t(cfg.vocab));
  b.blob.put("features", features);
  b.blob.put("last", Tensor<int32_t>({1}, last));
  const DrafterOutputs out = run_drafter_case(cfg, features, last, seed, reference::dspark_verify);
  b.blob.put("expected.draft", out.draft);
  b.blob.put("expected.logits", out.logits);
  b.blob.put("expected.confidence", out.confidence);
  b.blob.put("expected.text", out.text);
  // The drafter has no optimized twin yet: its floating outputs are checked in double only.
  b.outputs = {
      {"draft", "exact"}, {"logits", "reference"}, {"confidence", "reference"}, {"text", "exact"}};
  return b;
}

// ---------------------------------------------------------------- attention and MoE cases
BuiltCase build_attention(int64_t T, int64_t P, int64_t d, int heads, ActDType act, uint64_t seed) {
  const AttentionInputs in = make_attention_inputs(T, P, d, heads, act, seed);
  BuiltCase b;
  b.config = {{"heads", heads}, {"act", act_dtype_name(act)}};
  b.blob.put("q", in.q);
  b.blob.put("keys", in.keys);
  b.blob.put("values", in.values);
  b.blob.put("expected.o", run_attention_reference(in).truth);
  b.outputs = {{"o", "tolerance"}};
  return b;
}

BuiltCase build_moe(int64_t T, int64_t d, int64_t H, int64_t E, int64_t k, ActDType act,
                    uint64_t seed) {
  const MoeExpertInputs in = make_moe_inputs(T, d, H, E, k, act, seed);
  BuiltCase b;
  b.config = {{"act", act_dtype_name(act)}};
  b.blob.put("y", in.y);
  b.blob.put("experts", in.experts);
  b.blob.put("weights", in.weights);
  b.blob.put("w_in", in.w_in);
  b.blob.put("w_out", in.w_out);
  b.blob.put("expected.f", run_moe_reference(in).truth);
  b.outputs = {{"f", "tolerance"}};
  return b;
}

// ---------------------------------------------------------------- end-to-end model case
// The model's weights come from its config's seed; the blob holds the prompt and every tap.
BuiltCase build_model(const ModelConfig& m, uint64_t seed) {
  const reference::TinyModelWeights w = reference::tiny_model_weights(m);
  const ModelPrompt p = model_prompt(m, seed, false);
  BuiltCase b;
  b.config = {{"model", to_json(m)}};
  b.blob.put("ids", Tensor<int32_t>({int64_t(p.ids.size())}, p.ids));
  b.blob.put("visual", p.visual);
  for (const reference::Tap& t : run_model_reference(m, w, p).truth) {
    b.blob.put("expected." + t.name, t.value);
    b.outputs.emplace_back(t.name, t.name.ends_with(".experts") ? "exact" : "tolerance");
  }
  return b;
}

// The generator's cases; `tandem golden regen` writes exactly these. Add a case: one entry.
const std::vector<CaseSpec>& specs() {
  using P = ResidualPath;
  using A = ActDType;
  static const std::vector<CaseSpec> s = {
      {"residual_v4_f32", "residual", 101,
       [](uint64_t seed) {
         return build_residual(residual_cfg(64, 3, 4), P::v4_unfused, A::f32, seed);
       }},
      {"residual_v41_f32", "residual", 102,
       [](uint64_t seed) {
         return build_residual(residual_cfg(64, 3, 4, kV41NormEps), P::v41_single_pass, A::f32,
                               seed);
       }},
      {"residual_v41_bf16", "residual", 103,
       [](uint64_t seed) {
         return build_residual(residual_cfg(128, 4, 3, kV41NormEps), P::v41_single_pass, A::bf16,
                               seed);
       }},
      {"residual_v4_bf16_d8", "residual", 104,
       [](uint64_t seed) {
         return build_residual(residual_cfg(8, 2, 2), P::v4_unfused, A::bf16, seed);
       }},
      {"engram_layer1_f32", "engram", 201,
       [](uint64_t seed) { return build_engram(engram_cfg(16, 24, 2, 4, 300), A::f32, 0, seed); }},
      {"vision_100x40_f32", "vision", 301,
       [](uint64_t seed) { return build_vision(vision_case(100, 40, A::f32, seed)); }},
      {"vision_700x300_bf16", "vision", 302,
       [](uint64_t seed) { return build_vision(vision_case(700, 300, A::bf16, seed)); }},
      {"engram_layer3_bf16", "engram", 202,
       [](uint64_t seed) { return build_engram(engram_cfg(32, 16, 1, 3, 200), A::bf16, 1, seed); }},
      {"engram_layer1_fp8b128_f32", "engram", 203,
       [](uint64_t seed) {
         return build_engram(engram_cfg(16, 12, 2, 4, 300, 128), A::f32, 0, seed);
       }},
      {"engram_layer1_float_wkv_bf16", "engram", 204,
       [](uint64_t seed) {
         return build_engram(engram_cfg(16, 12, 2, 4, 300, 0), A::bf16, 0, seed);
       }},
      {"dspark_verify_sampling", "dspark", 401,
       [](uint64_t seed) { return build_dspark_verify(8, 5, 257, false, seed); }},
      {"dspark_verify_greedy", "dspark", 402,
       [](uint64_t seed) { return build_dspark_verify(8, 4, 100, true, seed); }},
      {"dspark_verify_scheduled", "dspark", 403,
       [](uint64_t seed) { return build_dspark_verify(16, 5, 257, false, seed, true); }},
      {"dspark_drafter", "dspark", 403,
       [](uint64_t seed) { return build_dspark_drafter(builtin_model("tiny").dspark, 150, seed); }},
      {"attention_f32_P24", "attention", 501,
       [](uint64_t seed) { return build_attention(6, 24, 64, 2, A::f32, seed); }},
      {"attention_bf16_P0", "attention", 502,
       [](uint64_t seed) { return build_attention(9, 0, 128, 4, A::bf16, seed); }},
      {"moe_f32", "moe", 601,
       [](uint64_t seed) { return build_moe(6, 64, 128, 16, 6, A::f32, seed); }},
      {"moe_bf16", "moe", 602,
       [](uint64_t seed) { return build_moe(5, 128, 64, 8, 2, A::bf16, seed); }},
      {"model_tiny_text", "model", 701,
       [](uint64_t seed) { return build_model(builtin_model("tiny"), seed); }},
  };
  return s;
}

// ---------------------------------------------------------------- manifests
struct LoadedCase {
  std::string name, component;
  nlohmann::json manifest;
  std::vector<std::pair<std::string, std::string>> outputs;
  Safetensors blob;
  std::string blob_source;
};

std::vector<double> as_doubles(const StTensor& t);

LoadedCase load_case(const std::filesystem::path& manifest_path) {
  const std::string src = manifest_path.string();
  file_in(manifest_path.parent_path(), manifest_path.filename().string(), src);
  LoadedCase c;
  c.manifest = parse_json(read_file(manifest_path, kMaxJsonBytes), src);
  const JsonFields f(c.manifest, src);
  f.reject_unknown({"format_version", "component", "name", "config", "seed", "generator_commit",
                    "blob", "blob_sha256", "outputs"});
  if (f.integer("format_version", 0, 1 << 20) != kFormatVersion)
    throw_bad_input("{}: this tandem reads version {}", f.where("format_version"), kFormatVersion);
  c.component = f.string("component");
  constexpr std::string_view kComponents[] = {"residual",  "engram", "vision", "dspark",
                                              "attention", "moe",    "model"};
  if (std::find(std::begin(kComponents), std::end(kComponents), c.component) ==
      std::end(kComponents))
    throw_bad_input("{}: unknown component '{}'", f.where("component"), c.component);
  c.name = f.string("name");
  if (c.name != manifest_path.stem().string())
    throw_bad_input("{}: '{}' does not match the file name", f.where("name"), c.name);
  f.unsigned_integer("seed");
  f.string("generator_commit");
  f.object("config");
  const std::string blob = f.string("blob");
  c.blob_source = file_in(manifest_path.parent_path(), blob, f.where("blob")).string();
  const JsonFields outputs = f.object("outputs");
  if (c.manifest.at("outputs").empty())
    throw_bad_input("{}: no outputs listed (the case would compare nothing)", f.where("outputs"));
  for (const auto& [name, v] : c.manifest.at("outputs").items()) {
    if (name.empty() || name.find('\0') != std::string::npos)
      throw_bad_input("{}: an output named '{}'", outputs.where(""), brief_text(name));
    const JsonFields output = outputs.object(name.c_str());
    output.reject_unknown({"rule"});
    const std::string rule = output.string("rule");
    if (rule != "tolerance" && rule != "exact" && rule != "reference")
      throw_bad_input("{}: unknown rule '{}'", outputs.where(name), rule);
    c.outputs.emplace_back(name, rule);
  }
  const std::string bytes = read_file(c.blob_source);
  const std::string sha = sha256_hex(bytes);
  if (sha != f.string("blob_sha256"))
    throw_bad_input("{}: {} has SHA-256 {}, the manifest says {}", f.where("blob_sha256"),
                    c.blob_source, sha, f.string("blob_sha256"));
  c.blob = parse_safetensors(bytes, c.blob_source);
  // Inputs and expectations are finite: a NaN stored by accident must not pass as "equal" or
  // be blamed on the kernels.
  for (const auto& [name, t] : c.blob.tensors) {
    if (t.dtype != DType::F64 && t.dtype != DType::F32) continue;
    const std::vector<double> v = as_doubles(t);
    const auto bad = std::find_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); });
    if (bad != v.end())
      throw_bad_input("{}: tensor '{}' holds {} at element {} (stored tensors are finite)",
                      c.blob_source, name, *bad, bad - v.begin());
  }
  return c;
}

// Any stored tensor as doubles (F64, F32, I64, I32), for deltas.
std::vector<double> as_doubles(const StTensor& t) {
  const size_t n = t.bytes.size() / dtype_size(t.dtype);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    const char* p = t.bytes.data() + i * dtype_size(t.dtype);
    switch (t.dtype) {
      case DType::F64: {
        double x;
        std::memcpy(&x, p, 8);
        v[i] = x;
        break;
      }
      case DType::F32: {
        float x;
        std::memcpy(&x, p, 4);
        v[i] = x;
        break;
      }
      case DType::I64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        v[i] = double(x);
        break;
      }
      case DType::I32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        v[i] = x;
        break;
      }
      default:
        v[i] = static_cast<uint8_t>(*p);
    }
  }
  return v;
}

// Largest |a - b| and whether it is within 1e-12 of b's largest magnitude. The double reference
// is deterministic; 1e-12 leaves room only for compilers contracting or reordering its sums.
struct Delta {
  double max_abs = 0, scale = 0;
  bool within() const { return max_abs <= 1e-12 * scale; }
};
Delta delta(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return {INFINITY, 0};
  Delta d;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(a[i] - b[i]);
    d.max_abs = std::max(d.max_abs, std::isnan(e) ? INFINITY : e);  // max() would drop a NaN
    d.scale = std::max(d.scale, std::fabs(b[i]));
  }
  return d;
}
// A tensor's shape and values as doubles.
struct Values {
  Shape shape;
  std::vector<double> v;
};
template <class T>
Values doubles(const Tensor<T>& t) {
  return {t.shape, {t.data.begin(), t.data.end()}};
}

// The reference recomputed now against the stored expectation, which must have its shape.
CheckedTensor reference_check(const std::string& name, const Values& now, const StTensor& stored) {
  if (stored.shape != now.shape)
    throw_bad_input("tensor 'expected.{}' has shape {}, the case computes {}", name,
                    fmt::join(stored.shape, "x"), fmt::join(now.shape, "x"));
  const Delta dl = delta(now.v, as_doubles(stored));
  return {name, "ref-1e-12", dl.within(),
          fmt::format("reference max |now - stored| = {:.3e} (limit {:.3e})", dl.max_abs,
                      1e-12 * dl.scale)};
}

// A stored tensor of the expected shape (BadInput naming the file and tensor otherwise).
template <class T>
Tensor<T> get_shaped(const LoadedCase& c, const std::string& name, const Shape& shape) {
  Tensor<T> t = c.blob.get_as<T>(name, c.blob_source);
  if (t.shape != shape)
    throw_bad_input("{}: tensor '{}' has shape {}, expected {}", c.blob_source, name,
                    fmt::join(t.shape, "x"), fmt::join(shape, "x"));
  return t;
}

CaseReport check_residual(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"residual", "path", "act"});
  const ResidualConfig cfg = parse_residual_config(config.object("residual"));
  const ResidualPath path = parse_path(config);
  const ActDType act = parse_act(config);
  const ResidualStackInputs in = get_residual_inputs(c.blob, cfg, act, c.blob_source);
  reference::ResidualRefOutputs expected;
  expected.taps_y.resize(cfg.sites), expected.taps_x.resize(cfg.sites);
  const auto names = residual_outputs(cfg.sites);
  const auto stored = residual_tensors(expected);
  for (size_t i = 0; i < names.size(); ++i)
    *stored[i] = c.blob.get_as<double>("expected." + names[i], c.blob_source);
  reference::ResidualRefOutputs truth = reference::run_truth(in, path);
  const auto now = residual_tensors(truth);
  CaseReport report{c.name, {}};
  for (size_t i = 0; i < names.size(); ++i)
    report.tensors.push_back(reference_check(names[i], doubles(*now[i]),
                                             c.blob.get("expected." + names[i], c.blob_source)));
  const auto baseline = baseline_error_draws(in, path, expected);
  for (const auto& t : compare_residual(expected, baseline, run_residual_stack(in, path, opt), act))
    report.tensors.push_back({t.name, "tolerance", t.result.pass, t.result.summary()});
  return report;
}

CaseReport check_engram(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"engram", "act", "layer_index"});
  const EngramConfig cfg = parse_engram_config(config.object("engram"));
  const ActDType act = parse_act(config);
  const EngramInputs in = engram_inputs_from(
      c.blob, cfg, act, static_cast<int>(config.integer("layer_index", 0, 1000)), c.blob_source);
  const EngramReference now = run_engram_reference(in);
  EngramReference expected = now;
  expected.addresses = c.blob.get_as<int64_t>("expected.addresses", c.blob_source);
  expected.rows = c.blob.get_as<float>("expected.rows", c.blob_source);
  expected.truth.gates = c.blob.get_as<double>("expected.gates", c.blob_source);
  expected.truth.h_out = c.blob.get_as<double>("expected.h_out", c.blob_source);
  CaseReport report{c.name, {}};
  const std::pair<std::string, Values> ref_now[] = {{"addresses", doubles(now.addresses)},
                                                    {"rows", doubles(now.rows)},
                                                    {"gates", doubles(now.truth.gates)},
                                                    {"h_out", doubles(now.truth.h_out)}};
  for (const auto& [name, v] : ref_now)
    report.tensors.push_back(
        reference_check(name, v, c.blob.get("expected." + name, c.blob_source)));
  for (const auto& t : compare_engram(expected, run_engram_layer(in, opt), act))
    report.tensors.push_back({t.name,
                              t.name == "addresses" || t.name == "rows" ? "exact" : "tolerance",
                              t.result.pass, t.result.summary()});
  return report;
}

CaseReport check_vision(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"vision", "act"});
  const VisionConfig v = parse_vision_config(config.object("vision"));
  const ActDType act = parse_act(config);
  const std::string& src = c.blob_source;
  // Every stored input has the shape the config implies (a config contradicting its blob is
  // bad input, not a different case).
  const reference::VisionGeometry g = reference::vision_geometry(v.image_w, v.image_h, v.sizing);
  const int64_t n = g.patches(), T = g.visual_tokens() + v.text_tokens, E = v.experts;
  VisionInputs in;
  in.grid = get_shaped<float>(c, "grid", {g.grid_h, g.grid_w, v.width});
  in.rope.x = get_shaped<float>(c, "rope.x", {n, v.heads, v.head_dim});
  in.rope.row = get_shaped<int32_t>(c, "rope.row", {n}).data;
  in.rope.col = get_shaped<int32_t>(c, "rope.col", {n}).data;
  in.gate.logits = get_shaped<float>(c, "gate.logits", {T, E});
  in.gate.is_image = get_shaped<uint8_t>(c, "gate.is_image", {T}).data;
  for (size_t t = 0; t < in.gate.is_image.size(); ++t)
    if (in.gate.is_image[t] > 1)
      throw_bad_input("{}: tensor 'gate.is_image' holds {} at token {}, expected 0 or 1", src,
                      in.gate.is_image[t], t);
  in.gate.bias_text = get_shaped<float>(c, "gate.bias_text", {E}).data;
  in.gate.bias_vl = get_shaped<float>(c, "gate.bias_vl", {E}).data;
  in.gate.top_k = v.top_k;
  const auto experts = reference::moe_gate<float>(in.gate).experts;
  CaseReport report{c.name, {}};
  const std::pair<std::string, Values> ref_now[] = {
      {"unshuffle", doubles(reference::unshuffle(in.grid))},
      {"rope", doubles(reference::rope_2d<double>(in.rope))},
      {"experts", doubles(experts)},
      {"gate_weights", doubles(reference::moe_weights<double>(in.gate, experts))}};
  for (const auto& [name, now] : ref_now)
    report.tensors.push_back(reference_check(name, now, c.blob.get("expected." + name, src)));
  for (const auto& t : compare_vision(in, run_vision(in, act, opt), act))
    report.tensors.push_back({t.name,
                              t.name == "rope" || t.name == "gate_weights" ? "tolerance" : "exact",
                              t.result.pass, t.result.summary()});
  return report;
}

CheckedTensor exact_output(const std::string& name, const std::string& who,
                           const Tensor<int32_t>& want, const Tensor<int32_t>& got) {
  const TensorCheck t = exact_check(name, want, got);
  return {name, "exact", t.result.pass,
          who + ": " + (t.result.pass ? "bit-exact" : t.result.summary())};
}

CaseReport check_dspark_verify(const LoadedCase& c, const JsonFields& config,
                               const RunOptions& opt) {
  config.reject_unknown({"requests", "budget", "vocab", "greedy", "scheduled"});
  VerifyInputs in;
  in.requests = config.integer("requests", 1, 1 << 16);
  in.budget = static_cast<int>(config.integer("budget", 1, kDsparkMaxDraft));
  in.vocab = config.integer("vocab", 1, int64_t{1} << 31);
  in.greedy = config.boolean("greedy");
  in.seed = c.manifest.at("seed").get<uint64_t>();
  const int64_t R = in.requests, K = in.budget, V = in.vocab;
  in.draft = get_shaped<int32_t>(c, "draft", {R, K});
  in.p_draft = get_shaped<float>(c, "p_draft", {R, K, V});
  in.p_target = get_shaped<float>(c, "p_target", {R, K + 1, V});
  for (int64_t p : get_shaped<int64_t>(c, "position", {R}).data) {
    if (p < 0 || p > UINT32_MAX)
      throw_bad_input("{}: tensor 'position' holds {}, outside [0, 2^32)", c.blob_source, p);
    in.position.push_back(uint32_t(p));
  }
  if (config.has("scheduled") && config.boolean("scheduled")) {
    for (int32_t k : get_shaped<int32_t>(c, "drafted", {R}).data) {
      if (k < 0 || k > K)
        throw_bad_input("{}: tensor 'drafted' holds {}, outside [0, budget {}]", c.blob_source, k,
                        K);
      in.drafted.push_back(k);
    }
    for (int64_t id : get_shaped<int64_t>(c, "request", {R}).data) {
      if (id < 0 || id > UINT32_MAX)
        throw_bad_input("{}: tensor 'request' holds {}, outside [0, 2^32)", c.blob_source, id);
      in.request.push_back(uint32_t(id));
    }
  }
  const Tensor<int32_t> accepted = get_shaped<int32_t>(c, "expected.accepted", {R});
  const Tensor<int32_t> emitted = get_shaped<int32_t>(c, "expected.emitted", {R, K + 1});
  const VerifyOutputs now = reference::dspark_verify(in), got = run_dspark_verify(in, opt);
  CaseReport report{c.name, {}};
  report.tensors.push_back(
      exact_output("accepted", "reference", accepted, Tensor<int32_t>({R}, now.accepted)));
  report.tensors.push_back(exact_output("emitted", "reference", emitted, now.emitted));
  report.tensors.push_back(
      exact_output("accepted", "optimized", accepted, Tensor<int32_t>({R}, got.accepted)));
  report.tensors.push_back(exact_output("emitted", "optimized", emitted, got.emitted));
  return report;
}

CaseReport check_dspark_drafter(const LoadedCase& c, const JsonFields& config,
                                const RunOptions& opt) {
  config.reject_unknown({"dspark"});
  const DsparkConfig cfg = parse_dspark_config(config.object("dspark"));
  const uint64_t seed = c.manifest.at("seed").get<uint64_t>();
  const Tensor<double> features = c.blob.get_as<double>("features", c.blob_source);
  if (features.shape.size() != 2 || features.dim(0) < 1 ||
      features.dim(1) != 3 * cfg.backbone_width)
    throw_bad_input("{}: tensor 'features' must be [T >= 1, {}] (3 x backbone_width), got {}",
                    c.blob_source, 3 * cfg.backbone_width, fmt::join(features.shape, "x"));
  const int32_t last = get_shaped<int32_t>(c, "last", {1}).data[0];
  if (last < 0 || last >= cfg.vocab)
    throw_bad_input("{}: tensor 'last' holds token {}, outside [0, {})", c.blob_source, last,
                    cfg.vocab);
  const DrafterOutputs now = run_drafter_case(cfg, features, last, seed, reference::dspark_verify);
  const DrafterOutputs got =
      run_drafter_case(cfg, features, last, seed,
                       [&](const VerifyInputs& in) { return run_dspark_verify(in, opt); });
  auto stored = [&](const char* name) {
    return c.blob.get("expected." + std::string(name), c.blob_source);
  };
  CaseReport report{c.name, {}};
  report.tensors.push_back(reference_check("draft", doubles(now.draft), stored("draft")));
  report.tensors.push_back(reference_check("logits", doubles(now.logits), stored("logits")));
  report.tensors.push_back(
      reference_check("confidence", doubles(now.confidence), stored("confidence")));
  const Tensor<int32_t> text = get_shaped<int32_t>(c, "expected.text", now.text.shape);
  report.tensors.push_back(exact_output("text", "reference verification", text, now.text));
  report.tensors.push_back(exact_output("text", "optimized verification", text, got.text));
  return report;
}

CaseReport check_dspark(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  return c.manifest.at("config").contains("dspark") ? check_dspark_drafter(c, config, opt)
                                                    : check_dspark_verify(c, config, opt);
}

// The optimized result against the stored truth under the tolerance policy (baseline recomputed).
void add_checks(CaseReport& report, const std::vector<TensorCheck>& checks,
                const std::vector<std::pair<std::string, std::string>>& rules) {
  for (const TensorCheck& t : checks) {
    const auto rule =
        std::find_if(rules.begin(), rules.end(), [&](const auto& r) { return r.first == t.name; });
    report.tensors.push_back({t.name, rule == rules.end() ? "tolerance" : rule->second,
                              t.result.pass, t.result.summary()});
  }
}

// A kernel case with one floating output: the reference recomputed (1e-12 of the stored truth),
// then the optimized output against the stored truth (baseline recomputed).
template <class Reference, class Outputs, class Compare>
CaseReport check_one_output(const LoadedCase& c, const std::string& output, Reference ref,
                            const Outputs& out, ActDType act, Compare compare) {
  const std::string key = "expected." + output;
  CaseReport report{c.name, {}};
  report.tensors.push_back(
      reference_check(output, doubles(ref.truth), c.blob.get(key, c.blob_source)));
  ref.truth = c.blob.get_as<double>(key, c.blob_source);
  add_checks(report, compare(ref, out, act), c.outputs);
  return report;
}

// Refuses stored shapes that multiply to more than kMaxWork multiply-adds per run (the blob's own
// size bound does not bound the work).
void within_work(const LoadedCase& c, const char* tensors, double work) {
  if (work > kMaxWork)
    throw_bad_input("{}: tensors {} imply ~{:.3g} multiply-adds per run; the limit is {:.3g}",
                    c.blob_source, tensors, work, kMaxWork);
}

CaseReport check_attention(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"heads", "act"});
  AttentionInputs in;
  in.heads = static_cast<int>(config.integer("heads", 1, 1024));
  in.act = parse_act(config);
  in.q = c.blob.get_as<float>("q", c.blob_source);
  in.keys = c.blob.get_as<float>("keys", c.blob_source);
  in.values = c.blob.get_as<float>("values", c.blob_source);
  within_work(c, "q x keys",
              double(in.q.size()) * double(in.keys.shape.empty() ? 0 : in.keys.dim(0)) * 2);
  const AttentionOutputs out = run_attention_causal(in, opt);  // validates the shapes first
  return check_one_output(c, "o", run_attention_reference(in), out, in.act, compare_attention);
}

CaseReport check_moe(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"act"});
  MoeExpertInputs in;
  in.act = parse_act(config);
  in.y = c.blob.get_as<float>("y", c.blob_source);
  in.experts = c.blob.get_as<int32_t>("experts", c.blob_source);
  in.weights = c.blob.get_as<float>("weights", c.blob_source);
  in.w_in = c.blob.get_as<float>("w_in", c.blob_source);
  in.w_out = c.blob.get_as<float>("w_out", c.blob_source);
  within_work(c, "y x experts x w_in",
              double(in.y.shape.empty() ? 0 : in.y.dim(0)) *
                  double(in.experts.shape.size() == 2 ? in.experts.dim(1) : 0) * 2 *
                  double(in.w_in.size() /
                         std::max<int64_t>(1, in.w_in.shape.empty() ? 1 : in.w_in.dim(0))));
  const MoeExpertOutputs out = run_moe_experts(in, opt);  // validates the shapes first
  return check_one_output(c, "f", run_moe_reference(in), out, in.act, compare_moe);
}

CaseReport check_model(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"model"});
  const ModelConfig m = parse_model_config(config.object("model").json(), c.name + ".json");
  check_model_size(m, c.name + ".json");
  ModelPrompt p;
  p.ids = c.blob.get_as<int32_t>("ids", c.blob_source).data;
  p.visual = c.blob.get_as<double>("visual", c.blob_source);
  if (p.ids.size() > 4096)
    throw_bad_input("{}: tensor 'ids' holds {} tokens, at most 4096", c.blob_source, p.ids.size());
  const reference::TinyModelWeights w = reference::tiny_model_weights(m);
  const ModelRun out = run_model(m, optimized_model_weights(w), p, opt);  // validates the prompt
  ModelReference ref = run_model_reference(m, w, p);
  CaseReport report{c.name, {}};
  for (reference::Tap& t : ref.truth) {
    const StTensor& stored = c.blob.get("expected." + t.name, c.blob_source);
    report.tensors.push_back(reference_check(t.name, doubles(t.value), stored));
    t.value = c.blob.get_as<double>("expected." + t.name, c.blob_source);
  }
  add_checks(report, check_model(m, w, p, ref, out), c.outputs);
  return report;
}

// Compares a regenerated blob with the one on disk, appending a per-tensor delta report.
bool same_as_on_disk(const std::filesystem::path& manifest_path, const BuiltCase& built,
                     std::vector<std::string>& deltas) {
  const Safetensors& fresh = built.blob;
  try {
    const LoadedCase old = load_case(manifest_path);
    auto rules = [](auto outputs) {  // manifests list outputs by name
      std::sort(outputs.begin(), outputs.end());
      return outputs;
    };
    bool same =
        old.manifest.at("config") == built.config && rules(old.outputs) == rules(built.outputs);
    if (!same) deltas.push_back("config or output rules: CHANGED");
    for (const auto& [name, t] : fresh.tensors) {
      const auto it = old.blob.tensors.find(name);
      if (it == old.blob.tensors.end() || it->second.shape != t.shape) {
        deltas.push_back(fmt::format("{}: CHANGED (new or reshaped)", name));
        same = false;
      } else if (name.rfind("expected.", 0) != 0) {
        if (it->second.bytes != t.bytes)
          deltas.push_back(fmt::format("input {}: CHANGED", name)), same = false;
      } else {
        const Delta dl = delta(as_doubles(t), as_doubles(it->second));
        same &= dl.within();
        deltas.push_back(fmt::format("{}: max |new - old| = {:.3e} ({})", name.substr(9),
                                     dl.max_abs, dl.within() ? "unchanged" : "CHANGED"));
      }
    }
    return same;
  } catch (const BadInput& e) {
    deltas.push_back(fmt::format("existing case unreadable: {}", e.what()));
    return false;
  }
}

}  // namespace

bool CaseReport::pass() const {
  return std::all_of(tensors.begin(), tensors.end(), [](const CheckedTensor& t) { return t.pass; });
}

std::vector<std::filesystem::path> list_cases(const std::filesystem::path& dir) {
  return list_manifests(dir);
}

std::vector<std::string> generator_case_names() {
  std::vector<std::string> n;
  for (const auto& s : specs()) n.push_back(s.name);
  return n;
}

CaseReport check_component(const LoadedCase& c, const RunOptions& opt) {
  if (c.component == "residual") return check_residual(c, opt);
  if (c.component == "dspark") return check_dspark(c, opt);
  if (c.component == "attention") return check_attention(c, opt);
  if (c.component == "moe") return check_moe(c, opt);
  if (c.component == "model") return check_model(c, opt);
  return c.component == "engram" ? check_engram(c, opt) : check_vision(c, opt);
}

CaseReport check_case(const std::filesystem::path& manifest, const RunOptions& opt) {
  const LoadedCase c = load_case(manifest);
  try {
    CaseReport report = check_component(c, opt);
    // The manifest's outputs are the ones compared: none missing, none invented.
    for (const auto& output : c.outputs)
      if (std::none_of(report.tensors.begin(), report.tensors.end(),
                       [&](const CheckedTensor& t) { return t.name == output.first; }))
        throw_bad_input("{}: field 'outputs.{}': the {} case has no such output", manifest.string(),
                        brief_text(output.first), c.component);
    return report;
  } catch (const BadInput& e) {  // inputs the kernels refuse: say which case held them
    if (std::string_view(e.what()).find(c.blob_source) != std::string_view::npos) throw;
    throw_bad_input("{}: {}", c.blob_source, e.what());
  } catch (const KernelFault& e) {  // the code under test failed: this case FAILs, others run
    return {c.name, {{e.tensor(), "kernel output", false, e.what()}}};
  }
}

std::vector<RegenReport> regen_cases(const std::filesystem::path& dir, bool accept,
                                     const std::vector<std::string>& only) {
  const std::vector<std::string> known = generator_case_names();
  for (const std::string& name : only)
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw_bad_input("golden regen: no generator case '{}' (tandem golden list)", name);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_bad_input("{}: cannot create the directory: {}", dir.string(), ec.message());
  remove_leftovers(dir);
  // The synthetic compression map shipped for tests (the real one comes from the tokenizer).
  Safetensors map_file;
  map_file.metadata = {{"what", "synthetic Engram compression map: vocab 4096 -> 3001, seed 11"}};
  map_file.put("map", Tensor<int32_t>({4096}, engram_case_map().map));
  const std::string map_bytes = serialize_safetensors(map_file);
  const std::filesystem::path map_path = file_in(dir, kMapFile, dir.string());
  if (!std::filesystem::exists(map_path) || read_file(map_path) != map_bytes)
    write_file_atomic(map_path, std::string_view(map_bytes));

  std::vector<RegenReport> reports;
  for (const CaseSpec& spec : specs()) {
    if (!only.empty() && std::find(only.begin(), only.end(), spec.name) == only.end()) continue;
    RegenReport r{spec.name, {}, false, false};
    BuiltCase built = spec.build(spec.seed);
    built.blob.metadata = {{"component", spec.component}, {"case", spec.name}};
    const auto manifest_path = file_in(dir, spec.name + ".json", dir.string());
    const bool exists = std::filesystem::exists(std::filesystem::symlink_status(manifest_path));
    if (exists)
      r.changed = !same_as_on_disk(manifest_path, built, r.deltas);
    else
      r.deltas.push_back("new case");
    // Unchanged cases stay untouched; changed expectations need --accept.
    if (exists && (!r.changed || !accept)) {
      reports.push_back(std::move(r));
      continue;
    }
    nlohmann::json outputs = nlohmann::json::object();
    for (const auto& [n, rule] : built.outputs) outputs[n] = {{"rule", rule}};
    replace_case(dir, spec.name, serialize_safetensors(built.blob),
                 {{"format_version", kFormatVersion},
                  {"component", spec.component},
                  {"name", spec.name},
                  {"config", built.config},
                  {"seed", spec.seed},
                  {"generator_commit", kGitCommit},
                  {"outputs", outputs}});
    r.written = true;
    reports.push_back(std::move(r));
  }
  return reports;
}

}  // namespace tandem::golden
