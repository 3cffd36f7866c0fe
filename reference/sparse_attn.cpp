#include "reference/sparse_attn.hpp"

#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "reference/kvcache.hpp"   // decode_record
#include "reference/residual.hpp"  // naive_dot, store

namespace tandem::reference {
namespace {

// A pool's records, each decoded once per call (a chunk's tokens share most of their window's).
class DecodedPool {
 public:
  DecodedPool(const KvStoreOptions& o, const Tensor<uint8_t>& pool) : o_(o), pool_(pool) {}
  const std::vector<double>& at(int64_t slot) {
    auto [it, fresh] = rows_.try_emplace(slot);
    if (fresh) it->second = decode_record(o_.format, o_.page_size, pool_.span(), slot);
    return it->second;
  }

 private:
  const KvStoreOptions& o_;
  const Tensor<uint8_t>& pool_;
  std::unordered_map<int64_t, std::vector<double>> rows_;
};

// The records token t attends to: its valid window slots, then its valid compressed entries.
std::vector<const std::vector<double>*> gathered_records(const SparseAttnInputs& in, int64_t t,
                                                         DecodedPool& window, DecodedPool& comp) {
  std::vector<const std::vector<double>*> records;
  const int64_t W = in.window_idx.dim(1), K = in.comp_idx.dim(1), ps = in.comp.page_size;
  for (int64_t i = 0; i < W; ++i) {
    const int32_t slot = in.window_idx.data[size_t(t * W + i)];
    if (slot != -1) records.push_back(&window.at(slot));
  }
  for (int64_t i = 0; i < K; ++i) {
    const int32_t j = in.comp_idx.data[size_t(t * K + i)];
    if (j == -1) continue;
    records.push_back(&comp.at(int64_t(in.page_table.data[size_t(j / ps)]) * ps + j % ps));
  }
  return records;
}

}  // namespace

template <class S, class Act>
SparseAttnRun<S> sparse_attn(const SparseAttnInputs& in) {
  const int64_t T = in.q.dim(0), H = in.heads, D = kKvMainDims;
  SparseAttnRun<S> run{Tensor<S>({T, H, D}, S(0)), Tensor<S>({T, H}, S(0))};
  const S scale = S(1) / std::sqrt(S(D));
  DecodedPool window(in.window, in.window_pool), comp(in.comp, in.comp_pool);
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<const std::vector<double>*> kv = gathered_records(in, t, window, comp);
    const RopeAngles<S> angles = rope_angles<S>(in.start + t, in.rope_theta);
    for (int64_t h = 0; h < H; ++h) {
      S* o = run.o.ptr() + (t * H + h) * D;
      if (kv.empty()) {  // nothing to attend to: o = 0, lse = +inf
        run.lse.data[size_t(t * H + h)] = std::numeric_limits<S>::infinity();
        continue;
      }
      const float* q = in.q.ptr() + (t * H + h) * D;
      std::vector<S> s(kv.size());
      S m = -std::numeric_limits<S>::infinity();
      const auto qd = Eigen::Map<const Eigen::VectorXf>(q, D).cast<S>();
      for (size_t i = 0; i < kv.size(); ++i) {
        const auto record = Eigen::Map<const Eigen::VectorXd>(kv[i]->data(), D).cast<S>();
        s[i] = naive_dot<S>(qd, record) * scale;  // in the thread's sum order
        m = std::max(m, s[i]);
      }
      const S sink = S(in.sinks.data[size_t(h)]);
      const S top = std::max(m, sink);
      S sum = 0, den = sink == -std::numeric_limits<S>::infinity() ? S(0) : std::exp(sink - top);
      for (size_t i = 0; i < kv.size(); ++i) {
        const S p = std::exp(s[i] - top);
        den += p;
        sum += std::exp(s[i] - m);
        for (int64_t d = 0; d < D; ++d) o[d] += p * S((*kv[i])[size_t(d)]);
      }
      for (int64_t d = 0; d < D; ++d) o[d] /= den;
      for (int i = 0; i < kKvRopeDims / 2; ++i) {  // the RoPE dims turned back by the position
        const int64_t d0 = D - kKvRopeDims + 2 * i;
        const S c = angles.cos[size_t(i)], sn = angles.sin[size_t(i)], x0 = o[d0], x1 = o[d0 + 1];
        o[d0] = x0 * c + x1 * sn;
        o[d0 + 1] = x1 * c - x0 * sn;
      }
      for (int64_t d = 0; d < D; ++d) o[d] = store<Act>(o[d]);
      run.lse.data[size_t(t * H + h)] = m + std::log(sum);
    }
  }
  return run;
}

template <class S, class Act>
Tensor<S> rope_queries(Tensor<S> q, int64_t start, double rope_theta) {
  const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2);
  for (int64_t t = 0; t < T; ++t) {
    const RopeAngles<S> angles = rope_angles<S>(start + t, rope_theta);
    for (int64_t h = 0; h < H; ++h) {
      S* row = q.ptr() + (t * H + h) * D;
      for (int64_t d = 0; d < D; ++d) row[d] = store<Act>(row[d]);
      rope_pairs<S, Act>(row, int(D), angles);
    }
  }
  return q;
}

template Tensor<double> rope_queries<double, double>(Tensor<double>, int64_t, double);
template Tensor<double> rope_queries<double, bf16>(Tensor<double>, int64_t, double);
template Tensor<float> rope_queries<float, bf16>(Tensor<float>, int64_t, double);
template SparseAttnRun<double> sparse_attn<double, double>(const SparseAttnInputs&);
template SparseAttnRun<float> sparse_attn<float, bf16>(const SparseAttnInputs&);

}  // namespace tandem::reference
