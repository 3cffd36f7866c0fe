#include "cases/vision_case.hpp"

#include <fmt/format.h>

#include <cmath>

#include "cases/case_check.hpp"
#include "cases/case_util.hpp"
#include "cases/dense_case.hpp"
#include "core/json_fields.hpp"
#include "core/philox.hpp"
#include "optimized/vision.hpp"
#include "sim/vision_traffic.hpp"

namespace tandem {

namespace {

// `n` seeded token ids in [0, rows): a hash gate's ids over its table (Philox stream `stream`).
std::vector<int32_t> seeded_token_ids(int64_t n, int64_t rows, uint64_t seed, uint32_t stream) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < n; ++t)
    ids.push_back(int32_t(philox_draw(seed, stream, uint32_t(t)).v[0] % uint64_t(rows)));
  return ids;
}

}  // namespace

MoeGateInputs make_gate_inputs(int64_t image_tokens, int64_t text_tokens, int experts, int top_k,
                               int hash_vocab, uint64_t seed) {
  MoeGateInputs in;
  const int64_t T = image_tokens + text_tokens;
  in.logits = Tensor<float>({T, experts});
  for (int64_t i = 0; i < in.logits.size(); ++i)
    in.logits.data[i] = seeded_uniform(seed, 4, uint32_t(i), -4.0f, 4.0f);
  for (int64_t t = 0; t < T; ++t) in.is_image.push_back(t < image_tokens);
  for (int e = 0; e < experts; ++e) {
    in.bias_text.push_back(seeded_uniform(seed, 5, e, -0.5f, 0.5f));
    in.bias_vl.push_back(seeded_uniform(seed, 6, e, -0.5f, 0.5f));
  }
  in.top_k = top_k;
  if (hash_vocab > 0) {
    in.tid2eid = seeded_tid2eid(hash_vocab, experts, top_k, seed, 7);
    in.token_ids = seeded_token_ids(T, hash_vocab, seed, 8);
  }
  return in;
}

VisionInputs make_vision_inputs(const VisionCase& c) {
  VisionInputs in;
  in.geometry = reference::vision_geometry(c.image_w, c.image_h, c.sizing);
  const auto& g = in.geometry;
  Tensor<uint8_t> rgb({c.image_h, c.image_w, 3});
  for (int64_t i = 0; i < rgb.size(); ++i)
    rgb.data[i] = static_cast<uint8_t>(philox_draw(c.seed, 1, uint32_t(i)).v[0]);
  const Tensor<float> canvas = reference::preprocess(rgb, g);
  const Tensor<float> patches = reference::patchify(canvas);
  const int64_t P = patches.dim(2), C = c.width, n = g.patches();
  Tensor<float> w({C, P});
  for (int64_t i = 0; i < C * P; ++i)
    w.data[i] = seeded_uniform(c.seed, 2, uint32_t(i), -1.0f, 1.0f) / std::sqrt(float(P));
  const Tensor<double> embedded = reference::patch_embedding(patches, w);
  in.grid = Tensor<float>({g.grid_h, g.grid_w, C});
  for (int64_t i = 0; i < in.grid.size(); ++i)
    in.grid.data[i] = round_to(c.act, float(embedded.data[i]));
  in.rope.x = Tensor<float>({n, c.heads, c.head_dim});
  for (int64_t i = 0; i < in.rope.x.size(); ++i)
    in.rope.x.data[i] = round_to(c.act, seeded_uniform(c.seed, 3, uint32_t(i), -2.0f, 2.0f));
  for (int64_t p = 0; p < n; ++p)
    in.rope.row.push_back(int32_t(p / g.grid_w)), in.rope.col.push_back(int32_t(p % g.grid_w));
  in.gate =
      make_gate_inputs(g.visual_tokens(), c.text_tokens, c.experts, c.top_k, c.hash_vocab, c.seed);
  return in;
}

VisionResults run_vision(const VisionInputs& in, ActDType act, const RunOptions& opt) {
  return {run_unshuffle(in.grid, act, opt), run_rope_2d(in.rope, act, opt),
          run_moe_gate(in.gate, opt)};
}

std::vector<TensorCheck> compare_vision(const VisionInputs& in, const VisionResults& out,
                                        ActDType act) {
  std::vector<TensorCheck> checks;
  checks.push_back(exact_check("unshuffle", reference::unshuffle(in.grid), out.unshuffle.tokens));
  checks.push_back(exact_check("unshuffle_inverse", in.grid, out.unshuffle.restored));
  const Tensor<double> truth = reference::rope_2d<double>(in.rope);
  Tensor<double> baseline = reference::rope_2d<float>(in.rope);
  for (double& v : baseline.data) v = round_to(act, float(v));
  checks.push_back({"rope", compare_to_truth(truth.span(), baseline.span(), as_doubles(out.rope.x),
                                             out_dtype(act), in.rope.x.dim(2))});
  for (TensorCheck& c : compare_gate(in.gate, out.gate)) checks.push_back(std::move(c));
  return checks;
}

std::vector<TensorCheck> compare_gate(const MoeGateInputs& in, const MoeGateOutputs& out) {
  // The experts are discrete: the float gate (the kernels' precision, same formula) selects them.
  const reference::MoeGateRef base = reference::moe_gate<float>(in);
  const Tensor<double> truth_w = reference::moe_weights<double>(in, base.experts);
  return {exact_check("experts", base.experts, out.experts),
          {"gate_weights", compare_to_truth(truth_w.span(), base.weights.span(),
                                            as_doubles(out.weights), OutDType::F32, in.top_k)}};
}

MoeGateInputs router_gate_inputs(const CheckpointLayer& l) {
  const Tensor<double> logits = run_dense_reference(router_logits_inputs(l)).baseline;
  MoeGateInputs g;
  g.logits = Tensor<float>(logits.shape);
  for (size_t i = 0; i < logits.data.size(); ++i) g.logits.data[i] = float(logits.data[i]);
  // Image tokens (alternating) only where the release has a vision tower and its bias_vl.
  const bool vision = !l.tensors.gate.bias_vl.data.empty();
  for (int64_t t = 0; t < l.tokens; ++t) g.is_image.push_back(uint8_t(vision && t % 2));
  g.bias_text = l.tensors.gate.bias.data;   // none at a hash layer
  g.bias_vl = l.tensors.gate.bias_vl.data;  // none without a vision tower (every token text)
  g.top_k = l.release.top_k, g.route_scale = float(l.release.route_scale);
  g.tid2eid = l.tensors.gate.tid2eid;
  if (g.hashes())  // seeded token ids over the table's rows (image tokens' unread)
    g.token_ids = seeded_token_ids(l.tokens, g.tid2eid.dim(0), l.seed, 9);
  return g;
}

// ================================================================ the vision component
namespace {

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
  for_each_tensor(in, [&](const std::string& name, const auto& t) { put_tensor(b.blob, name, t); });
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

CaseReport check_vision(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"vision", "act"});
  const VisionConfig v = parse_vision_config(config.object("vision"));
  const ActDType act = parse_act(config);
  const std::string& src = c.blob_source;
  const reference::VisionGeometry g = reference::vision_geometry(v.image_w, v.image_h, v.sizing);
  const int64_t n = g.patches(), T = g.visual_tokens() + v.text_tokens, E = v.experts;
  // Every stored input has the shape the config implies (a config contradicting its blob is
  // bad input, not a different case).
  VisionInputs in;
  in.grid = shaped<float>({g.grid_h, g.grid_w, v.width});
  in.rope.x = shaped<float>({n, v.heads, v.head_dim});
  in.rope.row.resize(n), in.rope.col.resize(n);
  in.gate.logits = shaped<float>({T, E});
  in.gate.is_image.resize(T);
  in.gate.bias_text.resize(E), in.gate.bias_vl.resize(E);
  in.gate.top_k = v.top_k;
  if (v.hash_vocab > 0)
    in.gate.tid2eid = shaped<int32_t>({v.hash_vocab, v.top_k}), in.gate.token_ids.resize(T);
  for_each_tensor(in, [&](const std::string& name, auto& t) { load_shaped(c, name, t); });
  for (size_t t = 0; t < in.gate.is_image.size(); ++t)
    if (in.gate.is_image[t] > 1)
      throw_bad_input("{}: tensor 'gate.is_image' holds {} at token {}, expected 0 or 1", src,
                      in.gate.is_image[t], t);
  try {  // hostile table entries or token ids: refused before the reference indexes with them
    validate_moe_gate_inputs(in.gate);
  } catch (const BadInput& e) {
    throw_bad_input("{}: {}", src, e.what());
  }
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

VerifyRow verify_vision(const ModelConfig& model, ActDType act, const RunOptions& opt) {
  VisionCase c;
  static_cast<VisionConfig&>(c) = model.vision;
  c.act = act;
  c.seed = model.seed;
  const VisionInputs in = make_vision_inputs(c);
  return verify_kernel_row<VisionResults>(
      {.component = "vision",
       .name = fmt::format("{}x{}px/{} {} tokens, E={} k={}{}", c.image_w, c.image_h,
                           act_dtype_name(act), in.geometry.visual_tokens(), c.experts, c.top_k,
                           c.hash_vocab ? fmt::format(" text hashed V={}", c.hash_vocab) : ""),
       .run = [&](const RunOptions& o) { return run_vision(in, act, o); },
       .compare = [&](const VisionResults& out) { return compare_vision(in, out, act); },
       .same =
           [](const VisionResults& a, const VisionResults& b) {
             return a.unshuffle.tokens.data == b.unshuffle.tokens.data &&
                    a.rope.x.data == b.rope.x.data && a.gate.experts.data == b.gate.experts.data &&
                    a.gate.weights.data == b.gate.weights.data;
           },
       .launches =
           [](const VisionResults& out) {
             LaunchLog all;
             for (const LaunchLog* l :
                  {&out.unshuffle.launches, &out.rope.launches, &out.gate.launches})
               all.insert(all.end(), l->begin(), l->end());
             return all;
           },
       .predicted =
           [&] {
             return sim::predict_vision(in.grid.dim(0), in.grid.dim(1), c.width, in.rope.x.dim(0),
                                        c.heads, c.head_dim, in.gate.logits.dim(0), c.experts,
                                        c.top_k, in.gate.hashed_tokens(), act);
           },
       .bytes = fmt::format("{} -> {} tokens", in.geometry.patches(), in.geometry.visual_tokens())},
      opt);
}

VerifyRow verify_router_gate(const CheckpointLayer& l, const RunOptions& opt) {
  const MoeGateInputs g = router_gate_inputs(l);
  const int64_t T = g.logits.dim(0), E = g.logits.dim(1);
  return verify_kernel_row<MoeGateOutputs>(
      {.component = "vision",
       .name = fmt::format("layers.{}.ffn.gate {}{} T={} E={} k={}", l.tensors.layer,
                           g.hashes() ? "tid2eid" : "bias", g.bias_vl.empty() ? "" : "/bias_vl", T,
                           E, g.top_k),
       .run = [&](const RunOptions& o) { return run_moe_gate(g, o); },
       .compare = [&](const MoeGateOutputs& out) { return compare_gate(g, out); },
       .same =
           [](const MoeGateOutputs& a, const MoeGateOutputs& b) {
             return a.experts.data == b.experts.data && a.weights.data == b.weights.data;
           },
       .predicted =
           [&] { return LaunchLog{sim::predict_moe_gate(T, E, g.top_k, g.hashed_tokens())}; },
       .bytes = g.hashes() ? "image tokens' logits, text tokens' table rows" : "every logit once"},
      opt);
}

}  // namespace

Component vision_component() {
  Component c;
  c.name = "vision";
  c.sections = {"vision"};
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    std::vector<VerifyJob> jobs;
    for (ActDType a : {ActDType::f32, ActDType::bf16})
      jobs.push_back({"vision", [=, &model, &opt] { return verify_vision(model, a, opt); }});
    return jobs;
  };
  // The modality router's gate with the layer's released biases (text and image tokens
  // alternating) on the logits of its released ffn.gate.weight.
  c.checkpoint_rows = [](const CheckpointLayer& l, const RunOptions& opt) {
    return std::vector<VerifyJob>{
        {"vision router gate", [&l, &opt] { return verify_router_gate(l, opt); }}};
  };
  c.golden_specs = [] {
    using A = ActDType;
    return std::vector<GoldenSpec>{
        {"vision_100x40_f32", 301,
         [](uint64_t seed) { return build_vision(vision_case(100, 40, A::f32, seed)); }},
        {"vision_700x300_bf16", 302,
         [](uint64_t seed) { return build_vision(vision_case(700, 300, A::bf16, seed)); }},
        {"vision_300x200_f32_hashed", 303, [](uint64_t seed) {
           VisionCase c = vision_case(300, 200, A::f32, seed);
           c.hash_vocab = 500;  // text tokens take their tid2eid rows, image tokens rank
           return build_vision(c);
         }}};
  };
  c.check = check_vision;
  return c;
}

}  // namespace tandem
