// sim/traffic: the analytic model's formulas (DESIGN 5.5, 6), presets, outputs, bad input.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/model_config.hpp"
#include "sim/model_traffic.hpp"
#include "sim/traffic.hpp"
#include "test_dir.hpp"

namespace tandem::sim {
namespace {

const ComponentBytes& row(const std::vector<ComponentBytes>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.component == name) return r;
  throw std::runtime_error("no row " + name);
}

// The release presets take their shapes from the release configs (DESIGN 5.5, 5.6).
TEST(Presets, KvBytesPerTokenFromTheDesign) {
  EXPECT_EQ(builtin_preset("v4-flash").kv_bytes_per_token, 3514.25);  // 21 CSA + 20 HCA
  EXPECT_EQ(builtin_preset("v4-pro").kv_bytes_per_token, 30 * 652.0 / 4 + 31 * 584.0 / 128);
  EXPECT_EQ(builtin_preset("v4.1-flash").kv_bytes_per_token, 890);
  // V3.2 DSA: 656 + 132 B in every layer (48,068 B a token at V3.2's 61 layers).
  EXPECT_EQ(builtin_preset("v4-flash").kv_v32_bytes_per_token, (656.0 + 132) * 43);
  EXPECT_EQ(builtin_preset("v4-flash").d, 4096);
  EXPECT_EQ(builtin_preset("v4-pro").layers, 61);
  const Preset v41 = builtin_preset("v4.1-flash");
  EXPECT_EQ(v41.d, 5120);
  EXPECT_EQ(v41.layers, 40);
  EXPECT_EQ(v41.engram_layers, 2);
  EXPECT_EQ(v41.engram_rows_per_layer, (384006168 + 384016682) / 2);  // layers 1 and 14
  for (const auto& n : builtin_preset_names()) EXPECT_EQ(builtin_preset(n).name, n);
  EXPECT_THROW(builtin_preset("v9"), BadInput);
}

TEST(Traffic, ResidualSchedulesAreTwentyAndTenDPerSite) {
  const Preset p = builtin_preset("tiny");
  const Report r = simulate(p, {});
  const auto& res = row(r.prefill, "residual");
  EXPECT_EQ(res.baseline, 20.0 * p.d * p.act_bytes * 2 * p.layers);
  EXPECT_EQ(res.optimized, 10.0 * p.d * p.act_bytes * 2 * p.layers);
}

TEST(Traffic, EngramRowsRoundUpToSectors) {
  const Preset p = builtin_preset("v4.1-flash");
  const Report r = simulate(p, {});
  EXPECT_EQ(row(r.prefill, "engram").optimized, 2.0 * 24 * 288);  // 264 B -> 9 sectors
  EXPECT_FALSE(row(r.prefill, "engram").in_total);
}

// The release fetches Engram rows at every image position (START, IMAGE, NEWLINE, END): per
// image, its sequence span x Engram layers x 24 sector-rounded rows is what skipping saves.
TEST(Traffic, EngramRowsAtImagePositionsAreReportedAsTheSkipsSaving) {
  Workload w;
  w.images = {{1920, 1080}};
  const Report r = simulate(builtin_preset("v4.1-flash"), w);
  ASSERT_EQ(r.vision.size(), 1u);
  EXPECT_EQ(r.vision[0].engram_marker_bytes, double(r.vision[0].sequence_tokens) * 2 * 24 * 288);
  EXPECT_EQ(simulate(builtin_preset("v4-flash"), w).vision[0].engram_marker_bytes, 0.0);
}

RC_GTEST_PROP(Traffic, ExpectedEmittedMatchesClosedForm, ()) {
  Workload w;
  w.acceptance = *rc::gen::inRange(0, 1000) / 1000.0;
  const int g = *rc::gen::inRange(1, 9);
  const double a = w.acceptance;
  RC_ASSERT(std::fabs(expected_emitted(w, g) - (1 - std::pow(a, g + 1)) / (1 - a)) <= 1e-12);
}

TEST(Traffic, ConfidenceProfileIsASurvivalProduct) {
  Workload w;
  w.confidence = {0.9, 0.5, 0.1};
  EXPECT_DOUBLE_EQ(expected_emitted(w, 3), 1 + 0.9 + 0.45 + 0.045);
  EXPECT_DOUBLE_EQ(expected_emitted(w, 1), 1.9);
}

TEST(Traffic, LoadSetsTheVerifyBudget) {
  Workload w;
  w.high_load = true;
  EXPECT_EQ(simulate(builtin_preset("v4-flash"), w).verify_budget, 1);
  w.high_load = false;
  EXPECT_EQ(simulate(builtin_preset("v4-flash"), w).verify_budget, 5);
}

const KvDecodeRead& kind(const std::vector<KvDecodeRead>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.kind == name) return r;
  throw std::runtime_error("no kind " + name);
}

// DESIGN 5.5's decode reads per step and layer, by hand: V4.1-Flash at 1000 tokens (r = 2: 500
// entries, r = 1: 1000; top-k 512; 40 layers read a 128-record window of 528 B).
TEST(Traffic, DecodeKvReadsByLayerKind) {
  Workload w;
  w.context = 1000;
  const Report r = simulate(builtin_preset("v4.1-flash"), w);
  const auto& k = r.kv_decode;
  int64_t window = 0;
  for (const auto& row : k) window += row.window;
  EXPECT_EQ(window, 40 * 128 * 528);
  EXPECT_EQ(kind(k, "r=2 scan").selected, 3 * 500 * 288);  // fewer visible than top-k
  EXPECT_EQ(kind(k, "r=2 scan").index_scan, 3 * 500 * 68);
  EXPECT_EQ(kind(k, "r=2 reuse").selected, 15 * 500 * 288);
  EXPECT_EQ(kind(k, "r=2 reuse").index_scan, 0);
  EXPECT_EQ(kind(k, "r=1 candidates").selected, 512 * 288);
  EXPECT_EQ(kind(k, "r=1 candidates").index_scan, 1000 * 68);
  EXPECT_EQ(kind(k, "r=1 in_candidates").selected, 4 * 512 * 288);
  EXPECT_EQ(kind(k, "r=1 in_candidates").index_scan, 4 * 1000 * 68);  // every block a candidate
  EXPECT_EQ(kind(k, "r=1 reuse").selected, 15 * 512 * 288);
  // fp32 a and b, read whole every other step
  EXPECT_EQ(kind(k, "r=2 compressor states").states, 3 * 2 * 512 * 4 * 2 / 2);
  EXPECT_THROW(kind(k, "r=1 compressor states"), std::runtime_error);  // r = 1 keeps none
  const int64_t total = 40 * 128 * 528 + 18 * 500 * 288 + 3 * 500 * 68 + 20 * 512 * 288 +
                        1000 * 68 + 4 * 1000 * 68 + 3 * 2 * 512 * 4 * 2 / 2;
  EXPECT_DOUBLE_EQ(row(r.decode, "kv read").optimized, double(total) / r.expected_emitted);
  // DSA: every entry selected below 2048 tokens, every index key scanned.
  EXPECT_DOUBLE_EQ(row(r.decode, "kv read").baseline, 40 * (1000 * 656.0 + 1000 * 132.0));

  // A million tokens: the candidates (2048 blocks of 8) bound what layers 24..36 scan.
  w.context = 1 << 20;
  const Report big = simulate(builtin_preset("v4.1-flash"), w);
  EXPECT_EQ(kind(big.kv_decode, "r=1 in_candidates").index_scan, 4 * 2048 * 8 * 68);
  EXPECT_EQ(kind(big.kv_decode, "r=1 candidates").index_scan, int64_t{1 << 20} * 68);
  EXPECT_EQ(kind(big.kv_decode, "r=2 reuse").selected, 15 * 512 * 288);
  EXPECT_DOUBLE_EQ(row(big.decode, "kv read").baseline, 40 * (2048 * 656.0 + (1 << 20) * 132.0));
  // Five entries past a multiple of 8: the pinned newest block holds 5 of them.
  w.context = (1 << 20) + 5;
  EXPECT_EQ(
      kind(simulate(builtin_preset("v4.1-flash"), w).kv_decode, "r=1 in_candidates").index_scan,
      4 * (2047 * 8 + 5) * 68);
}

// V4-Flash at 1000 tokens: CSA (r = 4, 250 entries, top-512, 68 B keys) and HCA (r = 128: all 7
// entries), every layer with a 584 B window; CSA keeps its main and index compressors' states
// ([8, 1024] and [8, 256] fp32, a and b, read every 4th step), HCA [128, 512] (every 128th).
TEST(Traffic, DecodeKvReadsOfV4Flash) {
  Workload w;
  w.context = 1000;
  const auto k = simulate(builtin_preset("v4-flash"), w).kv_decode;
  EXPECT_EQ(kind(k, "r=0 window").window, 2 * 128 * 584);
  EXPECT_EQ(kind(k, "r=0 window").selected, 0);
  EXPECT_EQ(kind(k, "r=4 scan").window, 21 * 128 * 584);
  EXPECT_EQ(kind(k, "r=4 scan").selected, 21 * 250 * 584);
  EXPECT_EQ(kind(k, "r=4 scan").index_scan, 21 * 250 * 68);
  EXPECT_EQ(kind(k, "r=128 all").selected, 20 * 7 * 584);
  EXPECT_EQ(kind(k, "r=128 all").index_scan, 0);
  EXPECT_EQ(kind(k, "r=4 compressor states").states, 21 * (8 * 1024 + 8 * 256) * 4 * 2 / 4);
  EXPECT_EQ(kind(k, "r=128 compressor states").states, 20 * 128 * 512 * 4 * 2 / 128);
}

// A preset file does not say how its layers select: the whole cache and the window.
TEST(Traffic, DecodeKvReadOfAPresetFileIsTheWholeCache) {
  Workload w;
  w.context = 1000;
  Preset p = builtin_preset("v4.1-flash");
  EXPECT_TRUE(p.builtin);
  EXPECT_FALSE(simulate(p, w).kv_decode.empty());
  p.builtin = false;  // as parse_preset reads a file: its name, a release's here, is only a name
  const Report r = simulate(p, w);
  EXPECT_TRUE(r.kv_decode.empty());
  EXPECT_DOUBLE_EQ(row(r.decode, "kv read").optimized,
                   (1000 * 890.0 + 128.0 * 528 * p.layers) / r.expected_emitted);
}

RC_GTEST_PROP(Vision, UnshuffleCutsTokensByNineAndCaps, ()) {
  const Image img{*rc::gen::inRange(1, 20000), *rc::gen::inRange(1, 20000)};
  const VisionImage v = vision_tokens(img);
  RC_ASSERT(v.tokens_with == int64_t{(v.grid_w + 2) / 3} * ((v.grid_h + 2) / 3));
  RC_ASSERT(v.tokens_without == int64_t{v.grid_w} * v.grid_h);
  RC_ASSERT(v.sequence_tokens == 2 + ((v.grid_h + 2) / 3) * ((v.grid_w + 2) / 3 + 1));
  // The released budget caps the whole span (properties/vision_props.cpp checks the sizing).
  RC_ASSERT(v.sequence_tokens <= 1024);
  RC_ASSERT(v.tokens_without <= 9 * v.tokens_with);
  if (v.grid_w % 3 == 0 && v.grid_h % 3 == 0) RC_ASSERT(v.tokens_without == 9 * v.tokens_with);
}

TEST(Traffic, BadWorkloadIsBadInput) {
  Workload w;
  w.acceptance = 1.0;
  EXPECT_THROW(simulate(builtin_preset("tiny"), w), BadInput);
  w = {};
  w.batch = 0;
  EXPECT_THROW(simulate(builtin_preset("tiny"), w), BadInput);
  w = {};
  w.images = {{0, 10}};
  EXPECT_THROW(simulate(builtin_preset("tiny"), w), BadInput);
}

// Relative tolerance for a double figure recomputed by hand from the same formula: each side
// takes a handful of correctly rounded operations (<= 2^-53 relative each), so 1e-12 is ample
// and still a billion times finer than any of the mutations these tests guard against.
constexpr double kRel = 1e-12;

// DESIGN 6 / README "Traffic reports": the Engram prefetch must cross the host link while the
// first block runs, and the first block moves its weights (active / layers) plus the batch's KV
// share (batch x context x KV/token / layers) at HBM bandwidth. The needed link bandwidth is one
// step's first-layer rows (batch x lookups x sector-rounded row) over that time.
TEST(Traffic, EngramPrefetchFirstBlockScalesWithBatch) {
  Preset p;
  p.name = "hand";
  p.layers = 4;
  p.d = 64;
  p.active_param_bytes = 4e6;  // 1e6 B a block
  p.kv_bytes_per_token = 500;  // 4096 tokens: 512,000 B a block per request
  p.engram_layers = 1;         // 24 rows of 264 B -> 288 B sectors: 6912 B a request
  p.hbm_GBps = 1000;
  Workload w;
  w.context = 4096;
  struct Want {
    int batch;
    double block_bytes;
  } wants[] = {{1, 1e6 + 512000.0}, {8, 1e6 + 8 * 512000.0}};
  for (const Want& want : wants) {
    w.batch = want.batch;
    const Report r = simulate(p, w);
    const double ms = want.block_bytes / 1e12 * 1e3;  // 1000 GB/s
    const double gbps = want.batch * 6912.0 / (ms * 1e-3) / 1e9;
    EXPECT_NEAR(r.first_block_ms, ms, kRel * ms) << "batch " << want.batch;
    EXPECT_NEAR(r.engram_prefetch_needed_GBps, gbps, kRel * gbps) << "batch " << want.batch;
    EXPECT_EQ(r.engram_prefetch_hides, gbps <= 64) << "batch " << want.batch;
  }
}

// README "Traffic reports": the residual and Engram rows are paid for every verified position,
// (K + 1) / E of them per generated token. V4.1-Flash: the single pass's 10d per site = 10 x
// 5120 x 2 B x 80 sites = 8,192,000 B; Engram 2 layers x 24 rows x 288 B = 13,824 B. At
// acceptance 0.7, high load K = 1: E = 1.7; low load K = 5: E = 1 + .7 + ... + .7^5 = 2.94117.
TEST(Traffic, DecodeResidualAndEngramPayPerVerifiedPosition) {
  struct Load {
    bool high;
    int K;
    double E;
  } loads[] = {{true, 1, 1.7}, {false, 5, 2.94117}};
  for (const Load& l : loads) {
    Workload w;
    w.high_load = l.high;
    const Report r = simulate(builtin_preset("v4.1-flash"), w);
    EXPECT_NEAR(r.expected_emitted, l.E, kRel * l.E);
    const double positions = (l.K + 1) / l.E;
    const double residual = 8192000.0 * positions, engram = 13824.0 * positions;
    EXPECT_NEAR(row(r.decode, "residual").optimized, residual, kRel * residual) << l.K;
    EXPECT_NEAR(row(r.decode, "engram").optimized, engram, kRel * engram) << l.K;
    EXPECT_EQ(row(r.decode, "residual").baseline, 16384000.0);  // V4 unfused: 20d, not per position
  }
}

// A profile shorter than the budget repeats its last confidence (sim/traffic.hpp): {0.9, 0.5}
// at K = 4 is c = 0.9, 0.5, 0.5, 0.5, survivals 0.9, 0.45, 0.225, 0.1125.
TEST(Traffic, ShortConfidenceProfileRepeatsItsLastValue) {
  Workload w;
  w.confidence = {0.9, 0.5};
  const double e4 = 1 + 0.9 + 0.45 + 0.225 + 0.1125;  // 2.6875
  EXPECT_NEAR(expected_emitted(w, 4), e4, kRel * e4);
  // Through the report: low load verifies gamma = 5, one more survival of 0.05625.
  w.high_load = false;
  const Report r = simulate(builtin_preset("v4.1-flash"), w);
  EXPECT_EQ(r.verify_budget, 5);
  EXPECT_NEAR(r.expected_emitted, e4 + 0.05625, kRel * e4);
  // A single confidence behaves as i.i.d. acceptance at that value: (1 - a^(K+1)) / (1 - a).
  w.confidence = {0.6};
  const double iid = (1 - std::pow(0.6, 6)) / 0.4;
  EXPECT_NEAR(expected_emitted(w, 5), iid, kRel * iid);
}

// Confidences are probabilities: in [0, 1] (1 allowed: the drafter may be sure), anything else
// is bad input naming --confidence, from the simulator and as the CLI's exit 2.
TEST(Traffic, ConfidenceOutsideZeroOneIsBadInput) {
  Workload w;
  for (const double c : {1.5, 1.0000001, -0.1, -1e-9}) {
    w.confidence = {0.9, c};
    try {
      simulate(builtin_preset("tiny"), w);
      ADD_FAILURE() << "accepted confidence " << c;
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find("--confidence"), std::string::npos) << e.what();
    }
  }
  w.confidence = {1.0, 0.0};
  EXPECT_NO_THROW(simulate(builtin_preset("tiny"), w));

  auto cli = [](std::vector<const char*> args) {
    args.insert(args.begin(), "tandem");
    std::ostringstream out, err;
    const int code = app::run(int(args.size()), args.data(), out, err);
    return std::pair{code, err.str()};
  };
  for (const char* value : {"--confidence=0.9,1.5", "--confidence=-0.5"}) {
    const auto [code, err] = cli({"traffic", "--preset", "tiny", value});
    EXPECT_EQ(code, 2) << value << ": " << err;
    EXPECT_NE(err.find("--confidence"), std::string::npos) << err;
  }
  EXPECT_EQ(cli({"traffic", "--preset", "tiny", "--confidence=1,0"}).first, 0);
}

// DESIGN 5.5: a sequence keeps min(T, 128) window records per window-owning layer, in whole pages.
// Below the ring's size only T of them: V4.1 r = 2 layer, v41_window records of 528 B.
TEST(Traffic, SequenceWindowBelowTheRingCountsOnlyTheTokens) {
  auto window = [](int64_t tokens, int64_t page) {
    return kv_sequence_bytes(v41_compressor(2), KvFormat::idx_mxfp4, false, KvFormat::v41_window,
                             128, tokens, page);
  };
  EXPECT_EQ(window(10, 1).window, 10 * 528);
  EXPECT_EQ(window(10, 1).padding, 0);  // 5 entries, 5 keys, 10 window records: no page slack
  EXPECT_EQ(window(10, 64).window, 64 * 528);  // one page of 64
  EXPECT_EQ(window(10, 64).padding, (64 - 5) * (288 + 68) + (64 - 10) * 528);
  EXPECT_EQ(window(64, 64).window, 64 * 528);
  EXPECT_EQ(window(65, 64).window, 2 * 64 * 528);
  EXPECT_EQ(window(127, 1).window, 127 * 528);
  EXPECT_EQ(window(1000, 1).window, 128 * 528);  // the full ring
  // The report's sequence at 10 tokens: V4.1-Flash's 4 kv-source layers and 2 window-only
  // layers each keep one page of the ring.
  Workload w;
  w.context = 10;
  const Report r = simulate(builtin_preset("v4.1-flash"), w);
  ASSERT_TRUE(r.kv_sequence.has_value());
  EXPECT_EQ(r.kv_sequence->window, 6 * kKvReportPage * 528);
}

// The tiny preset is the end-to-end model of tandem verify, whose activations are f32
// (optimized/model.hpp): its residual element is what the model's own byte model reads. The
// model's first launch of one token opens the first site: it reads the hc_mult streams of d.
TEST(Presets, TinyActBytesAreTheModelsActivations) {
  const ModelConfig m = builtin_model("tiny");
  const LaunchLog log = predict_model(m, {5}, 0);
  ASSERT_FALSE(log.empty());
  EXPECT_TRUE(log[0].kernel.starts_with("residual_single_pass")) << log[0].kernel;
  const uint64_t streams = uint64_t(m.residual.hc_mult) * m.residual.d;
  EXPECT_EQ(log[0].read[int(Traffic::activation)] % streams, 0u);
  EXPECT_EQ(uint64_t(builtin_preset("tiny").act_bytes),
            log[0].read[int(Traffic::activation)] / streams);
  EXPECT_EQ(builtin_preset("tiny").act_bytes, 4);  // f32
  for (const char* n : {"v4-flash", "v4-pro", "v4.1-flash"})
    EXPECT_EQ(builtin_preset(n).act_bytes, 2) << n;  // the releases' bf16 residual
}

// Engram layers are some of the preset's layers: at most `layers`, else bad input naming the
// field.
TEST(Presets, EngramLayersAtMostLayers) {
  const auto path =
      std::filesystem::path(TANDEM_SOURCE_DIR) / "sim" / "presets" / "v4.1-flash-gh200.json";
  nlohmann::json j = nlohmann::json::parse(read_file(path));
  ASSERT_EQ(j["layers"], 40);
  j["engram_layers"] = 40;
  EXPECT_EQ(parse_preset(JsonFields(j, "test")).engram_layers, 40);
  j["engram_layers"] = 41;
  try {
    parse_preset(JsonFields(j, "test"));
    ADD_FAILURE() << "accepted 41 Engram layers of 40";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("engram_layers"), std::string::npos) << e.what();
  }
}

TEST(Presets, ShippedPresetFilesLoad) {
  const auto dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "sim" / "presets";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const Preset p = load_preset(e.path());
    EXPECT_EQ(p.name + ".json", e.path().filename().string());
    EXPECT_TRUE(simulate(p, {}).engram_prefetch_hides);
    ++n;
  }
  EXPECT_GE(n, 1);
}

TEST(Traffic, PresetFileErrorsNameTheField) {
  const TestDir tmp;
  const auto path = tmp / "tandem_preset.json";
  write_file_atomic(path, std::string_view(R"({"name":"x","layers":0})"));
  try {
    load_preset(path);
    FAIL();
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("layers"), std::string::npos) << e.what();
  }
}

TEST(Traffic, OutputsAreWrittenWithPlots) {
  const TestDir tmp;
  const auto dir = tmp / "out";
  write_outputs(simulate(builtin_preset("v4.1-flash"), {}), dir);
  for (const char* f : {"report.json", "report.csv", "sweep.csv", "traffic_stacked.svg",
                        "traffic_stacked.png", "traffic_savings.svg", "traffic_savings.png"})
    EXPECT_GT(std::filesystem::file_size(dir / f), 100u) << f;
  const auto j = nlohmann::json::parse(read_file(dir / "report.json"));
  EXPECT_EQ(j["preset"], "v4.1-flash");
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("tmp"), std::string::npos) << e.path();
}

// The strings a user controls (preset names, output paths) that a shell or gnuplot would act on;
// a command that ran would create a file "PWNED_*" in `marker_dir`.
std::vector<std::string> hostile_strings(const std::filesystem::path& marker_dir) {
  const std::string m = marker_dir.string() + "/PWNED_";
  return {"bob's results",
          "a\"b",
          "back\\slash\\",
          "two\nlines",
          "$(touch " + m + "dollar)",
          "`touch " + m + "backquote`",
          "'; touch " + m + "quote; '",
          "\"; system('touch " + m + "system') #",
          "@macro",
          "caf\xc3\xa9 \xe6\x97\xa5",
          "100% {braces} ^_&"};
}

// No file "PWNED_*" anywhere under `dir`.
void expect_nothing_ran(const std::filesystem::path& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    EXPECT_FALSE(e.path().filename().string().starts_with("PWNED")) << "ran: " << e.path();
}

// Runs gnuplot (as write_outputs does: no shell) on `script` in `dir`; returns its stderr.
std::string gnuplot_prints(const std::filesystem::path& dir, const std::string& script) {
  write_file_atomic(dir / "print.gp", std::string_view(script));
  const std::string cmd = "cd '" + dir.string() + "' && gnuplot print.gp 2> printed.txt";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;  // the test's own fixed command line
  return read_file(dir / "printed.txt");
}

TEST(Traffic, GnuplotStringsReadBackVerbatimAndRunNothing) {
  const TestDir tmp;
  std::string script, expected;
  for (const std::string& s : hostile_strings(tmp.path())) {
    script += "print " + gnuplot_string(s) + "\n";
    expected += s + "\n";
  }
  EXPECT_EQ(gnuplot_prints(tmp.path(), script), expected);
  expect_nothing_ran(tmp.path());
}

TEST(Traffic, HostileOutputDirectoriesAndPresetNamesAreInert) {
  const TestDir tmp;
  Preset p = builtin_preset("tiny");
  for (const std::string& s : hostile_strings(tmp.path())) {
    p.name = s;
    const auto dir = tmp / ("out " + (s.find('/') == std::string::npos ? s : "marker"));
    write_outputs(simulate(p, {}), dir);
    for (const char* f : kReportFiles) EXPECT_GT(std::filesystem::file_size(dir / f), 100u) << s;
    EXPECT_EQ(nlohmann::json::parse(read_file(dir / "report.json"))["preset"], s);
  }
  expect_nothing_ran(tmp.path());
}

// A failing gnuplot (a stand-in first on PATH) leaves the output directory as it was, and the
// next run removes what a killed run left.
TEST(Traffic, FailedPlotsLeaveTheDirectoryAsItWas) {
  const TestDir tmp;
  const auto bin = tmp / "bin", out = tmp / "out";
  std::filesystem::create_directories(bin);
  std::filesystem::create_directories(out / ".tandem-tmp.999999999.0badc0de");  // a dead run's
  write_file_atomic(out / "keep.txt", std::string_view("mine"));
  write_file_atomic(bin / "gnuplot", std::string_view("#!/bin/sh\necho broken >&2\nexit 1\n"));
  std::filesystem::permissions(bin / "gnuplot", std::filesystem::perms::owner_all);
  const std::string path = std::getenv("PATH");
  ::setenv("PATH", (bin.string() + ":" + path).c_str(), 1);
  EXPECT_THROW(write_outputs(simulate(builtin_preset("tiny"), {}), out), std::runtime_error);
  ::setenv("PATH", path.c_str(), 1);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(out))
    left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"keep.txt"});
}

}  // namespace
}  // namespace tandem::sim
