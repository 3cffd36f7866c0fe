#include "cases/dspark_case.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <future>

#include "cases/case_check.hpp"
#include "cases/model_case.hpp"
#include "core/json_fields.hpp"
#include "core/philox.hpp"
#include "optimized/drafter.hpp"
#include "optimized/dspark.hpp"
#include "reference/drafter.hpp"
#include "reference/dspark.hpp"
#include "reference/model_util.hpp"
#include "reference/residual.hpp"  // ScopedSumOrder
#include "sim/dspark_traffic.hpp"

namespace tandem {

std::vector<float> seeded_distribution(int64_t V, uint64_t seed, uint32_t id) {
  std::vector<float> p(V);
  float sum = 0;
  for (int64_t v = 0; v < V; ++v) {
    const uint32_t w = philox_draw(seed, id, uint32_t(v)).v[0];
    p[v] = (w % 7 == 0) ? 0.0f : philox_uniform(w) + 0.01f;
    sum += p[v];
  }
  for (float& x : p) x = sum > 0 ? x / sum : 1.0f / V;
  return p;
}

VerifyInputs make_verify_inputs(int64_t R, int K, int64_t V, uint64_t seed, bool greedy) {
  VerifyInputs in;
  in.requests = R, in.vocab = V, in.budget = K, in.seed = seed, in.greedy = greedy;
  in.draft = Tensor<int32_t>({R, K});
  in.p_draft = Tensor<float>({R, K, V});
  in.p_target = Tensor<float>({R, K + 1, V});
  for (int64_t r = 0; r < R; ++r) {
    in.position.push_back(uint32_t(100 + 7 * r));
    for (int k = 0; k <= K; ++k) {
      const auto t = seeded_distribution(V, seed, uint32_t(1000 + r * 16 + k));
      std::copy(t.begin(), t.end(), in.p_target.ptr() + (r * (K + 1) + k) * V);
      if (k == K) continue;
      // The drafter: often close to the target (mixing), so that acceptances happen.
      const auto d = seeded_distribution(V, seed, uint32_t(2000 + r * 16 + k));
      float* pd = in.p_draft.ptr() + (r * K + k) * V;
      for (int64_t v = 0; v < V; ++v) pd[v] = 0.7f * t[v] + 0.3f * d[v];
      // Drafted token: drawn from the draft distribution (greedy: its argmax, sometimes wrong).
      in.draft.data[r * K + k] =
          greedy ? (r % 3 ? reference::argmax(t) : reference::argmax({pd, size_t(V)}))
                 : reference::inverse_cdf(
                       {pd, size_t(V)},
                       philox_uniform(philox_draw(seed, 9, uint32_t(r * 16 + k)).v[0]));
    }
  }
  return in;
}

void schedule_batch(VerifyInputs& in, uint64_t seed) {
  in.drafted.clear(), in.request.clear();
  for (int64_t r = 0; r < in.requests; ++r) {
    in.drafted.push_back(int32_t(r % (in.budget + 1)));
    // Distinct: 7919 is odd, so equal ids would need 2^16 to divide the difference of slots.
    const uint32_t w = philox_draw(seed, 11, uint32_t(r)).v[0];
    in.request.push_back(uint32_t(r) * 7919u + (w & 0xffu) * 65536u);
  }
}

std::vector<double> dspark_sps_profile(int max_tokens) {
  std::vector<double> sps(max_tokens + 1);
  for (int n = 0; n <= max_tokens; ++n) sps[n] = 1.0 / (1.0 + n / 16.0);
  return sps;
}

bool pass_counts_hold(const reference::SpeculativeStats& s, int budget, bool reached_limit) {
  for (size_t p = 0; p < s.accepted_per_step.size(); ++p) {
    const bool last = p + 1 == s.accepted_per_step.size();
    if (s.accepted_per_step[p] < 0 || s.accepted_per_step[p] > s.admitted_per_step[p] ||
        s.admitted_per_step[p] > budget)
      return false;
    if (s.emitted_per_step[p] != s.accepted_per_step[p] + 1 && !(last && reached_limit))
      return false;
  }
  return true;
}

DsparkDecode dspark_decode(const DsparkConfig& c, const reference::DsparkDrafter& drafter,
                           uint64_t seed, int requests, bool greedy, int steps,
                           const reference::Verifier& verify, DraftMemo* memo) {
  std::vector<reference::TinyBackbone> models;  // one cache per request, the same weights
  for (int r = 0; r < requests; ++r)
    models.emplace_back(c.vocab, c.backbone_width, seed, c.backbone_layers);
  DsparkDecode d;
  std::vector<reference::BatchRequest> batch;
  for (int r = 0; r < requests; ++r) {
    std::vector<int32_t> prompt;
    for (uint32_t i = 0; i < uint32_t(kDsparkTrainingPromptTokens); ++i)
      prompt.push_back(
          int32_t(philox_draw(seed, 7, uint32_t(r) * 16 + i).v[0] % uint32_t(c.vocab)));
    d.prompt.push_back(prompt);
    const reference::Backbone* model = &models[r];
    batch.push_back({&models[r], prompt, [=, &drafter](const std::vector<int32_t>& text, int K) {
                       auto propose = [&] {
                         const reference::DraftChoice choice{greedy, seed, uint32_t(r),
                                                             uint32_t(text.size()), c.temperature};
                         const reference::Draft draft =
                             drafter.propose(model->target_features(), text.back(), K, choice);
                         return reference::Proposal{draft.tokens, draft.p_draft, draft.confidence};
                       };
                       if (!memo) return propose();
                       const auto key = std::make_tuple(r, text, K);
                       const auto kept = memo->find(key);
                       return kept != memo->end() ? kept->second
                                                  : memo->emplace(key, propose()).first->second;
                     }});
  }
  d.decode = reference::speculative_batch_decode(
      batch, steps, [&](int) { return c.gamma; },
      reference::scheduler_admission(dspark_sps_profile(requests * (1 + c.gamma))),
      {seed, c.temperature, greedy}, verify);
  return d;
}

AcceptanceProfile acceptance_profile(const reference::BatchDecode& d, int gamma) {
  AcceptanceProfile a;
  a.reached.assign(size_t(gamma), 0);
  std::vector<int64_t> accepted(size_t(gamma), 0);
  int64_t passes = 0, emitted = 0;
  for (const reference::SpeculativeStats& s : d.stats)
    for (size_t p = 0; p < s.accepted_per_step.size(); ++p) {
      ++passes, emitted += s.emitted_per_step[p];
      // Position k is verified when admitted > k and the k drafts before it were accepted.
      for (int k = 0; k < std::min(s.admitted_per_step[p], gamma); ++k) {
        if (s.accepted_per_step[p] < k) break;
        ++a.reached[size_t(k)];
        accepted[size_t(k)] += s.accepted_per_step[p] > k;
      }
    }
  for (int k = 0; k < gamma; ++k)
    a.per_position.push_back(
        a.reached[size_t(k)] ? double(accepted[size_t(k)]) / double(a.reached[size_t(k)]) : 0.0);
  a.tokens_per_pass = passes ? double(emitted) / double(passes) : 0.0;
  return a;
}

// ================================================================ the dspark component
Tensor<float> float_rows(const Eigen::MatrixXd& m) {
  Tensor<float> t({m.rows(), m.cols()});
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) t.data[size_t(i * m.cols() + j)] = float(m(i, j));
  return t;
}

Tensor<float> drafted_p(const ModelRun& run) {
  for (const ModelTap& t : run.taps)
    if (t.name == "draft.p") return t.value;
  return Tensor<float>({0});
}

DrafterCheck check_drafter(const reference::DsparkDrafter& drafter, const Eigen::MatrixXd& features,
                           int32_t last, int64_t first, int K, const DraftChoice& choice,
                           const RunOptions& opt) {
  DrafterCheck out;
  out.run = run_drafter(drafter.config(), drafter.weights(), float_rows(features), last, first, K,
                        choice, opt);
  ModelReference ref;
  ref.forced = model_forced_taps(out.run);
  for (const ModelTap& t : out.run.taps)
    if (t.name == "draft.tokens") ref.forced[t.name] = t.value;  // the tokens both follow
  auto draw = [&](auto scalar) {
    return drafter.draft_taps<decltype(scalar)>(features, last, first, K, choice, &ref.forced);
  };
  ref.truth = draw(0.0);
  ref.baseline = draw(0.0f);
  out.checks = check_widening(ref, out.run, [&] { return draw(0.0f); });
  return out;
}

namespace {

// ---------------------------------------------------------------- dspark cases
// Verification: seeded distributions and drafts; draws keyed by the manifest's seed.
// Scheduled: per-request draft counts and request ids, as a scheduled batch passes them.
BuiltCase build_dspark_verify(int64_t R, int K, int64_t V, bool greedy, uint64_t seed,
                              bool scheduled = false) {
  VerifyInputs in = make_verify_inputs(R, K, V, seed, greedy);
  if (scheduled) schedule_batch(in, seed);
  BuiltCase b;
  b.config = {{"requests", R}, {"budget", K}, {"vocab", V}, {"greedy", greedy}};
  if (scheduled) b.config["scheduled"] = true;
  for_each_tensor(in, [&](const std::string& name, const auto& t) { put_tensor(b.blob, name, t); });
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
// The golden drafter case's draw: sampled, keyed by the seed, after the features' positions.
DraftChoice case_choice(const DsparkConfig& cfg, const Tensor<double>& features, uint64_t seed) {
  return {false, seed, 0, uint32_t(features.dim(0)) + 1, cfg.temperature};
}

DrafterOutputs run_drafter_case(const DsparkConfig& cfg, const Tensor<double>& features,
                                int32_t last, uint64_t seed, const reference::Verifier& verify,
                                DraftMemo* memo = nullptr) {
  const reference::DsparkDrafter drafter(cfg, features.dim(1), seed);
  const reference::Draft d =
      drafter.propose(to_matrix(features), last, cfg.gamma, case_choice(cfg, features, seed));
  const DsparkDecode decode =
      dspark_decode(cfg, drafter, seed, kDecodeRequests, false, kDecodeSteps, verify, memo);
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
  const DrafterInputs in{
      to_tensor(reference::seeded_matrix(positions, 3 * cfg.backbone_width, seed, 1, 1.0)),
      Tensor<int32_t>({1}, int32_t(seed % uint64_t(cfg.vocab)))};
  for_each_tensor(in, [&](const std::string& name, const auto& t) { put_tensor(b.blob, name, t); });
  const DrafterOutputs out =
      run_drafter_case(cfg, in.features, in.last.data[0], seed, reference::dspark_verify);
  b.blob.put("expected.draft", out.draft);
  b.blob.put("expected.logits", out.logits);
  b.blob.put("expected.confidence", out.confidence);
  b.blob.put("expected.text", out.text);
  // The drafter has no optimized twin yet: its floating outputs are checked in double only.
  b.outputs = {
      {"draft", "exact"}, {"logits", "reference"}, {"confidence", "reference"}, {"text", "exact"}};
  return b;
}

// The training step's result: the heads it fits, the held-out acceptance, and a greedy
// scheduled decode with the trained drafter (kDecodeRequests prompts of verify's key).
nlohmann::json to_json(const reference::DrafterTraining& t) {
  return {{"prompts", t.prompts},
          {"prompt_tokens", t.prompt_tokens},
          {"steps", t.steps},
          {"ridge", t.ridge}};
}
reference::DrafterTraining parse_training(const JsonFields& f) {
  f.reject_unknown({"prompts", "prompt_tokens", "steps", "ridge"});
  reference::DrafterTraining t;
  t.prompts = int(f.integer("prompts", 1, 256));
  t.prompt_tokens = int(f.integer("prompt_tokens", 1, 64));
  t.steps = int(f.integer("steps", 1, 256));
  t.ridge = f.number("ridge", 1e-12, 1.0);
  return t;
}

struct TrainingOutputs {
  Tensor<double> markov_in, markov_out, unembed, confidence_head, held_out;
  Tensor<int32_t> text;
};
TrainingOutputs training_outputs(const DsparkConfig& cfg, const reference::TrainedDrafter& trained,
                                 uint64_t seed, const reference::Verifier& verify,
                                 DraftMemo* memo = nullptr) {
  const DsparkDecode decode =
      dspark_decode(cfg, trained.drafter, seed, kDecodeRequests, true, kDecodeSteps, verify, memo);
  Tensor<int32_t> text({kDecodeRequests, int64_t(decode.decode.text[0].size())});
  for (int r = 0; r < kDecodeRequests; ++r)
    std::copy(decode.decode.text[r].begin(), decode.decode.text[r].end(),
              text.ptr() + r * text.dim(1));
  const DrafterWeights& w = trained.drafter.weights();
  return {tensor_cast<double>(w.markov_in),
          tensor_cast<double>(w.markov_out),
          tensor_cast<double>(w.unembed.values()),
          tensor_cast<double>(w.confidence),
          Tensor<double>({cfg.gamma}, trained.report.held_out_after),
          text};
}

// A golden drafter or training case's dspark section: the case trains and decodes at the
// section's own sizes, which its budget counts only without "decode" sizes (the generators write
// none).
DsparkConfig golden_dspark_config(const JsonFields& config) {
  const JsonFields section = config.object("dspark");
  if (section.has("decode"))
    throw_bad_input("{}: a golden case runs at the section's own sizes; no decode sizes",
                    section.where("decode"));
  return parse_dspark_config(section);
}

BuiltCase build_dspark_training(const DsparkConfig& cfg, uint64_t seed) {
  reference::DrafterTraining t;
  t.prompts = 4;  // a regression check of the step's result, not of its quality: a small set

  BuiltCase b;
  b.config = {{"dspark", to_json(cfg)}, {"training", to_json(t)}};
  const TrainingOutputs out = training_outputs(cfg, reference::trained_drafter(cfg, seed, t), seed,
                                               reference::dspark_verify);
  b.blob.put("expected.markov_in", out.markov_in);
  b.blob.put("expected.markov_out", out.markov_out);
  b.blob.put("expected.unembed", out.unembed);
  b.blob.put("expected.confidence_head", out.confidence_head);
  b.blob.put("expected.held_out_acceptance", out.held_out);
  b.blob.put("expected.text", out.text);
  b.outputs = {{"markov_in", "reference"},
               {"markov_out", "reference"},
               {"unembed", "reference"},
               {"confidence_head", "reference"},
               {"held_out_acceptance", "reference"},
               {"text", "exact"}};
  return b;
}

CaseReport check_dspark_training(const LoadedCase& c, const JsonFields& config,
                                 const RunOptions& opt) {
  config.reject_unknown({"dspark", "training"});
  const DsparkConfig cfg = golden_dspark_config(config);
  const reference::DrafterTraining t = parse_training(config.object("training"));
  const DsparkTrainingCost cost =
      dspark_training_cost(cfg, t.prompts, t.prompt_tokens, t.steps, true);
  config.within_budget("training.prompts x steps x dspark.vocab", cost.bytes, cost.work);
  const uint64_t seed = c.manifest.at("seed").get<uint64_t>();
  auto stored = [&](const char* name) {
    return c.blob.get("expected." + std::string(name), c.blob_source);
  };
  for (const char* name :
       {"markov_in", "markov_out", "unembed", "confidence_head", "held_out_acceptance", "text"})
    stored(name);  // a missing expectation is refused before the training runs
  const reference::TrainedDrafter trained = reference::trained_drafter(cfg, seed, t);
  DraftMemo memo;
  const TrainingOutputs now = training_outputs(cfg, trained, seed, reference::dspark_verify, &memo);
  const TrainingOutputs got = training_outputs(
      cfg, trained, seed, [&](const VerifyInputs& in) { return run_dspark_verify(in, opt); },
      &memo);
  CaseReport report{c.name, {}};
  const std::pair<const char*, const Tensor<double>*> heads[] = {
      {"markov_in", &now.markov_in},
      {"markov_out", &now.markov_out},
      {"unembed", &now.unembed},
      {"confidence_head", &now.confidence_head},
      {"held_out_acceptance", &now.held_out}};
  for (const auto& [name, tensor] : heads)
    report.tensors.push_back(reference_check(name, doubles(*tensor), stored(name)));
  const Tensor<int32_t> text = get_shaped<int32_t>(c, "expected.text", now.text.shape);
  report.tensors.push_back(exact_output("text", "reference verification", text, now.text));
  report.tensors.push_back(exact_output("text", "optimized verification", text, got.text));
  return report;
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
  // Every stored input has the shape the config implies.
  in.draft = shaped<int32_t>({R, K});
  in.p_draft = shaped<float>({R, K, V});
  in.p_target = shaped<float>({R, K + 1, V});
  in.position.resize(R);
  if (config.has("scheduled") && config.boolean("scheduled"))
    in.drafted.resize(R), in.request.resize(R);
  for_each_tensor(in, [&](const std::string& name, auto& t) { load_shaped(c, name, t); });
  for (int32_t k : in.drafted)
    if (k < 0 || k > K)
      throw_bad_input("{}: tensor 'drafted' holds {}, outside [0, budget {}]", c.blob_source, k, K);
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
  const DsparkConfig cfg = golden_dspark_config(config);
  const uint64_t seed = c.manifest.at("seed").get<uint64_t>();
  DrafterInputs in;
  for_each_tensor(in, [&](const std::string& name, auto& t) { load_tensor(c, name, t); });
  const Tensor<double>& features = in.features;
  if (features.shape.size() != 2 || features.dim(0) < 1 ||
      features.dim(1) != 3 * cfg.backbone_width)
    throw_bad_input("{}: tensor 'features' must be [T >= 1, {}] (3 x backbone_width), got {}",
                    c.blob_source, 3 * cfg.backbone_width, fmt::join(features.shape, "x"));
  check_shape(c, "last", in.last.shape, {1});
  const int32_t last = in.last.data[0];
  if (last < 0 || last >= cfg.vocab)
    throw_bad_input("{}: tensor 'last' holds token {}, outside [0, {})", c.blob_source, last,
                    cfg.vocab);
  auto stored = [&](const char* name) {
    return c.blob.get("expected." + std::string(name), c.blob_source);
  };
  for (const char* name : {"draft", "logits", "confidence", "text"})
    stored(name);  // a missing expectation is refused before the drafter runs
  DraftMemo memo;
  const DrafterOutputs now =
      run_drafter_case(cfg, features, last, seed, reference::dspark_verify, &memo);
  const DrafterOutputs got = run_drafter_case(
      cfg, features, last, seed, [&](const VerifyInputs& in) { return run_dspark_verify(in, opt); },
      &memo);
  CaseReport report{c.name, {}};
  report.tensors.push_back(reference_check("draft", doubles(now.draft), stored("draft")));
  report.tensors.push_back(reference_check("logits", doubles(now.logits), stored("logits")));
  report.tensors.push_back(
      reference_check("confidence", doubles(now.confidence), stored("confidence")));
  const Tensor<int32_t> text = get_shaped<int32_t>(c, "expected.text", now.text.shape);
  report.tensors.push_back(exact_output("text", "reference verification", text, now.text));
  report.tensors.push_back(exact_output("text", "optimized verification", text, got.text));
  // The drafter on the kernels against its reference, tap by tap (check_drafter).
  const reference::DsparkDrafter drafter(cfg, features.dim(1), seed);
  for (const TensorCheck& t : check_drafter(drafter, to_matrix(features), last, 0, cfg.gamma,
                                            case_choice(cfg, features, seed), opt)
                                  .checks)
    report.tensors.push_back({"kernel " + t.name, "tap", t.result.pass, t.result.summary()});
  return report;
}

CaseReport check_dspark(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  const nlohmann::json& j = c.manifest.at("config");
  if (j.contains("training")) return check_dspark_training(c, config, opt);
  return j.contains("dspark") ? check_dspark_drafter(c, config, opt)
                              : check_dspark_verify(c, config, opt);
}

VerifyRow verify_dspark(const ModelConfig& model, bool greedy, const RunOptions& opt) {
  const DsparkConfig& c = model.dspark;
  const VerifyInputs in = make_verify_inputs(c.requests, c.gamma, c.vocab, model.seed, greedy);
  VerifyRow row;
  row.component = "dspark";
  row.name = fmt::format("verify/{} R={} K={} V={}", greedy ? "greedy" : "sampling", c.requests,
                         c.gamma, c.vocab);
  row.backend = backend_name(opt.backend);
  const VerifyOutputs want = reference::dspark_verify(in), got = run_dspark_verify(in, opt);
  reference::check_verifier_outputs(in, got);
  row.launches = got.launches;
  auto same = [](const VerifyOutputs& a, const VerifyOutputs& b) {
    return a.accepted == b.accepted && a.emitted.data == b.emitted.data;
  };
  row.pass = same(got, want);
  row.margin = row.pass ? 1 : 0;
  row.worst_tensor = "decisions";
  int accepted = 0;
  for (int32_t a : got.accepted) accepted += a;
  row.bytes = fmt::format("{}/{} accepted", accepted, c.requests * c.gamma);
  if (!row.pass)
    row.first_divergence = "decisions",
    row.detail = "accept/reject or tokens differ from the reference";
  if (opt.backend != Backend::emu) return row;
  check_schedules(
      row, opt, [&](const RunOptions& o) { return run_dspark_verify(in, o); },
      [&](const VerifyOutputs& o) { return same(o, got); });
  check_against_sim(row, got.launches, sim::predict_dspark_verify(in, want));
  return row;
}

// The DSpark drafter trained on the config's small backbone (reference::trained_drafter), which
// verify's decode rows share (trained once, by the first row that needs it).
std::shared_future<reference::DsparkDrafter> decode_drafter(const ModelConfig& model) {
  return std::async(std::launch::deferred,
                    [&model] {
                      const DsparkConfig c = dspark_decode_config(model.dspark);
                      reference::DrafterTraining training;
                      training.prompts = dspark_training_prompts(c);
                      training.measure_held_out = false;
                      return reference::trained_drafter(c, model.seed, training).drafter;
                    })
      .share();
}

// Scheduled speculative decoding of a batch (the config's requests) through the small backbone
// with the DSpark drafter trained on it (decode_drafter): the kernel verifying each pass must
// give the reference's texts, pass by pass. The row reports the measured acceptance per draft
// position and tokens per pass (`tandem traffic --acceptance-from`).
VerifyRow verify_dspark_decode(const ModelConfig& model,
                               const std::shared_future<reference::DsparkDrafter>& trained,
                               bool greedy, const RunOptions& opt) {
  constexpr int kSteps = kDsparkTrainingSteps;  // the training's and the budget's
  const DsparkConfig c = dspark_decode_config(model.dspark);
  const reference::DsparkDrafter& drafter = trained.get();
  VerifyRow row;
  row.component = "dspark";
  row.name = fmt::format("decode/{} R={} {} tokens, window {}", greedy ? "greedy" : "sampling",
                         c.requests, kSteps, c.window);
  row.backend = backend_name(opt.backend);
  LaunchLog predicted;  // the byte model of every pass, given its decisions (checked by `same`)
  DraftMemo memo;       // every decode of the row asks the drafter alike while decisions agree
  auto decode = [&](const RunOptions& o, LaunchLog* launches) {
    return dspark_decode(
        c, drafter, model.seed, c.requests, greedy, kSteps,
        [&](const VerifyInputs& in) {
          VerifyOutputs out = run_dspark_verify(in, o);
          reference::check_verifier_outputs(in, out);  // before the byte model reads the decisions
          if (launches) {
            launches->insert(launches->end(), out.launches.begin(), out.launches.end());
            const LaunchLog p = sim::predict_dspark_verify(in, out);
            predicted.insert(predicted.end(), p.begin(), p.end());
          }
          return out;
        },
        &memo);
  };
  const DsparkDecode want = dspark_decode(c, drafter, model.seed, c.requests, greedy, kSteps,
                                          reference::dspark_verify, &memo);
  auto same = [](const DsparkDecode& a, const DsparkDecode& b) {
    if (a.decode.text != b.decode.text || a.decode.stats.size() != b.decode.stats.size())
      return false;
    for (size_t r = 0; r < a.decode.stats.size(); ++r)
      if (a.decode.stats[r].accepted_per_step != b.decode.stats[r].accepted_per_step) return false;
    return true;
  };
  const DsparkDecode got = decode(opt, &row.launches);
  row.pass = same(got, want);
  row.margin = row.pass ? 1 : 0;
  row.worst_tensor = "text";
  int accepted = 0, admitted = 0;
  for (const auto& s : got.decode.stats)
    for (size_t p = 0; p < s.accepted_per_step.size(); ++p)
      accepted += s.accepted_per_step[p], admitted += s.admitted_per_step[p];
  const AcceptanceProfile profile = acceptance_profile(got.decode, c.gamma);
  row.acceptance = profile.per_position;
  row.tokens_per_pass = profile.tokens_per_pass;
  row.bytes = fmt::format("{}/{} accepted (by position {:.2f}), {:.2f} tokens per pass, {} passes",
                          accepted, admitted, fmt::join(profile.per_position, " "),
                          profile.tokens_per_pass, got.decode.passes);
  if (!row.pass)
    row.first_divergence = "text", row.detail = "decoded texts differ from the reference's";
  if (opt.backend != Backend::emu) return row;
  check_schedules(
      row, opt, [&](const RunOptions& o) { return decode(o, nullptr); },
      [&](const DsparkDecode& d) { return same(d, got); });
  check_against_sim(row, row.launches, predicted);
  return row;
}

// A drafter on the optimized kernels against its reference: one pass after `features` (its
// newest `window` rows read) and `last`, then gamma drafted tokens (sampled), tap by tap
// (check_drafter); under the emulator bit-identical under every schedule and the simulator's
// bytes. `kind` names the drafter in the row.
VerifyRow drafter_row(const reference::DsparkDrafter& drafter, const Eigen::MatrixXd& features,
                      int32_t last, uint64_t seed, const char* kind, const RunOptions& opt) {
  const DsparkConfig& c = drafter.config();
  DraftChoice choice;
  choice.greedy = false, choice.seed = seed, choice.temperature = c.temperature;
  choice.position = uint32_t(features.rows()) + 1;
  VerifyRow row;
  row.component = "dspark";
  row.name = fmt::format("drafter/sampling {} {} features, K={} V={} width={} blocks={} heads={}",
                         kind, features.rows(), c.gamma, c.vocab, c.width, c.blocks, c.heads);
  row.backend = backend_name(opt.backend);
  const DrafterCheck r = check_drafter(drafter, features, last, 0, c.gamma, choice, opt);
  row.launches = r.run.launches;
  fold_checks(row, r.checks);
  if (opt.backend != Backend::emu) return row;
  const Tensor<float> f = float_rows(features);
  check_schedules(
      row, opt,
      [&](const RunOptions& o) {
        return run_drafter(c, drafter.weights(), f, last, 0, c.gamma, choice, o);
      },
      [&](const ModelRun& other) {
        if (other.taps.size() != r.run.taps.size()) return false;
        for (size_t i = 0; i < other.taps.size(); ++i)
          if (other.taps[i].value.data != r.run.taps[i].value.data) return false;
        return true;
      });
  row.bytes = fmt::format("{} launches", row.launches.size());
  check_against_sim(
      row, row.launches,
      sim::predict_drafter(c, features.cols(), features.rows(), c.gamma, choice, drafted_p(r.run)));
  return row;
}

// The trained drafter (decode_drafter) after a seeded text of window + 6 tokens in the decode
// config's small backbone.
VerifyRow verify_trained_drafter(const ModelConfig& model,
                                 const std::shared_future<reference::DsparkDrafter>& trained,
                                 const RunOptions& opt) {
  const DsparkConfig c = dspark_decode_config(model.dspark);
  reference::TinyBackbone backbone(c.vocab, c.backbone_width, model.seed, c.backbone_layers);
  std::vector<int32_t> text;
  for (int i = 0; i < c.window + 6; ++i)
    text.push_back(int32_t(philox_draw(model.seed, 11, uint32_t(i)).v[0] % uint64_t(c.vocab)));
  backbone.append({text.begin(), text.end() - 1});
  return drafter_row(trained.get(), backbone.target_features(), text.back(), model.seed, "trained",
                     opt);
}

// A section with decode sizes: its own drafter (seeded weights: at the release's widths) after
// kDsparkSeededContext rows of seeded target features.
VerifyRow verify_seeded_drafter(const ModelConfig& model, const RunOptions& opt) {
  const DsparkConfig& c = model.dspark;
  const reference::DsparkDrafter drafter(c, 3 * int64_t(c.backbone_width), model.seed);
  const Eigen::MatrixXd features = reference::seeded_matrix(
      kDsparkSeededContext, 3 * int64_t(c.backbone_width), model.seed, 12, 1.0);
  return drafter_row(drafter, features, int32_t(model.seed % uint64_t(c.vocab)), model.seed,
                     "seeded", opt);
}

}  // namespace

Component dspark_component() {
  Component c;
  c.name = "dspark";
  c.sections = {"dspark"};
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    std::vector<VerifyJob> jobs;
    const std::shared_future<reference::DsparkDrafter> drafter = decode_drafter(model);
    for (bool greedy : {false, true}) {
      jobs.push_back({"dspark", [=, &model, &opt] { return verify_dspark(model, greedy, opt); }});
      jobs.push_back({"dspark decode", [=, &model, &opt] {
                        return verify_dspark_decode(model, drafter, greedy, opt);
                      }});
    }
    // The drafter rows, sampled (the Markov kernel's inverse CDF; its greedy argmax is the
    // properties' and the golden case's): their emulated runs under 4 schedules are most of their
    // cost. The seeded one (at the section's sizes) starts first: at the release's it is the
    // longest row after the end-to-end model's.
    if (model.dspark.decode)
      jobs.push_back({"dspark drafter seeded",
                      [&model, &opt] { return verify_seeded_drafter(model, opt); },
                      RowSizes::config, true});
    jobs.push_back({"dspark drafter trained",
                    [=, &model, &opt] { return verify_trained_drafter(model, drafter, opt); }});
    return jobs;
  };
  c.golden_specs = [] {
    return std::vector<GoldenSpec>{
        {"dspark_verify_sampling", 401,
         [](uint64_t seed) { return build_dspark_verify(8, 5, 257, false, seed); }},
        {"dspark_verify_greedy", 402,
         [](uint64_t seed) { return build_dspark_verify(8, 4, 100, true, seed); }},
        {"dspark_verify_scheduled", 403,
         [](uint64_t seed) { return build_dspark_verify(16, 5, 257, false, seed, true); }},
        {"dspark_drafter", 403,
         [](uint64_t seed) {
           return build_dspark_drafter(builtin_model("tiny").dspark, 150, seed);
         }},
        {"dspark_drafter_training", 404,
         [](uint64_t seed) { return build_dspark_training(builtin_model("tiny").dspark, seed); }}};
  };
  c.check = check_dspark;
  return c;
}

}  // namespace tandem
