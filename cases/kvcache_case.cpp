#include "cases/kvcache_case.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cases/case_check.hpp"
#include "cases/case_util.hpp"
#include "core/json_fields.hpp"
#include "reference/kvcache.hpp"
#include "reference/residual.hpp"  // ScopedSumOrder
#include "sim/kvcache_traffic.hpp"

namespace tandem {

namespace {

float bf16_round(float v) { return bf16_decode(bf16_encode(v)); }

uint32_t draw(uint64_t seed, uint32_t id, uint32_t index) {
  return philox_draw(seed, id, index).v[0];
}

// One tile of quantizer inputs (make_kv_quantize_inputs): kind 0..3 a magnitude 2^u, 4 an edge
// amax, 5 zeros (some -0), 6 values below bf16's normal range, 7 a few values among -0s.
void fill_tile(const KvFormatInfo& f, std::span<float> tile, uint64_t seed, uint32_t key,
               bool edges) {
  const uint32_t kind = edges ? draw(seed, 10, key) % 8 : 0;
  const float top = f.code == KvCode::e4m3 ? 448.0f : 6.0f;
  auto uniform = [&](size_t e, float mag) {
    return bf16_round(seeded_uniform(seed, 11, key * 1024 + uint32_t(e), -mag, mag));
  };
  const float mag = std::ldexp(1.0f, int(draw(seed, 12, key) % 61) - 30);
  for (size_t e = 0; e < tile.size(); ++e) {
    switch (kind) {
      case 5:
        tile[e] = e % 3 ? 0.0f : -0.0f;
        break;
      case 6:
        tile[e] = uniform(e, std::ldexp(1.0f, -128));
        break;
      case 7:
        tile[e] = e % 5 ? -0.0f : uniform(e, mag);
        break;
      default:
        tile[e] = uniform(e, mag);
    }
  }
  if (kind == 4) {  // the tile's amax at top 2^k or one bf16 step either side
    const uint32_t r = draw(seed, 13, key);
    const float edge = std::ldexp(top, int(r % 41) - 20);
    const uint16_t b = bf16_encode(edge);
    const float at[3] = {edge, bf16_decode(uint16_t(b + 1)), bf16_decode(uint16_t(b - 1))};
    for (float& v : tile) v = std::clamp(v, -edge / 2, edge / 2);
    tile[(r / 41) % tile.size()] = (r & (1u << 31) ? -1.0f : 1.0f) * at[(r / 7) % 3];
  }
}

}  // namespace

KvQuantizeInputs make_kv_quantize_inputs(KvFormat format, int64_t rows, int64_t page_size,
                                         uint64_t seed, bool edges) {
  const KvFormatInfo f = kv_format_info(format);
  KvQuantizeInputs in;
  in.store = kv_store_options(format, rows + page_size, page_size, 1e-6);  // a page left poisoned
  in.values = Tensor<float>({rows, f.dims()});
  for (int64_t r = 0; r < rows; ++r) {
    float* row = in.values.ptr() + r * f.dims();
    for (int k = 0; k < f.tiles(); ++k)
      fill_tile(f, std::span<float>(row + k * f.tile, size_t(f.tile)), seed,
                uint32_t(r * f.tiles() + k), edges);
    for (int i = 0; i < f.rope; ++i)
      row[f.quant + i] = bf16_round(seeded_uniform(seed, 14, uint32_t(r * f.rope + i), -4, 4));
  }
  const std::vector<int64_t> order = shuffled_order(in.store.pool_slots, uint32_t(seed));
  in.slots = Tensor<int32_t>({rows});
  for (int64_t r = 0; r < rows; ++r) in.slots.data[size_t(r)] = int32_t(order[size_t(r)]);
  return in;
}

KvWindowInputs make_kv_window_inputs(KvFormat format, int64_t T, int64_t d, int window,
                                     int64_t start, int64_t page_size, double norm_eps,
                                     uint64_t seed) {
  const KvFormatInfo f = kv_format_info(format);
  KvWindowInputs in;
  in.store = kv_store_options(format, window, page_size, norm_eps);
  in.window = window;
  in.start = start;
  in.x = seeded_bf16_tensor({T, d}, seed, 1, -2.0f, 2.0f);
  const float a = 1.0f / std::sqrt(float(d));
  in.wkv = seeded_tensor({f.dims(), d}, seed, 2, -a, a);
  in.norm_w = seeded_tensor({f.normed}, seed, 3, 0.5f, 1.5f);
  return in;
}

KvCompressInputs make_kv_compress_inputs(const KvCompressor& c, int64_t T, int64_t d,
                                         int64_t page_size, double norm_eps, uint64_t seed) {
  KvCompressInputs in;
  in.comp = c;
  in.store = kv_store_options(c.format, kv_entries(T, c.ratio), page_size, norm_eps);
  in.x = seeded_bf16_tensor({T, d}, seed, 1, -2.0f, 2.0f);
  const float a = 1.0f / std::sqrt(float(d));
  in.wkv = seeded_tensor({c.width(), d}, seed, 2, -a, a);
  if (c.gated()) in.wgate = seeded_tensor({c.width(), d}, seed, 3, -2 * a, 2 * a);
  if (c.ape) in.ape = seeded_tensor({c.ratio, c.width()}, seed, 4, -1.0f, 1.0f);
  in.norm_w = seeded_tensor({c.dims()}, seed, 5, 0.5f, 1.5f);
  return in;
}

IndexKeyInputs make_index_key_inputs(KvFormat format, int64_t N, int ratio, int64_t page_size,
                                     double norm_eps, uint64_t seed, int64_t first) {
  IndexKeyInputs in;
  in.store = kv_store_options(format, first + N, page_size, norm_eps);
  in.ratio = ratio;
  in.first = first;
  in.latent = seeded_bf16_tensor({N, kKvMainDims}, seed, 1, -2.0f, 2.0f);
  const float a = 1.0f / std::sqrt(float(kKvMainDims));
  in.wk = seeded_tensor({kIndexKeyDims, kKvMainDims}, seed, 2, -a, a);
  in.norm_w = seeded_tensor({kIndexKeyDims}, seed, 3, 0.5f, 1.5f);
  return in;
}

namespace {

// The truth, then the float baseline in three summation orders (every dot product of a run in
// the order ScopedSumOrder sets): a stored row's dims share one norm, so a row holds >= 128
// error draws per run (README, tolerance refinement 2).
template <class Inputs, class Run>
KvReference reference_runs(const Inputs& in, Run run) {
  const reference::KvRun<double> truth = run.template operator()<double, double>(in);
  KvReference r;
  r.stored = truth.stored, r.latent = truth.latent;
  r.state_a = truth.state_a, r.state_b = truth.state_b;
  r.slots = truth.slots;
  for (int order = 0; order < 3; ++order) {
    const reference::ScopedSumOrder scoped(order);
    const reference::KvRun<float> b = run.template operator()<float, bf16>(in);
    auto keep = [&](Tensor<double>& kept, const Tensor<float>& now, const Tensor<double>& t) {
      if (now.shape.empty()) return;  // not an output of this kernel
      if (order == 0)
        kept = tensor_cast<double>(now);
      else
        keep_farthest(kept, tensor_cast<double>(now), t);
    };
    keep(r.stored_baseline, b.stored, r.stored);
    keep(r.latent_baseline, b.latent, r.latent);
    keep(r.state_a_baseline, b.state_a, r.state_a);
    keep(r.state_b_baseline, b.state_b, r.state_b);
  }
  return r;
}

struct WindowRun {
  template <class S, class Act>
  reference::KvRun<S> operator()(const KvWindowInputs& in) const {
    return reference::kv_window_store<S, Act>(in);
  }
};
struct CompressRun {
  template <class S, class Act>
  reference::KvRun<S> operator()(const KvCompressInputs& in) const {
    return reference::kv_compress<S, Act>(in);
  }
};
struct IndexKeyRun {
  template <class S, class Act>
  reference::KvRun<S> operator()(const IndexKeyInputs& in) const {
    return reference::index_key_store<S, Act>(in);
  }
};

}  // namespace

KvReference run_kv_reference(const KvWindowInputs& in) { return reference_runs(in, WindowRun{}); }
KvReference run_kv_reference(const KvCompressInputs& in) {
  return reference_runs(in, CompressRun{});
}
KvReference run_kv_reference(const IndexKeyInputs& in) { return reference_runs(in, IndexKeyRun{}); }

std::vector<TensorCheck> compare_kv(const KvReference& ref, const KvStoreOutputs& out,
                                    const KvStoreOptions& store) {
  const int64_t dims = kv_format_info(store.format).dims();
  std::vector<TensorCheck> checks{
      tolerance_check("stored", ref.stored, ref.stored_baseline, out.stored, OutDType::BF16, dims)};
  if (!ref.latent.data.empty() || !out.latent.data.empty())
    checks.push_back(tolerance_check("latent", ref.latent, ref.latent_baseline, out.latent,
                                     OutDType::BF16, dims));
  if (!ref.state_a.data.empty()) {
    const int64_t width = ref.state_a.dim(1);
    checks.push_back(tolerance_check("state.a", ref.state_a, ref.state_a_baseline, out.state.a,
                                     OutDType::F32, width));
    checks.push_back(tolerance_check("state.b", ref.state_b, ref.state_b_baseline, out.state.b,
                                     OutDType::F32, width));
  }
  // The records must be the exact encoding of what the kernel stored (when it stored the rows
  // the reference did; a wrong count already failed above).
  const Tensor<uint8_t> want = out.stored.shape == ref.stored.shape
                                   ? reference::encode_pool(store, out.stored, ref.slots)
                                   : Tensor<uint8_t>({kv_pool_bytes(store)}, kKvPoison);
  checks.push_back(exact_check("pool", want, out.pool));
  return checks;
}

void copy_record(const KvStoreOptions& o, const Tensor<uint8_t>& from, Tensor<uint8_t>& to,
                 int64_t slot) {
  const KvFormatInfo f = kv_format_info(o.format);
  const KvPageLayout at{f, o.page_size};
  auto copy = [&](int64_t offset, int64_t bytes) {
    std::memcpy(to.ptr() + offset, from.ptr() + offset, size_t(bytes));
  };
  copy(at.code_at(slot), f.code_bytes());
  copy(at.rope_at(slot), 2 * f.rope);
  copy(at.scale_at(slot), f.scale_bytes());
}

KvStoreOutputs run_kv_decode_chain(const KvCompressInputs& prefill, const RunOptions& opt) {
  const KvCompressor& c = prefill.comp;
  const int64_t T = prefill.x.dim(0), d = prefill.x.dim(1), D = c.dims();
  KvStoreOutputs chain;
  chain.pool = Tensor<uint8_t>({kv_pool_bytes(prefill.store)}, kKvPoison);
  chain.state.a = Tensor<float>({c.state_rows(), c.width()}, 0.0f);
  chain.state.b = Tensor<float>({c.state_rows(), c.width()}, -INFINITY);
  for (int64_t t = 0; t < T; ++t) {
    KvCompressInputs step = prefill;
    step.x = Tensor<float>(
        {1, d}, std::vector<float>(prefill.x.ptr() + t * d, prefill.x.ptr() + (t + 1) * d));
    step.decode = true;
    step.pos = t;
    step.state = chain.state;
    const KvStoreOutputs out = run_kv_compress(step, opt);
    if (kv_decode_emits(t, c.ratio)) {
      copy_record(prefill.store, out.pool, chain.pool, t / c.ratio);
      chain.stored.data.insert(chain.stored.data.end(), out.stored.data.begin(),
                               out.stored.data.end());
      chain.latent.data.insert(chain.latent.data.end(), out.latent.data.begin(),
                               out.latent.data.end());
    }
    chain.state = out.state;
    chain.launches.insert(chain.launches.end(), out.launches.begin(), out.launches.end());
  }
  const int64_t entries = int64_t(chain.stored.data.size()) / D;
  chain.stored.shape = chain.latent.shape = {entries, D};
  return chain;
}

std::vector<TensorCheck> compare_decode_chain(const KvStoreOutputs& prefill,
                                              const KvStoreOutputs& chain) {
  return {exact_check("decode == prefill: pool", prefill.pool, chain.pool),
          exact_check("decode == prefill: stored", prefill.stored, chain.stored),
          exact_check("decode == prefill: latent", prefill.latent, chain.latent),
          exact_check("decode == prefill: state.a", prefill.state.a, chain.state.a),
          exact_check("decode == prefill: state.b", prefill.state.b, chain.state.b)};
}

nlohmann::json kv_store_json(const KvStoreOptions& o) {
  return {{"format", kv_format_name(o.format)},
          {"page_size", o.page_size},
          {"pool_slots", o.pool_slots},
          {"canonical_zero", o.canonical_zero},
          {"norm_eps", o.norm_eps},
          {"rope_theta", o.rope_theta}};
}

KvStoreOptions parse_kv_store(const JsonFields& f) {
  f.reject_unknown(
      {"format", "page_size", "pool_slots", "canonical_zero", "norm_eps", "rope_theta"});
  KvStoreOptions o;
  const std::string name = f.string("format");
  bool known = false;
  for (int k = 0; k < kKvFormats; ++k)
    if (name == kv_format_name(KvFormat(k))) o.format = KvFormat(k), known = true;
  if (!known) throw_bad_input("{}: unknown record format '{}'", f.where("format"), name);
  o.page_size = f.integer("page_size", 1, int64_t{1} << 20);
  o.pool_slots = f.integer("pool_slots", 1, int64_t{1} << 32);
  o.canonical_zero = f.boolean("canonical_zero");
  o.norm_eps = f.number("norm_eps", 0, 1e-2);
  o.rope_theta = f.number("rope_theta", 1, 1e9);
  return o;
}

// ================================================================ the kvcache component
namespace {

// The decode chain's launches against the simulator's, as one check.
TensorCheck decode_bytes_check(const KvCompressInputs& in, const LaunchLog& counted) {
  LaunchLog predicted;
  for (int64_t t = 0; t < in.x.dim(0); ++t)
    for (const LaunchCounts& l : sim::predict_kv_compress(in.comp, 1, in.x.dim(1), true, t))
      predicted.push_back(l);
  CompareResult r;
  r.n = int64_t(counted.size());
  r.pass = same_traffic(counted, predicted);
  if (!r.pass) r.failure = "counted decode bytes differ from sim::predict_kv_compress";
  return {"decode bytes == simulator", r};
}

bool same_outputs(const KvStoreOutputs& a, const KvStoreOutputs& b) {
  auto bits = [](const Tensor<float>& x, const Tensor<float>& y) {
    return x.shape == y.shape &&
           (x.data.empty() || std::memcmp(x.ptr(), y.ptr(), x.data.size() * sizeof(float)) == 0);
  };
  return a.pool.data == b.pool.data && bits(a.stored, b.stored) && bits(a.latent, b.latent) &&
         bits(a.state.a, b.state.a) && bits(a.state.b, b.state.b);
}

VerifyRow verify_quantize(KvFormat f, int64_t rows, uint64_t seed, const RunOptions& opt) {
  const KvQuantizeInputs in = make_kv_quantize_inputs(f, rows, 16, seed);
  return verify_kernel_row<KvStoreOutputs>(
      {.component = "kvcache",
       .name = fmt::format("quantize/{} N={} page=16", kv_format_name(f), rows),
       .run = [&](const RunOptions& o) { return run_kv_quantize(in, o); },
       .compare =
           [&](const KvStoreOutputs& out) {
             return std::vector<TensorCheck>{
                 exact_check("pool", reference::encode_pool(in), out.pool)};
           },
       .same = same_outputs,
       .predicted = [&] { return sim::predict_kv_quantize(f, rows); },
       .bytes = fmt::format("{} B records", kv_format_info(f).record_bytes())},
      opt);
}

VerifyRow verify_window(KvFormat f, const ModelConfig& model, const RunOptions& opt) {
  const int window = 128;
  // One store holds at most a ring of tokens (a longer prefill keeps its last `window`).
  const int64_t T = std::min<int64_t>(model.residual.tokens, window), d = model.residual.d;
  const int64_t start = window - T / 2;  // the run wraps the ring
  const KvWindowInputs in =
      make_kv_window_inputs(f, T, d, window, start, 64, model.residual.norm_eps, model.seed);
  return verify_kernel_row<KvStoreOutputs>(
      {.component = "kvcache",
       .name = fmt::format("window/{} T={} d={} pos {}..", kv_format_name(f), T, d, start),
       .run = [&](const RunOptions& o) { return run_kv_window_store(in, o); },
       .compare =
           [&](const KvStoreOutputs& out) {
             return compare_kv(run_kv_reference(in), out, in.store);
           },
       .same = same_outputs,
       .predicted = [&] { return sim::predict_kv_window_store(f, T, d); },
       .bytes = fmt::format("ring of {}", window)},
      opt);
}

VerifyRow verify_compress(const KvCompressor& c, const ModelConfig& model, const RunOptions& opt) {
  const int64_t T = 2 * c.ratio + (c.ratio + 1) / 2, d = model.residual.d;
  const KvCompressInputs in =
      make_kv_compress_inputs(c, T, d, 64, model.residual.norm_eps, model.seed);
  return verify_kernel_row<KvStoreOutputs>(
      {.component = "kvcache",
       .name = fmt::format("compress/{} r={} T={} d={}", c.name, c.ratio, T, d),
       .run = [&](const RunOptions& o) { return run_kv_compress(in, o); },
       .compare =
           [&](const KvStoreOutputs& out) {
             std::vector<TensorCheck> checks = compare_kv(run_kv_reference(in), out, in.store);
             const KvStoreOutputs chain = run_kv_decode_chain(in, opt);
             for (TensorCheck& t : compare_decode_chain(out, chain)) checks.push_back(t);
             if (opt.backend == Backend::emu)
               checks.push_back(decode_bytes_check(in, chain.launches));
             return checks;
           },
       .same = same_outputs,
       .predicted = [&] { return sim::predict_kv_compress(c, T, d, false); },
       .bytes = fmt::format("{} entries + state", kv_entries(T, c.ratio))},
      opt);
}

VerifyRow verify_index_keys(KvFormat f, const ModelConfig& model, const RunOptions& opt) {
  const int64_t N = model.residual.tokens;
  const IndexKeyInputs in = make_index_key_inputs(f, N, 2, 64, model.residual.norm_eps, model.seed);
  return verify_kernel_row<KvStoreOutputs>(
      {.component = "kvcache",
       .name = fmt::format("index_keys/{} N={} r=2", kv_format_name(f), N),
       .run = [&](const RunOptions& o) { return run_index_key_store(in, o); },
       .compare =
           [&](const KvStoreOutputs& out) {
             return compare_kv(run_kv_reference(in), out, in.store);
           },
       .same = same_outputs,
       .predicted = [&] { return sim::predict_index_key_store(f, N); },
       .bytes = fmt::format("{} B keys", kv_format_info(f).record_bytes())},
      opt);
}

// ---------------------------------------------------------------- golden cases
constexpr KvFormat kAllFormats[] = {KvFormat::v32_fp8,    KvFormat::idx_fp8, KvFormat::model1,
                                    KvFormat::v41_window, KvFormat::v41_fp4, KvFormat::idx_mxfp4};
constexpr KvFormat kWindowFormats[] = {KvFormat::v32_fp8, KvFormat::model1, KvFormat::v41_window};
constexpr KvFormat kIndexFormats[] = {KvFormat::idx_mxfp4, KvFormat::idx_fp8};

// Blob tensors through for_each_tensor; the expected tensors of a run.
template <class Inputs>
void put_inputs(BuiltCase& b, const Inputs& in) {
  for_each_tensor(in, [&](const char* name, const auto& t) { b.blob.put(name, t); });
}
template <class Inputs>
void load_inputs(const LoadedCase& c, Inputs& in) {
  for_each_tensor(in, [&](const char* name, auto& t) { load_tensor(c, name, t); });
}

void put_expected(BuiltCase& b, const KvReference& r, bool compressor) {
  b.blob.put("expected.stored", r.stored);
  b.outputs = {{"stored", "tolerance"}, {"pool", "exact"}};
  if (!compressor) return;
  // The state's b is -inf in its empty rows and blobs hold finite tensors only: a golden case
  // keeps a (0 where empty); b is compared in tandem verify and the properties.
  b.blob.put("expected.latent", r.latent);
  b.blob.put("expected.state.a", r.state_a);
  b.outputs.insert(b.outputs.end(), {{"latent", "tolerance"}, {"state.a", "tolerance"}});
}

// The stored truth (the reference now within 1e-12 of it), then the kernel against it.
CaseReport check_against(const LoadedCase& c, KvReference ref, const KvStoreOutputs& out,
                         const KvStoreOptions& store, bool compressor) {
  CaseReport report{c.name, {}};
  std::vector<std::pair<const char*, Tensor<double>*>> expected{{"stored", &ref.stored}};
  if (compressor)
    expected.insert(expected.end(), {{"latent", &ref.latent}, {"state.a", &ref.state_a}});
  for (auto& [name, tensor] : expected) {
    const std::string key = std::string("expected.") + name;
    report.tensors.push_back(
        reference_check(name, doubles(*tensor), c.blob.get(key, c.blob_source)));
    *tensor = c.blob.get_as<double>(key, c.blob_source);
  }
  add_checks(report, compare_kv(ref, out, store), c.outputs);
  return report;
}

BuiltCase build_quantize(KvFormat f, uint64_t seed) {
  const KvQuantizeInputs in = make_kv_quantize_inputs(f, 21, 16, seed);
  BuiltCase b;
  b.config = {{"kind", "quantize"}, {"store", kv_store_json(in.store)}};
  put_inputs(b, in);
  b.blob.put("expected.pool", reference::encode_pool(in));
  b.outputs = {{"pool", "exact"}};
  return b;
}

BuiltCase build_window(KvFormat f, uint64_t seed) {
  const KvWindowInputs in = make_kv_window_inputs(f, 12, 32, 16, 10, 8, 1e-6, seed);
  BuiltCase b;
  b.config = {{"kind", "window"},
              {"store", kv_store_json(in.store)},
              {"window", in.window},
              {"start", in.start}};
  put_inputs(b, in);
  put_expected(b, run_kv_reference(in), false);
  return b;
}

BuiltCase build_compress(const KvCompressor& c, uint64_t seed) {
  const KvCompressInputs in = make_kv_compress_inputs(
      c, 2 * c.ratio + 3, 32, 8, c.format == KvFormat::v41_fp4 ? 1e-20 : 1e-6, seed);
  BuiltCase b;
  b.config = {{"kind", "compress"},
              {"store", kv_store_json(in.store)},
              {"compressor", c.name},
              {"ratio", c.ratio}};
  put_inputs(b, in);
  put_expected(b, run_kv_reference(in), true);
  return b;
}

BuiltCase build_index_keys(KvFormat f, uint64_t seed) {
  const IndexKeyInputs in = make_index_key_inputs(f, 6, 2, 8, 1e-20, seed, 3);
  BuiltCase b;
  b.config = {{"kind", "index_keys"},
              {"store", kv_store_json(in.store)},
              {"ratio", in.ratio},
              {"first", in.first}};
  put_inputs(b, in);
  put_expected(b, run_kv_reference(in), false);
  return b;
}

CaseReport check_kvcache(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  const std::string kind = config.string("kind");
  const KvStoreOptions store = parse_kv_store(config.object("store"));
  // A case's pool is allocated by the reference and the kernels alike: golden cases are small.
  if (kv_pool_bytes(store) > kMaxGoldenPoolBytes)
    throw_bad_input("{}: a pool of {} slots of {} takes {} bytes; golden cases keep it under {}",
                    config.where("store.pool_slots"), store.pool_slots,
                    kv_format_name(store.format), kv_pool_bytes(store), kMaxGoldenPoolBytes);
  if (kind == "quantize") {
    config.reject_unknown({"kind", "store"});
    KvQuantizeInputs in;
    in.store = store;
    load_inputs(c, in);
    const KvStoreOutputs out = run_kv_quantize(in, opt);  // validates the shapes first
    const Tensor<uint8_t> expected =
        get_shaped<uint8_t>(c, "expected.pool", {kv_pool_bytes(store)});
    const Tensor<uint8_t> now = reference::encode_pool(in);
    CaseReport report{c.name, {}};
    report.tensors.push_back(exact_output("pool", "reference", expected, now));
    report.tensors.push_back(exact_output("pool", "kernel", expected, out.pool));
    return report;
  }
  if (kind == "window") {
    config.reject_unknown({"kind", "store", "window", "start"});
    KvWindowInputs in;
    in.store = store;
    in.window = int(config.integer("window", 1, 1 << 20));
    in.start = config.integer("start", 0, int64_t{1} << 40);
    load_inputs(c, in);
    within_work(c, "x x wkv", double(in.x.size()) * double(kv_format_info(store.format).dims()));
    const KvStoreOutputs out = run_kv_window_store(in, opt);
    return check_against(c, run_kv_reference(in), out, store, false);
  }
  if (kind == "compress") {
    config.reject_unknown({"kind", "store", "compressor", "ratio"});
    const std::string name = config.string("compressor");
    const KvCompressor* known = find_compressor(name);
    if (!known) throw_bad_input("{}: unknown compressor '{}'", config.where("compressor"), name);
    KvCompressInputs in;
    in.store = store;
    in.comp = *known;
    in.comp.ratio = int(config.integer("ratio", 1, 1024));
    load_inputs(c, in);
    within_work(c, "x x wkv x 2", 2.0 * double(in.x.size()) * in.comp.width());
    const KvStoreOutputs out = run_kv_compress(in, opt);
    return check_against(c, run_kv_reference(in), out, store, true);
  }
  if (kind == "index_keys") {
    config.reject_unknown({"kind", "store", "ratio", "first"});
    IndexKeyInputs in;
    in.store = store;
    in.ratio = int(config.integer("ratio", 1, 1024));
    in.first = config.integer_or("first", 0, 0, int64_t{1} << 40);  // older cases: keys from 0
    load_inputs(c, in);
    within_work(c, "latent x wk", double(in.latent.size()) * kIndexKeyDims);
    const KvStoreOutputs out = run_index_key_store(in, opt);
    return check_against(c, run_kv_reference(in), out, store, false);
  }
  throw_bad_input("{}: expected quantize, window, compress or index_keys, got '{}'",
                  config.where("kind"), kind);
}

}  // namespace

Component kvcache_component() {
  Component c;
  c.name = "kvcache";
  c.sections = {"residual"};
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    std::vector<VerifyJob> jobs;
    for (KvFormat f : kAllFormats)
      jobs.push_back({fmt::format("kvcache quantize {}", kv_format_name(f)),
                      [=, &model, &opt] { return verify_quantize(f, 37, model.seed, opt); },
                      RowSizes::fixed});
    for (KvFormat f : kWindowFormats)
      jobs.push_back({fmt::format("kvcache window {}", kv_format_name(f)),
                      [=, &model, &opt] { return verify_window(f, model, opt); }});
    // The heavily compressing one (r = 128) reads 2.5 r tokens: at the release's widths the
    // longest row after the model's and DSpark's drafter's, started with them.
    for (const KvCompressor& k : release_compressors())
      jobs.push_back({fmt::format("kvcache compress {}", k.name),
                      [=, &model, &opt] { return verify_compress(k, model, opt); },
                      RowSizes::config, k.ratio >= 128});
    for (KvFormat f : kIndexFormats)
      jobs.push_back({fmt::format("kvcache index keys {}", kv_format_name(f)),
                      [=, &model, &opt] { return verify_index_keys(f, model, opt); }});
    return jobs;
  };
  c.golden_specs = [] {
    std::vector<GoldenSpec> specs;
    uint64_t seed = 901;
    for (KvFormat f : kAllFormats)
      specs.push_back({fmt::format("kvcache_quantize_{}", kv_format_name(f)), seed++,
                       [f](uint64_t s) { return build_quantize(f, s); }});
    for (KvFormat f : kWindowFormats)
      specs.push_back({fmt::format("kvcache_window_{}", kv_format_name(f)), seed++,
                       [f](uint64_t s) { return build_window(f, s); }});
    for (const KvCompressor& k : release_compressors())
      specs.push_back({fmt::format("kvcache_compress_{}", k.name), seed++,
                       [k](uint64_t s) { return build_compress(k, s); }});
    for (KvFormat f : kIndexFormats)
      specs.push_back({fmt::format("kvcache_index_keys_{}", kv_format_name(f)), seed++,
                       [f](uint64_t s) { return build_index_keys(f, s); }});
    return specs;
  };
  c.check = check_kvcache;
  return c;
}

}  // namespace tandem
