#pragma once
// What the optimized end-to-end model (optimized/model.cpp) and DSpark's drafter
// (optimized/drafter.cpp) share on the host: a chunk's residual streams through mHC sites on the
// residual boundary kernel (V4.1 recipe shift: one residual_single_pass closes a site and opens
// the next), the dense and RoPE launches between them, and the run's taps and launches (named as
// the reference's, problem/model.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "optimized/backend.hpp"
#include "problem/model.hpp"
#include "problem/moe.hpp"
#include "problem/residual.hpp"
#include "problem/sparse_attn.hpp"

namespace tandem {

// A table of seeded experts (the routed ones, then the shared one: [2H, d] and [d, H] each) as the
// experts kernel reads it: every expert generated once when the table fits
// kMoeMaterialisedValues, else a launch's routed ones generated for it in ascending id, the
// routing renumbered into them (the kernel reads the same rows).
class SeededExperts {
 public:
  // The tables must outlive it (a model's or drafter's weights).
  SeededExperts(const std::vector<SeededMatrix>& w_in, const std::vector<SeededMatrix>& w_out);
  SeededExperts(std::vector<SeededMatrix>&&, std::vector<SeededMatrix>&&) = delete;
  // in.w_in and in.w_out for the routing in.experts (renumbered when generated).
  void bind(MoeExpertInputs& in) const;

 private:
  const std::vector<SeededMatrix>* w_in_;
  const std::vector<SeededMatrix>* w_out_;
  Tensor<float> held_in_, held_out_;  // [E + 1, 2H, d], [E + 1, d, H], or empty
};

class BlockRunner {
 protected:
  BlockRunner(const ResidualConfig& cfg, const RunOptions& opt) : cfg_(cfg), opt_(opt) {}

  // A new chunk's streams [T, 4, d]: no site open, the first opens with pre [1, 0, 0, 0].
  void start_chunk(Tensor<float> x);
  // Closes the pending site (when its f is there) and opens `next` (when it has a norm weight),
  // tapping the closed site's state "<site>.x" and the opened site's sublayer input "<name>.y".
  void boundary(const ResidualSiteWeights& next, const std::string& name);
  void tap(std::string name, const Tensor<float>& v);
  void log(const LaunchLog& l);
  // x [T, n_in] times w [n_out, n_in / groups]^T (dense_rows, f32, block-diagonal with groups);
  // w by value: a generated projection moves into the launch's inputs.
  Tensor<float> dense(const Tensor<float>& x, Tensor<float> w, int groups = 1);
  // The logits [T, V] of the open site's y through an unembedding [V, d]: its rows generated (when
  // seeded) and multiplied kUnembedChunkRows at a time, a dense_rows launch each.
  Tensor<float> unembed(const Projection& w);
  // RMSNorm of the rows of u [rows, n] with gain w ([n], or empty: none).
  Tensor<float> rms_norm(Tensor<float> u, Tensor<float> w);
  // [T, heads * dims] -> RoPE'd bf16 queries [T, heads, dims] at positions start..
  Tensor<float> rope(Tensor<float> q, int64_t heads, int64_t dims, int64_t start);
  // The open site's query latent RMSNorm(y W_qa^T) with its gain ("<site>.q_latent"; the index
  // queries read it too).
  Tensor<float> query_latent(const ModelWeights::Attention& w);
  // The queries for sparse attention: latent W_qb^T, every head RMS-normalised without a gain
  // ([T, heads, 512], "<site>.q_proj"), RoPE'd at positions start.. ("<site>.q").
  Tensor<float> queries(const ModelWeights::Attention& w, const Tensor<float>& latent,
                        int64_t heads, int64_t start);
  // Sparse attention over `in` ("<site>.o"), then the grouped output LoRA ("<site>.o_latent")
  // and W_ob: the open site's f ("<site>.f").
  void attend(const SparseAttnInputs& in, const ModelWeights::Attention& w, int groups);
  KvStoreOptions options(KvFormat f, int64_t records) const;
  // The stored values of a launch's new records, then the records' bytes (row i: slots[i]).
  void tap_records(const std::string& name, const Tensor<float>& stored,
                   const Tensor<uint8_t>& pool, KvFormat f, const std::vector<int64_t>& slots);

  const ResidualConfig cfg_;
  const RunOptions opt_;
  Tensor<float> x_;      // [T, 4, d] the streams
  Tensor<float> y_;      // [T, d] the open site's sublayer input
  Tensor<float> f_;      // [T, d] its output, until the site is closed
  Tensor<float> coef_;   // [T, 24] its coefficients (empty before the first site)
  std::string pending_;  // the open site's name
  ModelRun out_;
};

}  // namespace tandem
