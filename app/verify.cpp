#include "app/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "golden/attention_case.hpp"
#include "golden/dspark_case.hpp"
#include "golden/engram_case.hpp"
#include "golden/model_case.hpp"
#include "golden/moe_case.hpp"
#include "golden/residual_case.hpp"
#include "golden/vision_case.hpp"
#include "reference/dspark.hpp"
#include "sim/attention_traffic.hpp"
#include "sim/dspark_traffic.hpp"
#include "sim/engram_traffic.hpp"
#include "sim/model_traffic.hpp"
#include "sim/moe_traffic.hpp"
#include "sim/vision_traffic.hpp"

namespace tandem::app {
namespace {

bool same_outputs(const ResidualStackOutputs& a, const ResidualStackOutputs& b) {
  auto eq = [](const Tensor<float>& x, const Tensor<float>& y) {
    return compare_exact<float>(x.span(), y.span()).pass;
  };
  bool same = eq(a.x_out, b.x_out) && eq(a.y_out, b.y_out);
  for (size_t l = 0; l < a.taps_y.size(); ++l) same = same && eq(a.taps_y[l], b.taps_y[l]);
  return same;
}

// Folds tensor checks into a row: the first failing tensor, and the smallest margin.
void fold_checks(VerifyRow& row, const std::vector<TensorCheck>& checks) {
  row.pass = true;
  row.margin = 1;
  for (const TensorCheck& c : checks) {
    if (!c.result.pass && row.first_divergence.empty()) {
      row.first_divergence = c.name;
      row.detail = c.result.summary();
      row.pass = false;
    }
    if (c.result.margin() < row.margin || row.worst_tensor.empty()) {
      row.worst_tensor = c.name, row.margin = c.result.margin();
      row.worst_err = c.result.worst_err, row.budget = c.result.worst_budget;
    }
  }
}

// Reruns under every emulator schedule; the outputs must be bit-identical (DESIGN 3).
template <class Run, class Same>
void check_schedules(VerifyRow& row, const RunOptions& opt, Run run, Same same) {
  int identical = 0;
  for (const emu::Schedule& s : emu::test_schedules()) {
    RunOptions o = opt;
    o.schedule = s;
    if (same(run(o)))
      ++identical;
    else if (row.schedules.empty())
      row.schedules = "differs under " + s.name();
  }
  if (row.schedules.empty())
    row.schedules = fmt::format("{} identical", identical);
  else
    row.pass = false;
}

// Appends the simulator verdict to row.bytes: counted bytes that differ from the simulator's
// fail the row.
void check_against_sim(VerifyRow& row, const LaunchLog& counted, const LaunchLog& predicted) {
  const bool same = same_traffic(predicted, counted);
  row.bytes += same ? " == sim" : " != sim";
  if (!same) row.pass = false, row.detail += " counted bytes differ from the simulator";
}

VerifyRow verify_residual(const ModelConfig& model, ResidualPath path, ActDType act,
                          const RunOptions& opt) {
  const ResidualConfig& cfg = model.residual;
  VerifyRow row;
  row.component = "residual";
  row.name = fmt::format("{}/{} T={} d={} sites={}", residual_path_name(path), act_dtype_name(act),
                         cfg.tokens, cfg.d, cfg.sites);
  row.backend = backend_name(opt.backend);
  const ResidualStackInputs in = make_residual_inputs(cfg, cfg.tokens, act, model.seed);
  const auto truth = reference::run_truth(in, path);
  const auto baseline = baseline_error_draws(in, path, truth);
  const ResidualStackOutputs out = run_residual_stack(in, path, opt);
  row.launches = out.launches;
  fold_checks(row, compare_residual(truth, baseline, out, act));
  if (opt.backend != Backend::emu) return row;

  // Under the emulator: bit-identical under every schedule, and the designed byte counts.
  check_schedules(
      row, opt, [&](const RunOptions& o) { return run_residual_stack(in, path, o); },
      [&](const ResidualStackOutputs& other) { return same_outputs(other, out); });
  const uint64_t designed = residual_activation_bytes_per_site(path, cfg.d, act) * cfg.tokens;
  bool bytes_ok = true;
  for (uint64_t b : counted_activation_bytes_per_site(out.launches, path))
    bytes_ok &= b == designed;
  row.bytes = fmt::format("{} B/token/site {}", designed / cfg.tokens,
                          bytes_ok ? "== counted" : "!= counted");
  if (!bytes_ok) row.pass = false, row.detail += " counted activation bytes differ from design";
  return row;
}

VerifyRow verify_engram(const ModelConfig& model, int layer_index, ActDType act,
                        const RunOptions& opt) {
  const EngramConfig& cfg = model.engram;
  VerifyRow row;
  row.component = "engram";
  row.name = fmt::format("layer{}/{} T={} d={} lookups={} wkv={}", cfg.layer_ids.at(layer_index),
                         act_dtype_name(act), cfg.tokens, cfg.d, cfg.lookups(),
                         cfg.wkv_fp8_block ? fmt::format("fp8/{}", cfg.wkv_fp8_block) : "f32");
  row.backend = backend_name(opt.backend);
  const auto map =
      reference::synthetic_compression_map(cfg.vocab, cfg.compressed_vocab, model.seed);
  const auto ids = synthetic_token_ids(cfg.tokens, cfg.vocab, model.seed);
  const EngramInputs in = make_engram_inputs(cfg, map, ids, layer_index, act, model.seed);
  const EngramOutputs out = run_engram_layer(in, opt);
  row.launches = out.launches;
  fold_checks(row, compare_engram(run_engram_reference(in), out, act));
  if (opt.backend != Backend::emu) return row;
  check_schedules(
      row, opt, [&](const RunOptions& o) { return run_engram_layer(in, o); },
      [&](const EngramOutputs& other) {
        return compare_exact<float>(other.h_out.span(), out.h_out.span()).pass &&
               compare_exact<int64_t>(other.addresses.span(), out.addresses.span()).pass;
      });
  const int64_t markers =
      std::count_if(in.compressed.begin(), in.compressed.end(), [](int64_t id) { return id < 0; });
  const int64_t fetching = cfg.skip_marker_lookups ? cfg.tokens - markers : cfg.tokens;
  row.bytes = fmt::format("{} rows x {} B", fetching * cfg.lookups(), cfg.row_bytes());
  check_against_sim(row, out.launches, sim::predict_engram_layer(cfg, cfg.tokens, markers, act));
  return row;
}

VerifyRow verify_vision(const ModelConfig& model, ActDType act, const RunOptions& opt) {
  VisionCase c;
  static_cast<VisionConfig&>(c) = model.vision;
  c.act = act;
  c.seed = model.seed;
  const VisionInputs in = make_vision_inputs(c);
  VerifyRow row;
  row.component = "vision";
  row.name = fmt::format("{}x{}px/{} {} tokens, E={} k={}", c.image_w, c.image_h,
                         act_dtype_name(act), in.geometry.visual_tokens(), c.experts, c.top_k);
  row.backend = backend_name(opt.backend);
  const VisionResults out = run_vision(in, act, opt);
  for (const LaunchLog* l : {&out.unshuffle.launches, &out.rope.launches, &out.gate.launches})
    row.launches.insert(row.launches.end(), l->begin(), l->end());
  fold_checks(row, compare_vision(in, out, act));
  if (opt.backend != Backend::emu) return row;
  check_schedules(
      row, opt, [&](const RunOptions& o) { return run_vision(in, act, o); },
      [&](const VisionResults& other) {
        return other.unshuffle.tokens.data == out.unshuffle.tokens.data &&
               other.rope.x.data == out.rope.x.data &&
               other.gate.experts.data == out.gate.experts.data &&
               other.gate.weights.data == out.gate.weights.data;
      });
  row.bytes = fmt::format("{} -> {} tokens", in.geometry.patches(), in.geometry.visual_tokens());
  check_against_sim(
      row, row.launches,
      sim::predict_vision(in.grid.dim(0), in.grid.dim(1), c.width, in.rope.x.dim(0), c.heads,
                          c.head_dim, in.gate.logits.dim(0), c.experts, c.top_k, act));
  return row;
}

// The end-to-end model's attention core: residual.tokens new tokens after a cache of
// engram.tokens positions, model.heads heads over residual.d.
VerifyRow verify_attention(const ModelConfig& model, ActDType act, const RunOptions& opt) {
  const int64_t T = model.residual.tokens, P = model.engram.tokens, d = model.residual.d;
  const int heads = model.shape.heads;
  const AttentionInputs in = make_attention_inputs(T, P, d, heads, act, model.seed);
  VerifyRow row;
  row.component = "attention";
  row.name = fmt::format("causal/{} T={} P={} d={} heads={}", act_dtype_name(act), T, P, d, heads);
  row.backend = backend_name(opt.backend);
  const AttentionOutputs out = run_attention_causal(in, opt);
  row.launches = out.launches;
  fold_checks(row, compare_attention(run_attention_reference(in), out, act));
  if (opt.backend != Backend::emu) return row;
  check_schedules(
      row, opt, [&](const RunOptions& o) { return run_attention_causal(in, o); },
      [&](const AttentionOutputs& other) { return other.o.data == out.o.data; });
  row.bytes = fmt::format("{} positions", P + T);
  check_against_sim(row, out.launches, sim::predict_attention(T, P, d, act));
  return row;
}

// The end-to-end model's FFN sublayer: residual.tokens tokens routed to vision.top_k of
// vision.experts experts of hidden width model.ffn_hidden.
VerifyRow verify_moe(const ModelConfig& model, ActDType act, const RunOptions& opt) {
  const int64_t T = model.residual.tokens, d = model.residual.d, H = model.shape.ffn_hidden;
  const int64_t E = model.vision.experts, k = model.vision.top_k;
  const MoeExpertInputs in = make_moe_inputs(T, d, H, E, k, act, model.seed);
  VerifyRow row;
  row.component = "moe";
  row.name = fmt::format("experts/{} T={} d={} H={} E={} k={}", act_dtype_name(act), T, d, H, E, k);
  row.backend = backend_name(opt.backend);
  const MoeExpertOutputs out = run_moe_experts(in, opt);
  row.launches = out.launches;
  fold_checks(row, compare_moe(run_moe_reference(in), out, act));
  if (opt.backend != Backend::emu) return row;
  check_schedules(
      row, opt, [&](const RunOptions& o) { return run_moe_experts(in, o); },
      [&](const MoeExpertOutputs& other) { return other.f.data == out.f.data; });
  row.bytes = fmt::format("{} expert rows", T * k);
  check_against_sim(row, out.launches, sim::predict_moe_experts(T, d, H, k, act));
  return row;
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
  auto same = [&](const VerifyOutputs& o) {
    return o.accepted == want.accepted && o.emitted.data == want.emitted.data;
  };
  row.pass = same(got);
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
      row, opt, [&](const RunOptions& o) { return run_dspark_verify(in, o); }, same);
  check_against_sim(row, got.launches, sim::predict_dspark_verify(in, want));
  return row;
}

// Scheduled speculative decoding of a batch (the config's requests) through the small backbone
// with the DSpark drafter: the kernel verifying each pass must give the reference's texts, pass
// by pass.
VerifyRow verify_dspark_decode(const ModelConfig& model, bool greedy, const RunOptions& opt) {
  constexpr int kSteps = 24;
  const DsparkConfig& c = model.dspark;
  VerifyRow row;
  row.component = "dspark";
  row.name = fmt::format("decode/{} R={} {} tokens, window {}", greedy ? "greedy" : "sampling",
                         c.requests, kSteps, c.window);
  row.backend = backend_name(opt.backend);
  LaunchLog predicted;  // the byte model of every pass, given its decisions (checked by `same`)
  auto decode = [&](const RunOptions& o, LaunchLog* launches) {
    return dspark_decode(c, model.seed, c.requests, greedy, kSteps, [&](const VerifyInputs& in) {
      VerifyOutputs out = run_dspark_verify(in, o);
      reference::check_verifier_outputs(in, out);  // before the byte model reads the decisions
      if (launches) {
        launches->insert(launches->end(), out.launches.begin(), out.launches.end());
        const LaunchLog p = sim::predict_dspark_verify(in, out);
        predicted.insert(predicted.end(), p.begin(), p.end());
      }
      return out;
    });
  };
  const DsparkDecode want =
      dspark_decode(c, model.seed, c.requests, greedy, kSteps, reference::dspark_verify);
  auto same = [&](const DsparkDecode& d) {
    if (d.decode.text != want.decode.text) return false;
    for (size_t r = 0; r < d.decode.stats.size(); ++r)
      if (d.decode.stats[r].accepted_per_step != want.decode.stats[r].accepted_per_step)
        return false;
    return true;
  };
  const DsparkDecode got = decode(opt, &row.launches);
  row.pass = same(got);
  row.margin = row.pass ? 1 : 0;
  row.worst_tensor = "text";
  int accepted = 0, admitted = 0;
  for (const auto& s : got.decode.stats)
    for (size_t p = 0; p < s.accepted_per_step.size(); ++p)
      accepted += s.accepted_per_step[p], admitted += s.admitted_per_step[p];
  row.bytes = fmt::format("{}/{} accepted, {} passes", accepted, admitted, got.decode.passes);
  if (!row.pass)
    row.first_divergence = "text", row.detail = "decoded texts differ from the reference's";
  if (opt.backend != Backend::emu) return row;
  check_schedules(
      row, opt, [&](const RunOptions& o) { return decode(o, nullptr); }, same);
  check_against_sim(row, row.launches, predicted);
  return row;
}

bool same_taps(const ModelRun& a, const ModelRun& b) {
  if (a.taps.size() != b.taps.size()) return false;
  for (size_t i = 0; i < a.taps.size(); ++i)
    if (a.taps[i].value.data != b.taps[i].value.data) return false;
  return true;
}

// The first n tokens of a prompt, the IMAGE positions among them embedded as in `run` (the image
// path's rows: its kernels are checked under every schedule by the vision and dense rows).
ModelPrompt prompt_prefix(const ModelPrompt& p, const ModelRun& run, size_t n) {
  ModelPrompt q{{p.ids.begin(), p.ids.begin() + std::min(n, p.ids.size())}, {}, {}};
  const int64_t images = std::count(q.ids.begin(), q.ids.end(), kImage);
  const auto embed = std::find_if(run.taps.begin(), run.taps.end(),
                                  [](const ModelTap& t) { return t.name == "image.embed"; });
  const int64_t d = embed == run.taps.end() ? 0 : embed->value.dim(1);
  q.visual = Tensor<double>({images, d});
  if (images) std::copy_n(embed->value.data.begin(), images * d, q.visual.data.begin());
  return q;
}

// The end-to-end tiny model on the verification prompt (text around one image): the
// optimized model against the reference tap by tap; a failure names the first diverging tap.
VerifyRow verify_end_to_end(const ModelConfig& model, const RunOptions& opt) {
  check_model_size(model, "model '" + model.name + "'");
  const reference::TinyModelWeights w = reference::tiny_model_weights(model);
  const ModelPrompt p = model_prompt(model, model.seed, true);
  const int64_t images = std::count(p.ids.begin(), p.ids.end(), kImage);
  VerifyRow row;
  row.component = "model";
  row.name = fmt::format("tiny/f32 {} tokens ({} image) blocks={}", p.ids.size(), images,
                         model.shape.blocks);
  row.backend = backend_name(opt.backend);
  const ModelWeights ow = optimized_model_weights(w);
  const ModelRun out = run_model(model, ow, p, opt);
  row.launches = out.launches;
  ModelReference ref = run_model_reference(model, w, p);
  const std::vector<TensorCheck> checks = check_model(model, w, p, ref, out);
  fold_checks(row, checks);
  if (opt.backend != Backend::emu) return row;
  // NOTE: the other schedules serialise every thread switch and take ~30 s each on the whole
  // prompt, so they rerun its first kSchedulePrefix tokens (text, START and image rows).
  constexpr size_t kSchedulePrefix = 16;
  const ModelPrompt head = prompt_prefix(p, out, kSchedulePrefix);
  const ModelRun want = run_model(model, ow, head, opt);
  check_schedules(
      row, opt, [&](const RunOptions& o) { return run_model(model, ow, head, o); },
      [&](const ModelRun& other) { return same_taps(other, want); });
  if (row.schedules.ends_with("identical"))
    row.schedules += fmt::format(" ({} tokens)", head.ids.size());
  row.bytes = fmt::format("{} launches", out.launches.size());
  LaunchLog predicted = sim::predict_image_embedding(model, p.patches.dim(0), p.patches.dim(1));
  const LaunchLog forward = sim::predict_model(model, p.ids);
  predicted.insert(predicted.end(), forward.begin(), forward.end());
  check_against_sim(row, out.launches, predicted);
  return row;
}

}  // namespace

std::vector<VerifyRow> verify_model(const ModelConfig& model, const RunOptions& opt, bool progress,
                                    const std::vector<std::string>& components) {
  struct Job {
    const char* component;
    std::string label;
    std::function<VerifyRow()> run;
  };
  std::vector<Job> jobs;
  const ActDType acts[] = {ActDType::f32, ActDType::bf16};
  for (ResidualPath p : {ResidualPath::v4_unfused, ResidualPath::v41_single_pass})
    for (ActDType a : acts)
      jobs.push_back({"residual",
                      fmt::format("residual {}/{}", residual_path_name(p), act_dtype_name(a)),
                      [=, &model, &opt] { return verify_residual(model, p, a, opt); }});
  for (size_t l = 0; l < model.engram.layer_ids.size(); ++l)
    jobs.push_back({"engram", fmt::format("engram layer {}", l), [=, &model, &opt, &acts] {
                      return verify_engram(model, static_cast<int>(l), acts[l % 2], opt);
                    }});
  for (ActDType a : acts)
    jobs.push_back(
        {"vision", "vision", [=, &model, &opt] { return verify_vision(model, a, opt); }});
  for (ActDType a : acts) {
    jobs.push_back(
        {"attention", "attention", [=, &model, &opt] { return verify_attention(model, a, opt); }});
    jobs.push_back({"moe", "moe", [=, &model, &opt] { return verify_moe(model, a, opt); }});
  }
  for (bool greedy : {false, true}) {
    jobs.push_back(
        {"dspark", "dspark", [=, &model, &opt] { return verify_dspark(model, greedy, opt); }});
    jobs.push_back({"dspark", "dspark decode",
                    [=, &model, &opt] { return verify_dspark_decode(model, greedy, opt); }});
  }
  jobs.push_back({"model", "end-to-end model", [&] { return verify_end_to_end(model, opt); }});
  std::erase_if(jobs, [&](const Job& j) {
    return !components.empty() &&
           std::find(components.begin(), components.end(), j.component) == components.end();
  });
  std::vector<VerifyRow> rows;
  for (const Job& j : jobs) {
    if (progress)
      std::fprintf(stderr, "\r[%zu/%zu] %s ...", rows.size() + 1, jobs.size(), j.label.c_str());
    rows.push_back(run_row(j.component, j.label, opt, j.run));
  }
  if (progress) std::fprintf(stderr, "\r%60s\r", "");
  return rows;
}

VerifyRow run_row(const std::string& component, const std::string& label, const RunOptions& opt,
                  const std::function<VerifyRow()>& row) {
  try {
    return row();
  } catch (const KernelFault& e) {  // a wrong result of the code under test: FAIL, go on
    VerifyRow r;
    r.component = component;
    r.name = label;
    r.backend = backend_name(opt.backend);
    r.worst_tensor = r.first_divergence = e.tensor();
    r.detail = e.what();
    return r;
  }
}

std::string render_table(const std::vector<VerifyRow>& rows) {
  std::string out = fmt::format("{:<9} {:<42} {:<5} {:<9} {:>10} {:>10} {:>7}  {:<13} {:<28} {}\n",
                                "component", "case", "backend", "worst", "err", "budget", "margin",
                                "schedules", "bytes", "verdict");
  for (const VerifyRow& r : rows) {
    out += fmt::format("{:<9} {:<42} {:<5} {:<9} {:>10.3e} {:>10.3e} {:>6.1f}%  {:<13} {:<28} {}\n",
                       r.component, r.name, r.backend, r.worst_tensor, r.worst_err, r.budget,
                       100 * r.margin, r.schedules.empty() ? "-" : r.schedules,
                       r.bytes.empty() ? "-" : r.bytes,
                       r.pass ? "PASS" : "FAIL (first divergence: " + r.first_divergence + ")");
    if (!r.pass && !r.detail.empty()) out += "  " + r.detail + "\n";
  }
  return out;
}

namespace {

// Per launch: the kernel and its global-memory bytes read and written (all traffic classes).
nlohmann::json launches_json(const LaunchLog& log) {
  nlohmann::json a = nlohmann::json::array();
  for (const LaunchCounts& l : log) {
    uint64_t read = 0, written = 0;
    for (int c = 0; c < kTrafficClasses; ++c) read += l.read[c], written += l.written[c];
    a.push_back({{"kernel", l.kernel}, {"read_bytes", read}, {"written_bytes", written}});
  }
  return a;
}

}  // namespace

nlohmann::json to_json(const std::vector<VerifyRow>& rows, const ModelConfig& model) {
  nlohmann::json cases = nlohmann::json::array();
  bool pass = true;
  for (const VerifyRow& r : rows) {
    pass &= r.pass;
    cases.push_back({{"component", r.component},
                     {"case", r.name},
                     {"backend", r.backend},
                     {"pass", r.pass},
                     {"worst_tensor", r.worst_tensor},
                     {"worst_err", r.worst_err},
                     {"budget", r.budget},
                     {"margin", r.margin},
                     {"first_divergence", r.first_divergence},
                     {"schedules", r.schedules},
                     {"bytes", r.bytes},
                     {"detail", r.detail},
                     {"launches", launches_json(r.launches)}});
  }
  return {{"model", model.name}, {"pass", pass}, {"cases", cases}};
}

}  // namespace tandem::app
