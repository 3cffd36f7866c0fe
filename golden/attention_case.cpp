#include "golden/attention_case.hpp"

#include "golden/case_util.hpp"
#include "reference/attention.hpp"
#include "reference/residual.hpp"  // store

namespace tandem {

AttentionInputs make_attention_inputs(int64_t T, int64_t P, int64_t d, int heads, ActDType act,
                                      uint64_t seed) {
  AttentionInputs in;
  in.act = act;
  in.heads = heads;
  in.q = seeded_tensor({T, d}, seed, 1, -2.0f, 2.0f);
  in.keys = seeded_tensor({P + T, d}, seed, 2, -2.0f, 2.0f);
  in.values = seeded_tensor({P + T, d}, seed, 3, -2.0f, 2.0f);
  if (act == ActDType::bf16)
    for (Tensor<float>* t : {&in.q, &in.keys, &in.values})
      for (float& v : t->data) v = reference::store<bf16>(v);
  return in;
}

namespace {

// The float baseline with each head's dimension permuted by ph (every dot product in another
// order) and its sums over positions in another order, outputs mapped back: another draw of the
// same-precision error.
Tensor<double> permuted_baseline(const AttentionInputs& in, const std::vector<int64_t>& ph,
                                 reference::PositionOrder order, reference::DotOrder dot) {
  const int64_t d = in.q.dim(1), hd = d / in.heads;
  auto permute = [&](const Tensor<float>& m) {
    Tensor<float> r = m;
    for (int64_t row = 0; row < m.dim(0); ++row)
      for (int64_t c = 0; c < d; ++c)
        r.data[row * d + c] = m.data[row * d + c / hd * hd + ph[c % hd]];
    return r;
  };
  AttentionInputs q = in;
  q.q = permute(in.q), q.keys = permute(in.keys), q.values = permute(in.values);
  const Tensor<double> o = reference::attention_baseline(q, order, dot);
  Tensor<double> back = o;
  for (int64_t row = 0; row < o.dim(0); ++row)
    for (int64_t c = 0; c < d; ++c)
      back.data[row * d + c / hd * hd + ph[c % hd]] = o.data[row * d + c];
  return back;
}

}  // namespace

AttentionReference run_attention_reference(const AttentionInputs& in) {
  AttentionReference r{reference::attention_truth(in), reference::attention_baseline(in)};
  const int64_t hd = in.q.dim(1) / in.heads;
  using reference::DotOrder, reference::PositionOrder;
  // A token's row holds one independent error draw per head (a head's outputs share its softmax
  // weights, and a near one-hot softmax hangs on one or two score roundings), so the runs are
  // counted in heads. Shuffled runs alternate pairwise and sequential dot products.
  constexpr PositionOrder kPositions[] = {PositionOrder::reversed, PositionOrder::rotated,
                                          PositionOrder::given};
  const auto orders = baseline_orders(hd, in.heads);
  for (size_t k = 0; k < orders.size(); ++k)
    keep_farthest(r.baseline,
                  permuted_baseline(in, orders[k], kPositions[k % 3],
                                    k > 2 && k % 2 ? DotOrder::pairwise : DotOrder::sequential),
                  r.truth);
  // And one with pairwise dot products in the given order: few terms per score (small heads)
  // make sequential draws alone an unrepresentative sample of the same-precision error.
  keep_farthest(r.baseline,
                reference::attention_baseline(in, PositionOrder::given, DotOrder::pairwise),
                r.truth);
  return r;
}

std::vector<TensorCheck> compare_attention(const AttentionReference& ref,
                                           const AttentionOutputs& out, ActDType act) {
  const OutDType dt = act == ActDType::f32 ? OutDType::F32 : OutDType::BF16;
  return {{"o", compare_to_truth(ref.truth.span(), ref.baseline.span(), as_doubles(out.o), dt,
                                 ref.truth.dim(1))}};
}

}  // namespace tandem
