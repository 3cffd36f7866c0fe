#pragma once
// The tiny model's attention over its compressed, quantized, sparse KV cache (DESIGN 5.5, V4.1's
// layer mix: core/model_shape.hpp), built from the components' references and written to read
// like the math. Per block and chunk of tokens:
//   window owners (window-only blocks and kv sources): each token's v41_window record;
//   kv sources (ratio r > 0): the compressor, one decode step per token; an entry per r tokens;
//   index sources: index keys of the source's new entries (their own Wk over its latents), the
//     chunk's index queries (RoPE, MXFP4), scores over the visible keys and top-k;
//   every block: queries (RoPE) -> sparse attention with per-head sinks over the window (the
//     newest `window` positions) and the selection (the last index source's, over the source's
//     entries) -> the output projection.
// The cache is kept per position and per entry (the window's ring is the newest `window` of
// them), so a rollback truncates it and a chunked run builds it bit for bit as one run does.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
#include "core/model_config.hpp"
#include "core/tensor.hpp"
#include "problem/kvcache.hpp"
#include "problem/model.hpp"
#include "reference/residual.hpp"  // Vec

namespace tandem::reference {

// Taps of another run (cases/model_case passes the optimized model's) that a run reads in place
// of its own values, so that every tap after them is compared given the same stored inputs:
//   ".records" (bytes): the records replace the run's own (a value within a rounding of a code
//     boundary encodes either way in two correct runs; each record is checked against the stored
//     values it encodes, and those against the truth);
//   ".q_proj", ".q", ".o" (the query projection as the RoPE kernel reads it, the queries and the
//     attention output, stored bf16): an element replaces the run's own when it is within one
//     bf16 step of its rounding (the other correct rounding).
using ForcedTaps = std::map<std::string, Tensor<float>, std::less<>>;
using TapSink = std::function<void(std::string, Tensor<double>)>;

// The rounding of stored activations: none in the truth, bf16 where the kernels store bf16.
template <class S>
using ActOf = std::conditional_t<std::is_same_v<S, double>, double, bf16>;

// Taps `values` as `name`, then replaces each element by the forced tap's where that is a bf16
// value within one bf16 step of the element's own rounding (ForcedTaps): the same sign, bit
// patterns at most one apart.
template <class S>
void tap_and_snap(const std::string& name, Tensor<S>& values, const TapSink& tap,
                  const ForcedTaps* forced);

// The records [rows, record bytes] of format f encoding the rows of `stored` (the forced
// "name.records", if given and of that shape, in their place); taps the values as `name`, then
// the records as "name.records".
template <class S>
Tensor<uint8_t> tap_records(const std::string& name, const Tensor<S>& stored, KvFormat f,
                            const TapSink& tap, const ForcedTaps* forced);

// The released attention's query and output LoRAs (core/attention_lora.hpp) in scalar S.
template <class S>
struct LoraMats {
  Mat<S> wq_a, wq_b, wo_a, wo_b;  // [R_q, d], [H x 512, R_q], [G x R_o, H / G x 512], [d, G x R_o]
  Vec<S> q_norm;                  // [R_q]
};
template <class S>
LoraMats<S> lora_mats(const ModelWeights::Attention& w);
// The queries for the rows y: the query latent RMSNorm(W_qa y) with its gain, tapped
// "name.q_latent" (also the indexer's input).
template <class S>
std::vector<Vec<S>> query_latent(const LoraMats<S>& w, const std::vector<Vec<S>>& y, double eps,
                                 const std::string& name, const TapSink& tap);
// W_qb of the latent with every head RMS-normalised on its own, without a gain: [T, heads, 512]
// as the RoPE kernel reads it ("name.q_proj", snapped: see ForcedTaps).
template <class S>
Tensor<S> head_queries(const LoraMats<S>& w, const std::vector<Vec<S>>& latent, int64_t heads,
                       double eps, const std::string& name, const TapSink& tap,
                       const ForcedTaps* forced);
// The grouped output LoRA of the attention output o [T, heads, 512]: group g's heads through
// its rows of W_oa ("name.o_latent" [T, groups x o_rank]), then W_ob: a [d] row per token.
template <class S>
std::vector<Vec<S>> attention_output(const LoraMats<S>& w, const Tensor<S>& o, int groups,
                                     const std::string& name, const TapSink& tap);

template <class S>
class ModelCache {
 public:
  ModelCache(const ModelConfig& m, std::vector<ModelWeights::Attention> w);

  // Block b's attention output for the chunk y (one [d] row per token, at positions start, ...),
  // its taps "block{b}.attn.*" (problem/model.hpp) through `tap`; `forced`: see ForcedTaps.
  std::vector<Vec<S>> attend(int b, const std::vector<Vec<S>>& y, int64_t start, const TapSink& tap,
                             const ForcedTaps* forced);
  void rollback(int64_t length);
  // Every block's own cache in block order: window records, the compressor's state, the
  // entries, the index keys (bytes and fp32 values as doubles).
  std::vector<double> snapshot() const;

 private:
  struct Owned {                                   // what block b keeps (by its roles)
    std::vector<std::vector<uint8_t>> window;      // [positions] v41_window records
    std::vector<KvCompressState> states;           // [positions] the state after each position
    std::vector<std::vector<uint8_t>> entries;     // [entries] v41_fp4 records
    std::vector<std::vector<float>> latents;       // [entries, 512] pre-RoPE latents
    std::vector<std::vector<uint8_t>> index_keys;  // [entries] idx_mxfp4 records
    Tensor<int32_t> selection;                     // the chunk's selection [T, top-k]
  };

  KvStoreOptions options(KvFormat f, int64_t records) const;
  // Encodes the rows of `stored`, taps the values and the records (the forced ones, if given,
  // replace them) and appends the records to `kept`.
  void keep_records(const std::string& name, const Tensor<S>& stored, KvFormat f,
                    std::vector<std::vector<uint8_t>>& kept, const TapSink& tap,
                    const ForcedTaps* forced) const;
  void compress(int b, const Tensor<float>& x, int64_t start, const TapSink& tap,
                const ForcedTaps* forced);
  // y: the sublayer input (the head weights' input); latent: the query latent (the index
  // queries').
  void select(int b, const std::vector<Vec<S>>& y, const std::vector<Vec<S>>& latent, int64_t start,
              const TapSink& tap, const ForcedTaps* forced);

  ModelConfig m_;
  std::vector<ModelWeights::Attention> w_;
  std::vector<Owned> owned_;  // [blocks]
};

}  // namespace tandem::reference
