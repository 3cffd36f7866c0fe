#include "reference/engram.hpp"

#include <fmt/ranges.h>

#include <Eigen/Dense>
#include <cmath>
#include <stdexcept>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/fp8_blocks.hpp"
#include "core/philox.hpp"
#include "core/safetensors.hpp"
#include "reference/residual.hpp"  // store<Act>, naive_dot

namespace tandem::reference {

CompressionMap load_compression_map(const std::string& path, const EngramConfig& cfg) {
  return compression_map_from(read_safetensors(path), cfg, path);
}

CompressionMap compression_map_from(const Safetensors& st, const EngramConfig& cfg,
                                    const std::string& path) {
  return compression_map_from(st.get_as<int32_t>("map", path), cfg, path);
}

CompressionMap compression_map_from(const Tensor<int32_t>& t, const EngramConfig& cfg,
                                    const std::string& path) {
  if (t.shape != Shape{cfg.vocab})
    throw_bad_input("{}: tensor 'map' has {} entries, engram.vocab is {}", path, t.size(),
                    cfg.vocab);
  for (int64_t i = 0; i < t.size(); ++i)
    if (t.data[i] < 0 || t.data[i] >= cfg.compressed_vocab)
      throw_bad_input("{}: map[{}] = {} is outside [0, engram.compressed_vocab = {})", path, i,
                      t.data[i], cfg.compressed_vocab);
  return {t.data, cfg.compressed_vocab};
}

CompressionMap synthetic_compression_map(int64_t vocab, int64_t compressed_vocab, uint64_t seed) {
  CompressionMap m{std::vector<int32_t>(vocab), compressed_vocab};
  for (int64_t i = 0; i < vocab; ++i)
    m.map[i] = static_cast<int32_t>(i < compressed_vocab
                                        ? i
                                        : philox_draw(seed, 0, static_cast<uint32_t>(i)).v[0] %
                                              compressed_vocab);
  return m;
}

std::vector<int64_t> compress(std::span<const int64_t> ids, const CompressionMap& m) {
  std::vector<int64_t> out(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] >= static_cast<int64_t>(m.map.size()))
      throw_bad_input("token id {} at position {} is outside the vocabulary [0, {})", ids[t], t,
                      m.map.size());
    out[t] = ids[t] < 0 ? ids[t] : m.map[ids[t]];
  }
  return out;
}

std::vector<int64_t> suffix_ngram(std::span<const int64_t> ids, std::span<const int64_t> history,
                                  int64_t t, int k, int64_t pad) {
  std::vector<int64_t> gram;
  bool blocked = false;
  for (int i = 0; i < k; ++i) {
    const int64_t pos = t - i;  // may reach into the history (negative pos)
    const int64_t hist = static_cast<int64_t>(history.size()) + pos;
    const int64_t id = pos >= 0 ? ids[pos] : hist >= 0 ? history[hist] : kEngramDead;
    blocked = blocked || id < 0;
    gram.push_back(blocked ? pad : id);
  }
  return gram;
}

Tensor<int64_t> engram_addresses(const EngramConfig& cfg, const EngramLayerTables& tables,
                                 std::span<const int64_t> compressed,
                                 std::span<const int64_t> history, int64_t compressed_pad) {
  const int64_t T = static_cast<int64_t>(compressed.size());
  Tensor<int64_t> a({T, cfg.lookups()}, -1);
  for (int64_t t = 0; t < T; ++t) {
    if (compressed[t] < 0 && cfg.skip_marker_lookups) continue;  // the optional skip
    for (int k = 2; k <= cfg.max_order; ++k) {
      const std::vector<int64_t> c = suffix_ngram(compressed, history, t, k, compressed_pad);
      int64_t h = c[0] * tables.multipliers[0];
      for (int i = 1; i < k; ++i) h ^= c[i] * tables.multipliers[i];
      for (int j = 0; j < cfg.heads; ++j) {
        const int l = (k - 2) * cfg.heads + j;
        a.data[t * cfg.lookups() + l] = tables.offsets[l] + h % tables.primes[l];
      }
    }
  }
  return a;
}

std::vector<uint8_t> synthetic_table(int64_t rows, int row_bytes, uint64_t seed) {
  const int values = row_bytes * 32 / 33;  // head_dim codes, then head_dim / 32 scales
  std::vector<uint8_t> t(static_cast<size_t>(rows) * row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    for (int b = 0; b < row_bytes; b += 4) {
      const Philox4 x = philox_draw(seed, static_cast<uint32_t>(r), static_cast<uint32_t>(b));
      for (int i = 0; i < 4 && b + i < row_bytes; ++i) {
        uint8_t v = static_cast<uint8_t>(x.v[i]);
        if (b + i < values) {
          if ((v & 0x7f) == 0x7f) v ^= 0x01;  // no NaN codes
        } else {
          v = static_cast<uint8_t>(123 + x.v[i] % 5);  // scales 2^-4 .. 2^0
        }
        t[static_cast<size_t>(r) * row_bytes + b + i] = v;
      }
    }
  }
  return t;
}

Tensor<float> gather_rows(const EngramInputs& in, const Tensor<int64_t>& addresses) {
  const int64_t T = addresses.dim(0), L = in.cfg.lookups(), D = in.cfg.head_dim;
  Tensor<float> e({T, L * D}, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t l = 0; l < L; ++l) {
      const int64_t row = addresses.data[t * L + l];
      if (row < 0) continue;
      const uint8_t* r = engram_table_row(in, row, t, int(l));
      for (int64_t i = 0; i < D; ++i)
        e.data[(t * L + l) * D + i] = e4m3_decode(r[i]) * ue8m0_decode(r[D + i / 32]);
    }
  }
  return e;
}

namespace {

// What the gate reads unchecked: Wkv, and gathered rows as wide as its columns.
void check_gate_operands(const EngramInputs& in, const Tensor<float>& rows) {
  check_engram_wkv(in);
  if (rows.shape.size() != 2 || rows.dim(1) != in.wkv->dim(1))
    throw_bad_input("engram gate: rows [{}], expected [T, {}]", fmt::join(rows.shape, ", "),
                    in.wkv->dim(1));
}

}  // namespace

GateProblem float_gate_problem(const EngramInputs& in, const Tensor<float>& rows) {
  check_gate_operands(in, rows);
  GateProblem p{in, rows};
  const int B = in.cfg.wkv_fp8_block;
  if (B == 0) return p;
  p.in.wkv = std::make_shared<const Fp8CachedWeight>(dequantize(in.wkv->fp8_blocks(B)));
  const int64_t E = rows.dim(1);
  for (int64_t t = 0; t < rows.dim(0); ++t)
    quantize_dequantize_fp8(std::span<float>(p.rows.ptr() + t * E, size_t(E)), B);
  p.in.cfg.wkv_fp8_block = 0;
  return p;
}

template <class S, class Act>
GateOutputs engram_gate(const EngramInputs& in, const Tensor<float>& rows) {
  if (in.cfg.wkv_fp8_block != 0)
    throw std::logic_error("engram_gate: takes float_gate_problem's float problem");
  check_gate_operands(in, rows);
  const int64_t T = in.h.dim(0), d = in.cfg.d, E = rows.dim(1);
  const S eps = S(in.cfg.norm_eps);
  GateOutputs out{Tensor<double>({T, 4}), Tensor<double>({T, 4, d})};
  for (int64_t t = 0; t < T; ++t) {
    Vec<S> e(E);
    for (int64_t i = 0; i < E; ++i) e(i) = S(rows.data[t * E + i]);
    Vec<S> kv(5 * d);  // [5d]: 4 keys, then the value; Wkv's rows converted one at a time
    for (int64_t o = 0; o < 5 * d; ++o)
      kv(o) =
          naive_dot<S>(Eigen::Map<const Eigen::VectorXf>(in.wkv->ptr() + o * E, E).cast<S>(), e);
    for (int s = 0; s < 4; ++s) {
      Vec<S> h(d), w(d);
      for (int64_t n = 0; n < d; ++n)
        h(n) = S(in.h.data[(t * 4 + s) * d + n]), w(n) = S(in.gate_w.data[s * d + n]);
      const Vec<S> key = kv.segment(s * d, d), value = kv.segment(4 * d, d);
      const S dot = naive_dot<S>(h.cwiseProduct(w), key) /
                    std::sqrt(naive_dot<S>(h, h) / S(d) + eps) /
                    std::sqrt(naive_dot<S>(key, key) / S(d) + eps) / std::sqrt(S(d));
      // copysign as the release: dot = +0 gives sigmoid(+1e-3), not sigmoid(0) = 0.5.
      const S gate =
          in.compressed[t] < 0
              ? S(0)
              : sigmoid(std::copysign(std::sqrt(std::max(std::fabs(dot), S(1e-6))), dot));
      out.gates.data[t * 4 + s] = static_cast<double>(gate);
      for (int64_t n = 0; n < d; ++n)
        out.h_out.data[(t * 4 + s) * d + n] =
            static_cast<double>(store<Act>(h(n) + gate * value(n)));
    }
  }
  return out;
}

namespace {

// `gate` on the float problem: `in` itself when it is one (no copy of a release's 629 MB Wkv).
template <class Gate>
GateOutputs on_float_problem(const EngramInputs& in, const Tensor<float>& rows, Gate gate) {
  if (in.cfg.wkv_fp8_block == 0) return gate(in, rows);
  const GateProblem p = float_gate_problem(in, rows);
  return gate(p.in, p.rows);
}

}  // namespace

GateOutputs engram_gate_truth(const EngramInputs& in, const Tensor<float>& rows) {
  return on_float_problem(in, rows, [](const EngramInputs& i, const Tensor<float>& r) {
    return engram_gate<double, double>(i, r);
  });
}

GateOutputs engram_gate_baseline(const EngramInputs& in, const Tensor<float>& rows) {
  return on_float_problem(in, rows, [](const EngramInputs& i, const Tensor<float>& r) {
    return i.act == ActDType::f32 ? engram_gate<float, float>(i, r)
                                  : engram_gate<float, bf16>(i, r);
  });
}

}  // namespace tandem::reference
