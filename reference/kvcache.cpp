#include "reference/kvcache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "reference/residual.hpp"  // Mat, Vec, naive_dot, store

namespace tandem::reference {

// ================================================================ records
void encode_record(const KvStoreOptions& o, std::span<const float> values, int64_t slot,
                   std::span<uint8_t> pool) {
  const KvFormatInfo f = kv_format_info(o.format);
  const KvPageLayout at{f, o.page_size};
  uint8_t* codes = pool.data() + at.code_at(slot);
  uint8_t* scales = pool.data() + at.scale_at(slot);
  for (int k = 0; k < f.tiles(); ++k) {
    const std::span<const float> tile = values.subspan(size_t(k) * f.tile, size_t(f.tile));
    float amax = 0;
    for (float x : tile) amax = kv_tile_amax(amax, x);
    const KvTileScale s = kv_tile_scale(f, amax);
    if (f.scale == KvScale::fp32)
      std::memcpy(scales + 4 * k, &s.bits, 4);  // little-endian fp32, as the GPU stores it
    else
      scales[k] = uint8_t(s.bits);
    for (int e = 0; e < f.tile; ++e) {
      const int i = k * f.tile + e;
      const uint8_t c = kv_element_code(f, tile[size_t(e)], s.value, o.canonical_zero);
      if (f.code == KvCode::e4m3)
        codes[i] = c;
      else if (i % 2 == 0)  // the even element in the low nibble
        codes[i / 2] = c;
      else
        codes[i / 2] = uint8_t(codes[i / 2] | c << 4);
    }
  }
  for (int p = 0; p < f.pad; ++p) scales[f.tiles() * f.scale_unit() + p] = 0;
  uint8_t* rope = pool.data() + at.rope_at(slot);
  for (int i = 0; i < f.rope; ++i) {
    const uint16_t b = bf16_encode(values[size_t(f.quant + i)]);
    rope[2 * i] = uint8_t(b & 0xff), rope[2 * i + 1] = uint8_t(b >> 8);
  }
}

std::vector<uint8_t> record_row(KvFormat f, std::span<const float> values) {
  KvStoreOptions o;
  o.format = f, o.page_size = 1, o.pool_slots = 1;
  std::vector<uint8_t> pool(size_t(kv_pool_bytes(o))),
      row(size_t(kv_format_info(f).record_bytes()));
  encode_record(o, values, 0, pool);
  copy_record_out({kv_format_info(f), 1}, pool.data(), 0, row.data());
  return row;
}

std::vector<double> decode_record(KvFormat format, int64_t page_size, std::span<const uint8_t> pool,
                                  int64_t slot) {
  const KvFormatInfo f = kv_format_info(format);
  const KvPageLayout at{f, page_size};
  const uint8_t* codes = pool.data() + at.code_at(slot);
  const uint8_t* scales = pool.data() + at.scale_at(slot);
  std::vector<double> v(size_t(f.dims()));
  for (int i = 0; i < f.quant; ++i) {
    const int k = i / f.tile;
    uint32_t bits = scales[k];
    if (f.scale == KvScale::fp32) std::memcpy(&bits, scales + 4 * k, 4);
    const uint8_t c =
        f.code == KvCode::e4m3 ? codes[i] : uint8_t(i % 2 ? codes[i / 2] >> 4 : codes[i / 2] & 15);
    v[size_t(i)] = double(kv_element_value(f, c)) * double(kv_scale_value(f, bits));
  }
  const uint8_t* rope = pool.data() + at.rope_at(slot);
  for (int i = 0; i < f.rope; ++i)
    v[size_t(f.quant + i)] = bf16_decode(uint16_t(rope[2 * i] | rope[2 * i + 1] << 8));
  return v;
}

Tensor<uint8_t> encode_pool(const KvStoreOptions& o, const Tensor<float>& rows,
                            std::span<const int64_t> slots) {
  Tensor<uint8_t> pool({kv_pool_bytes(o)}, kKvPoison);
  const int64_t dims = kv_format_info(o.format).dims();
  for (size_t r = 0; r < slots.size(); ++r)
    encode_record(o, std::span<const float>(rows.ptr() + int64_t(r) * dims, size_t(dims)), slots[r],
                  pool.span());
  return pool;
}

Tensor<uint8_t> encode_pool(const KvQuantizeInputs& in) {
  const std::vector<int64_t> slots(in.slots.data.begin(), in.slots.data.end());
  // The values as the kernel's bf16 storage holds them (DESIGN 4: reference inputs go through
  // the kernel's storage dtype), so any float input gives both the same bytes.
  Tensor<float> values = in.values;
  for (float& v : values.data) v = bf16_decode(bf16_encode(v));
  return encode_pool(in.store, values, slots);
}

// ================================================================ the store pipeline
namespace {

template <class S>
Vec<S> row(const Tensor<float>& t, int64_t r) {
  return Eigen::Map<const Eigen::VectorXf>(t.ptr() + r * t.dim(1), t.dim(1)).cast<S>();
}

}  // namespace

// The release precomputes freqs_cis the same way: the angle in double, its cos and sin rounded
// once (S = float: kv_rope_table's entry exactly).
template <class S>
RopeAngles<S> rope_angles(int64_t pos, double theta) {
  RopeAngles<S> a;
  for (int i = 0; i < kKvRopeDims / 2; ++i) {
    const double angle = double(pos) * std::pow(theta, -2.0 * i / kKvRopeDims);
    a.cos[size_t(i)] = S(std::cos(angle)), a.sin[size_t(i)] = S(std::sin(angle));
  }
  return a;
}
template RopeAngles<double> rope_angles<double>(int64_t, double);
template RopeAngles<float> rope_angles<float>(int64_t, double);

template <class S, class Act>
void rope_pairs(S* z, int dims, const RopeAngles<S>& a) {
  for (int i = 0; i < kKvRopeDims / 2; ++i) {  // adjacent pairs of the last 64 dims
    const int d0 = dims - kKvRopeDims + 2 * i;
    const S c = a.cos[size_t(i)], s = a.sin[size_t(i)];
    const S x0 = z[d0], x1 = z[d0 + 1];
    z[d0] = store<Act>(x0 * c - x1 * s);
    z[d0 + 1] = store<Act>(x0 * s + x1 * c);
  }
}
template void rope_pairs<double, double>(double*, int, const RopeAngles<double>&);
template void rope_pairs<double, bf16>(double*, int, const RopeAngles<double>&);
template void rope_pairs<float, bf16>(float*, int, const RopeAngles<float>&);

namespace {

// The pipeline every record goes through (problem/kvcache.hpp): z [dims] in, the latent (after
// the norm) and the stored values (after RoPE and the rotation) out.
template <class S, class Act>
void finish_record(Vec<S>& z, const KvFormatInfo& f, const Tensor<float>& norm_w, double eps,
                   int64_t pos, double theta, bool rotate, S* latent, S* stored) {
  const int dims = f.dims();
  for (int i = 0; i < dims; ++i) z(i) = store<Act>(z(i));
  S ss = 0;
  for (int i = 0; i < f.normed; ++i) ss += z(i) * z(i);
  const S inv = S(1) / std::sqrt(ss / S(f.normed) + S(eps));
  for (int i = 0; i < f.normed; ++i) z(i) = store<Act>(z(i) * inv * S(norm_w.data[size_t(i)]));
  if (latent)
    for (int i = 0; i < dims; ++i) latent[i] = z(i);
  rope_pairs<S, Act>(z.data(), dims, rope_angles<S>(pos, theta));
  if (rotate) {  // Hadamard (Sylvester order) / sqrt(dims)
    const Vec<S> x = z;
    for (int k = 0; k < dims; ++k) {
      S sum = 0;
      for (int i = 0; i < dims; ++i)
        sum += (__builtin_popcount(unsigned(k & i)) % 2 ? -x(i) : x(i));
      z(k) = store<Act>(sum / std::sqrt(S(dims)));
    }
  }
  for (int i = 0; i < dims; ++i) stored[i] = z(i);
}

}  // namespace

template <class S, class Act>
Tensor<S> project_records(const KvStoreOptions& o, const Tensor<float>& x, const Tensor<float>& w,
                          const Tensor<float>& norm_w, const std::vector<int64_t>& positions) {
  const KvFormatInfo f = kv_format_info(o.format);
  const Mat<S> m = as_matrix<S>(w);
  Tensor<S> stored({x.dim(0), f.dims()});
  for (int64_t r = 0; r < x.dim(0); ++r) {
    const Vec<S> in = row<S>(x, r);
    Vec<S> z(f.dims());
    for (int i = 0; i < f.dims(); ++i) z(i) = naive_dot<S>(m.row(i), in);
    finish_record<S, Act>(z, f, norm_w, o.norm_eps, positions[size_t(r)], o.rope_theta, false,
                          nullptr, stored.ptr() + r * f.dims());
  }
  return stored;
}
template Tensor<double> project_records<double, double>(const KvStoreOptions&, const Tensor<float>&,
                                                        const Tensor<float>&, const Tensor<float>&,
                                                        const std::vector<int64_t>&);
template Tensor<float> project_records<float, bf16>(const KvStoreOptions&, const Tensor<float>&,
                                                    const Tensor<float>&, const Tensor<float>&,
                                                    const std::vector<int64_t>&);

template <class S, class Act>
KvRun<S> kv_window_store(const KvWindowInputs& in) {
  KvRun<S> run;
  std::vector<int64_t> positions;
  for (int64_t t = 0; t < in.x.dim(0); ++t) {
    positions.push_back(in.start + t);
    run.slots.push_back((in.start + t) % in.window);
  }
  run.stored = project_records<S, Act>(in.store, in.x, in.wkv, in.norm_w, positions);
  return run;
}

namespace {

// The compressor's projections of one token: a = Wkv x, b = Wgate x + ape[pos mod r].
template <class S>
void project(const KvCompressInputs& in, const Mat<S>& wkv, const Mat<S>& wgate, const Vec<S>& x,
             int64_t pos, S* a, S* b) {
  const KvCompressor& c = in.comp;
  for (int ch = 0; ch < c.width(); ++ch) {
    a[ch] = naive_dot<S>(wkv.row(ch), x);
    if (!c.gated()) continue;
    b[ch] = naive_dot<S>(wgate.row(ch), x);
    if (c.ape) b[ch] += S(in.ape.data[size_t((pos % c.ratio) * c.width() + ch)]);
  }
}

// Entry z from its slots: `prev` (overlap: the previous group's r rows, first-half channels;
// nullptr for entry 0: a = 0, b = -inf) and `cur` (this group's r rows; with overlap their
// second-half channels), rows `stride` apart. Softmax over the slots per channel; r = 1 takes a.
template <class S>
Vec<S> pool_entry(const KvCompressor& c, const S* prev_a, const S* prev_b, const S* cur_a,
                  const S* cur_b, int64_t stride) {
  const int D = c.dims();
  Vec<S> z(D);
  for (int i = 0; i < D; ++i) {
    if (!c.gated()) {
      z(i) = cur_a[i];
      continue;
    }
    std::vector<S> a, b;
    for (int s = 0; c.overlap && s < c.ratio; ++s) {
      a.push_back(prev_a ? prev_a[s * stride + i] : S(0));
      b.push_back(prev_b ? prev_b[s * stride + i] : -std::numeric_limits<S>::infinity());
    }
    const int off = c.overlap ? D : 0;
    for (int s = 0; s < c.ratio; ++s)
      a.push_back(cur_a[s * stride + off + i]), b.push_back(cur_b[s * stride + off + i]);
    const S m = *std::max_element(b.begin(), b.end());
    S sum = 0, acc = 0;
    for (size_t s = 0; s < a.size(); ++s) {
      const S e = std::exp(b[s] - m);
      sum += e;
      acc += e * a[s];
    }
    z(i) = acc / sum;
  }
  return z;
}

}  // namespace

template <class S, class Act>
KvRun<S> kv_compress(const KvCompressInputs& in) {
  const KvCompressor& c = in.comp;
  const KvFormatInfo f = kv_format_info(c.format);
  const int W = c.width(), D = c.dims(), R = c.state_rows();
  const Mat<S> wkv = as_matrix<S>(in.wkv), wgate = c.gated() ? as_matrix<S>(in.wgate) : Mat<S>();
  KvRun<S> run;
  run.state_a = Tensor<S>({R, W}, S(0));
  run.state_b = Tensor<S>({R, W}, -std::numeric_limits<S>::infinity());
  auto emit = [&](const Vec<S>& pooled, int64_t j) {
    const int64_t n = int64_t(run.slots.size());
    run.stored.data.resize(size_t((n + 1) * D));
    run.latent.data.resize(size_t((n + 1) * D));
    run.pooled.data.insert(run.pooled.data.end(), pooled.data(), pooled.data() + D);
    Vec<S> z = pooled;
    finish_record<S, Act>(z, f, in.norm_w, in.store.norm_eps, j * c.ratio, in.store.rope_theta,
                          c.rotate, run.latent.ptr() + n * D, run.stored.ptr() + n * D);
    run.slots.push_back(j);
  };
  const int cur0 = c.overlap ? c.ratio : 0;  // the state row of a group's first token
  if (in.decode) {
    for (size_t i = 0; i < in.state.a.data.size(); ++i)
      run.state_a.data[i] = S(in.state.a.data[i]), run.state_b.data[i] = S(in.state.b.data[i]);
    const int64_t row_of = cur0 + in.pos % c.ratio;
    project<S>(in, wkv, wgate, row<S>(in.x, 0), in.pos, run.state_a.ptr() + row_of * W,
               run.state_b.ptr() + row_of * W);
    if (kv_decode_emits(in.pos, c.ratio)) {
      const S* a = run.state_a.ptr();
      const S* b = run.state_b.ptr();
      emit(pool_entry<S>(c, c.overlap ? a : nullptr, c.overlap ? b : nullptr, a + cur0 * W,
                         b + cur0 * W, W),
           in.pos / c.ratio);
      // The group's rows move to the previous group's (overlap) and are emptied.
      for (int s = 0; s < c.ratio; ++s)
        for (int ch = 0; ch < W; ++ch) {
          S& a_cur = run.state_a.data[size_t((cur0 + s) * W + ch)];
          S& b_cur = run.state_b.data[size_t((cur0 + s) * W + ch)];
          if (c.overlap)
            run.state_a.data[size_t(s * W + ch)] = a_cur,
                                            run.state_b.data[size_t(s * W + ch)] = b_cur;
          a_cur = 0, b_cur = -std::numeric_limits<S>::infinity();
        }
    }
  } else {
    const int64_t T = in.x.dim(0);
    Tensor<S> A({T, W}, S(0)), B({T, W}, -std::numeric_limits<S>::infinity());
    for (int64_t t = 0; t < T; ++t)
      project<S>(in, wkv, wgate, row<S>(in.x, t), t, A.ptr() + t * W, B.ptr() + t * W);
    const int64_t entries = kv_entries(T, c.ratio);
    for (int64_t j = 0; j < entries; ++j) {
      const bool prev = c.overlap && j > 0;
      emit(pool_entry<S>(c, prev ? A.ptr() + (j - 1) * c.ratio * W : nullptr,
                         prev ? B.ptr() + (j - 1) * c.ratio * W : nullptr,
                         A.ptr() + j * c.ratio * W, B.ptr() + j * c.ratio * W, W),
           j);
    }
    // The state: the last complete group (overlap) and the partial group's tokens.
    auto keep = [&](int64_t t, int state_row) {
      for (int ch = 0; ch < W; ++ch) {
        run.state_a.data[size_t(state_row * W + ch)] = A.data[size_t(t * W + ch)];
        run.state_b.data[size_t(state_row * W + ch)] = B.data[size_t(t * W + ch)];
      }
    };
    if (c.overlap && entries > 0)
      for (int s = 0; s < c.ratio; ++s) keep((entries - 1) * c.ratio + s, s);
    for (int64_t t = entries * c.ratio; t < T; ++t) keep(t, int(cur0 + t % c.ratio));
  }
  const int64_t n = int64_t(run.slots.size());
  run.stored.shape = run.latent.shape = run.pooled.shape = {n, D};
  return run;
}

template <class S, class Act>
KvRun<S> index_key_store(const IndexKeyInputs& in) {
  KvRun<S> run;
  std::vector<int64_t> positions;
  for (int64_t j = in.first; j < in.first + in.latent.dim(0); ++j)
    positions.push_back(j * in.ratio), run.slots.push_back(j);
  run.stored = project_records<S, Act>(in.store, in.latent, in.wk, in.norm_w, positions);
  return run;
}

template KvRun<double> kv_window_store<double, double>(const KvWindowInputs&);
template KvRun<float> kv_window_store<float, bf16>(const KvWindowInputs&);
template KvRun<double> kv_compress<double, double>(const KvCompressInputs&);
template KvRun<float> kv_compress<float, bf16>(const KvCompressInputs&);
template KvRun<double> index_key_store<double, double>(const IndexKeyInputs&);
template KvRun<float> index_key_store<float, bf16>(const IndexKeyInputs&);

}  // namespace tandem::reference
