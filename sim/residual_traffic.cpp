#include "sim/residual_traffic.hpp"

#include <string>

#include "sim/dense_traffic.hpp"

namespace tandem::sim {
namespace {

constexpr uint64_t kF32 = 4;
constexpr uint64_t kMixes = 24, kStreams = 4;
constexpr uint64_t kCoefBytes = kMixes * kF32;  // one token's 24 coefficients

struct Launch {
  LaunchCounts c;
  explicit Launch(std::string name) { c.kernel = std::move(name); }
  Launch& read(Traffic t, uint64_t b) { return c.read[static_cast<int>(t)] += b, *this; }
  Launch& write(Traffic t, uint64_t b) { return c.written[static_cast<int>(t)] += b, *this; }
};

// One token's mixes: fn [24, 4d] in full, base [24] and scale [3] (read by the reducing thread).
uint64_t mix_weight_bytes(uint64_t d) { return (kMixes * kStreams * d + kMixes + 3) * kF32; }

// residual_post: reads X and f, writes X', reads the token's coefficients.
LaunchCounts post_launch(uint64_t T, uint64_t d, ActDType act) {
  const uint64_t row = d * act_bytes(act), state = kStreams * row;
  return Launch(launch_name("residual_post", act))
      .read(Traffic::activation, T * (state + row))
      .write(Traffic::activation, T * state)
      .read(Traffic::coefficient, T * kCoefBytes)
      .c;
}

// residual_single_pass: reads X (and f when it updates), writes X' (when it updates) and y; reads
// the coefficients when it updates or carries a pre, writes the next ones with mixes.
LaunchCounts single_pass_launch(const char* kind, uint64_t T, uint64_t d, ActDType act, bool update,
                                bool coef_in, bool with_mixes) {
  const uint64_t row = d * act_bytes(act), state = kStreams * row;
  Launch l(launch_name("residual_single_pass", act, kind));
  l.read(Traffic::activation, T * (state + (update ? row : 0)))
      .write(Traffic::activation, T * ((update ? state : 0) + row))
      .read(Traffic::weight, T * d * kF32 + (with_mixes ? T * mix_weight_bytes(d) : 0));
  if (coef_in) l.read(Traffic::coefficient, T * kCoefBytes);
  if (with_mixes) l.write(Traffic::coefficient, T * kCoefBytes);
  return l.c;
}

}  // namespace

LaunchCounts predict_rms_norm_rows(int64_t tokens, int64_t d, ActDType act, bool gain) {
  const uint64_t T = tokens, row = d * act_bytes(act);
  return Launch(rms_norm_launch_name(act, gain))
      .read(Traffic::activation, T * row)
      .write(Traffic::activation, T * row)
      .read(Traffic::weight, gain ? T * d * kF32 : 0)
      .c;
}

LaunchCounts predict_residual_boundary(int64_t tokens, int64_t d, ActDType act, bool close,
                                       bool carried_pre, bool open, bool mixes) {
  if (!open) return post_launch(tokens, d, act);
  const char* kind = close ? (mixes ? "boundary" : "last") : "open";
  return single_pass_launch(kind, tokens, d, act, close, close || carried_pre, mixes);
}

LaunchLog predict_residual_stack(ResidualPath path, int64_t tokens, int64_t d, int sites,
                                 ActDType act) {
  const uint64_t T = tokens, e = act_bytes(act), row = d * e, state = kStreams * row;
  LaunchLog log;
  auto add = [&](const Launch& l) { log.push_back(l.c); };
  auto sublayer = [&] { log.push_back(predict_dense_rows(tokens, d, d, act)); };
  auto mixes = [&] {
    add(Launch(launch_name("residual_mixes", act))
            .read(Traffic::activation, T * state)
            .read(Traffic::weight, T * mix_weight_bytes(d))
            .write(Traffic::coefficient, T * kCoefBytes));
  };
  auto collapse_and_norm = [&] {
    add(Launch(launch_name("residual_collapse", act))
            .read(Traffic::activation, T * state)
            .write(Traffic::activation, T * row)
            .read(Traffic::coefficient, T * kCoefBytes));
    log.push_back(predict_rms_norm_rows(tokens, d, act));
  };
  if (path == ResidualPath::v4_unfused) {
    for (int l = 0; l < sites; ++l) {
      mixes();
      collapse_and_norm();
      sublayer();
      log.push_back(post_launch(T, d, act));
    }
    mixes();
    collapse_and_norm();
    return log;
  }
  // V4.1: the prologue reads X_0 only; each boundary reads X_l and f_l, writes X_{l+1} and y.
  auto single_pass = [&](const char* kind, bool update, bool with_mixes) {
    log.push_back(single_pass_launch(kind, T, d, act, update, update, with_mixes));
  };
  single_pass("first", false, true);
  for (int l = 0; l < sites; ++l) {
    sublayer();
    const bool last = l + 1 == sites;
    single_pass(last ? "last" : "boundary", true, !last);
  }
  return log;
}

}  // namespace tandem::sim
