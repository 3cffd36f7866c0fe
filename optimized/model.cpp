#include "optimized/model.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"
#include "core/vision_config.hpp"
#include "optimized/block_runner.hpp"
#include "optimized/dense.hpp"
#include "optimized/engram.hpp"
#include "optimized/indexer.hpp"
#include "optimized/kvcache.hpp"
#include "optimized/moe.hpp"
#include "optimized/residual.hpp"
#include "optimized/sparse_attn.hpp"
#include "optimized/vision.hpp"

namespace tandem {

class ModelRunner : BlockRunner {
 public:
  ModelRunner(const ModelConfig& m, const ModelWeights& w, const RunOptions& opt)
      : BlockRunner(m.residual, opt), m_(m), w_(w), d_(m.residual.d) {
    for (const ModelWeights::Block& b : w.blocks) experts_.emplace_back(b.w_in, b.w_out);
  }

  ModelRun append(const std::vector<int32_t>& ids, const Tensor<float>& visual) {
    if (faulted_)
      throw_bad_input(
          "optimized model: a kernel fault left this sequence's cache partly "
          "updated; start a new sequence");
    out_ = {}, is_image_.clear(), ids_.clear(), compressed_.clear();
    embed(ids, visual);  // the chunk's validation (bad input leaves the sequence as it was)
    // From here every launch's input is an earlier launch's output (the weights and options
    // were checked by OptimizedModel): a launch refusing one is a fault of the kernels.
    try {
      forward();
    } catch (const BadInput& e) {
      faulted_ = true;
      const std::string last = out_.taps.empty() ? "embed" : out_.taps.back().name;
      throw KernelFault(last, fmt::format("optimized model: a kernel output after tap '{}' was "
                                          "refused by the next launch: {}",
                                          last, e.what()));
    } catch (...) {
      faulted_ = true;
      throw;
    }
    for (int64_t c : compressed_) history_.push_back(c);
    if (history_.size() > 3) history_.erase(history_.begin(), history_.end() - 3);
    length_ += int64_t(ids.size());
    return std::move(out_);
  }

  int64_t length() const { return length_; }

 private:
  // A block's part of the sequence's cache (by its roles).
  struct Cache {
    Tensor<uint8_t> window_pool;  // [ring_slots_ records] v41_window: window owners
    Tensor<uint8_t> comp_pool;    // v41_fp4 entries, entry j in slot j: kv sources
    Tensor<float> latent;         // [entries, 512] their pre-RoPE latents
    KvCompressState state;        // the compressor's, after the last position
    Tensor<uint8_t> key_pool;     // idx_mxfp4 keys of the source's entries: index sources
    int64_t keys = 0;             // entries keyed so far
    Tensor<int32_t> selection;    // the chunk's [T, top-k]
  };
  static int64_t entries(const Cache& c) { return c.latent.shape.empty() ? 0 : c.latent.dim(0); }

  void forward() {
    for (int b = 0; b < m_.shape.blocks; ++b) {
      const std::string blk = "block" + std::to_string(b);
      for (const auto& e : w_.engram)
        if (e.block == b) engram(e, blk + ".engram.x");
      const ModelWeights::Block& k = w_.blocks[size_t(b)];
      boundary(k.attn_site, blk + ".attn");
      attention(b, k.attn);
      boundary(k.ffn_site, blk + ".moe");
      moe(b, blk + ".moe");
    }
    ResidualSiteWeights head;
    head.norm_w = w_.head_norm_w;
    boundary(head, "head");
    tap("logits", unembed(w_.unembed));
  }

  void embed(const std::vector<int32_t>& ids, const Tensor<float>& visual) {
    const int64_t T = int64_t(ids.size()), V = w_.embed.rows;
    if (T < 1) throw_bad_input("model prompt: no tokens");
    // The first chunk sizes the window's ring: a later chunk must not overwrite a record that
    // one of its own queries reads.
    if (length_ == 0) ring_slots_ = std::max<int64_t>(T, m_.shape.window);
    if (length_ > 0 && T > ring_slots_ - m_.shape.window + 1)
      throw_bad_input(
          "model prompt: a chunk of {} tokens at position {} would overwrite window "
          "records its own queries read (the ring holds {} slots, the window {}: at "
          "most {} tokens a chunk after the first)",
          T, length_, ring_slots_, m_.shape.window, ring_slots_ - m_.shape.window + 1);
    const int64_t images = std::count(ids.begin(), ids.end(), kImage);
    if (visual.shape != Shape{images, d_})
      throw_bad_input("model prompt: visual embeddings must be [{} IMAGE positions, {}]", images,
                      d_);
    require_finite(visual, "model prompt", "visual");
    Tensor<float> e({T, d_});
    int64_t image = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = ids[size_t(t)];
      if (id >= V || (id < 0 && (id > kStart || id < kEnd)))
        throw_bad_input("model prompt: token {} is {}, outside [0, {}) and not an image marker", t,
                        id, V);
      if (id >= 0)
        w_.embed.rows_into(id, 1, e.ptr() + t * d_);
      else
        std::copy_n(
            id == kImage ? visual.ptr() + image++ * d_ : w_.special.ptr() + (kStart - id) * d_, d_,
            e.ptr() + t * d_);
      is_image_.push_back(id < 0);  // the image's layout routes with the vision-language biases
      ids_.push_back(id);           // a hash block's text tokens take their id's table row
      // Engram: no lookup at image positions (look-back stops there).
      compressed_.push_back(id < 0 ? -2 : w_.compression_map[size_t(id)]);
    }
    tap("embed", e);
    Tensor<float> x({T, 4, d_});
    for (int64_t t = 0; t < T; ++t)
      for (int s = 0; s < 4; ++s) std::copy_n(e.ptr() + t * d_, d_, x.ptr() + (t * 4 + s) * d_);
    start_chunk(std::move(x));
  }

  void engram(const ModelWeights::EngramLayer& e, const std::string& name) {
    if (!f_.data.empty()) boundary(ResidualSiteWeights{}, "");
    EngramInputs in;
    in.cfg = m_.engram;
    in.tables = e.tables;
    in.compressed = compressed_;
    in.history = history_;
    in.compressed_pad = w_.compression_map[size_t(m_.engram.pad_id)];
    in.table = e.table;
    in.h = x_;
    in.wkv = e.wkv, in.gate_w = e.gate_w;
    EngramOutputs o = run_engram_layer(in, opt_);
    log(o.launches);
    x_ = std::move(o.h_out);
    tap(name, x_);
  }

  // Block b's attention over the compressed cache (reference/model_cache.hpp) for the chunk at
  // positions start.. : the window's records into the ring, the compressor's entries (prefill
  // kernels from position 0, else a decode step per token with the state carried), the new
  // entries' index keys, queries and top-k, then sparse attention and the output projection.
  // Each store launch writes a pool of its own; its records join the sequence's (host
  // bookkeeping, as a serving stack's page allocator: no kernel bytes).
  void attention(int b, const ModelWeights::Attention& w) {
    const ModelShape& s = m_.shape;
    const int64_t T = y_.dim(0), H = s.heads, start = length_;
    const int source = s.kv_source(b);
    if (source == b) {
      store_window(caches_[size_t(b)], w, start);
      if (s.compress_ratios[size_t(b)] > 0) compress(b, w, start);
    }
    const Tensor<float> latent = query_latent(w);
    if (s.is_index_source(b)) select(b, w, latent, start);
    const Cache& cache = caches_[size_t(source)];
    SparseAttnInputs in;
    in.heads = int(H), in.start = start;
    in.q = queries(w, latent, H, start);
    in.sinks = w.sinks;
    in.window = options(KvFormat::v41_window, ring_slots_), in.window_pool = cache.window_pool;
    in.window_idx = model_window_indices(start, T, s.window, ring_slots_);
    in.n_comp = entries(cache);
    in.comp = options(KvFormat::v41_fp4, in.n_comp);
    in.comp_pool = cache.comp_pool.data.empty()  // window-only: an empty pool (never read)
                       ? Tensor<uint8_t>({kv_pool_bytes(in.comp)}, kKvPoison)
                       : cache.comp_pool;
    in.page_table = model_page_table(in.n_comp);
    const int selector = s.index_source(b);
    in.comp_idx = selector < 0 ? Tensor<int32_t>({T, 0}) : caches_[size_t(selector)].selection;
    attend(in, w, s.lora.o_groups);
  }

  // The chunk's window records, position p into ring slot p mod ring_slots_.
  void store_window(Cache& mine, const ModelWeights::Attention& w, int64_t start) {
    const int64_t T = y_.dim(0);
    KvWindowInputs win;
    win.store = options(KvFormat::v41_window, ring_slots_);  // whole pages: the ring's first slots
    win.window = int(ring_slots_), win.start = start;
    win.x = y_, win.wkv = w.window_wkv, win.norm_w = w.window_norm;
    KvStoreOutputs o = run_kv_window_store(win, opt_);
    log(o.launches);
    std::vector<int64_t> slots;
    for (int64_t t = 0; t < T; ++t) slots.push_back((start + t) % ring_slots_);
    keep_records(mine.window_pool, ring_slots_, o.pool, KvFormat::v41_window, slots);
    tap_records(pending_ + ".window", o.stored, mine.window_pool, KvFormat::v41_window, slots);
  }

  // A kv source's new entries: the prefill kernels from position 0, else one decode step per
  // token (an entry where a group completes).
  void compress(int b, const ModelWeights::Attention& w, int64_t start) {
    Cache& mine = caches_[size_t(b)];
    const int64_t T = y_.dim(0), before = entries(mine);
    KvCompressInputs c;
    c.comp = v41_compressor(m_.shape.compress_ratios[size_t(b)]);
    c.wkv = w.comp_wkv, c.wgate = w.comp_wgate, c.norm_w = w.comp_norm;
    std::vector<float> stored, latent;
    auto run = [&](int64_t first_entry) {
      KvStoreOutputs e = run_kv_compress(c, opt_);
      log(e.launches);
      const int64_t n = e.stored.shape.empty() ? 0 : e.stored.dim(0);
      keep_records(mine.comp_pool, first_entry + n, e.pool, KvFormat::v41_fp4,
                   slot_range(first_entry, first_entry + n));
      stored.insert(stored.end(), e.stored.data.begin(), e.stored.data.end());
      latent.insert(latent.end(), e.latent.data.begin(), e.latent.data.end());
      mine.state = std::move(e.state);
    };
    if (start == 0) {
      c.store = options(KvFormat::v41_fp4, kv_entries(T, c.comp.ratio));
      c.x = y_;
      run(0);
    } else {
      c.decode = true;
      for (int64_t t = 0; t < T; ++t) {
        c.pos = start + t, c.state = mine.state;
        c.store = options(KvFormat::v41_fp4, c.pos / c.comp.ratio + 1);
        c.x =
            Tensor<float>({1, d_}, std::vector<float>(y_.ptr() + t * d_, y_.ptr() + (t + 1) * d_));
        run(before + int64_t(stored.size()) / kKvMainDims);
      }
    }
    const int64_t n = int64_t(stored.size()) / kKvMainDims;
    mine.latent.data.insert(mine.latent.data.end(), latent.begin(), latent.end());
    mine.latent.shape = {before + n, kKvMainDims};
    tap_records(pending_ + ".entries", Tensor<float>({n, kKvMainDims}, std::move(stored)),
                mine.comp_pool, KvFormat::v41_fp4, slot_range(before, before + n));
  }

  // An index source's selection over its kv source's entries: index keys of the entries new
  // since its last chunk, the chunk's index queries (RoPE, MXFP4 records), scores, top-k.
  void select(int b, const ModelWeights::Attention& w, const Tensor<float>& latent, int64_t start) {
    const ModelShape& s = m_.shape;
    const int64_t T = y_.dim(0), ih = s.index_heads;
    const Cache& source = caches_[size_t(s.kv_source(b))];
    Cache& mine = caches_[size_t(b)];
    const int64_t N = entries(source);
    if (N > mine.keys) {
      IndexKeyInputs keys;
      keys.store = options(KvFormat::idx_mxfp4, N);
      keys.ratio = s.compress_ratios[size_t(b)];
      keys.first = mine.keys;
      keys.latent = Tensor<float>({N - mine.keys, kKvMainDims},
                                  std::vector<float>(source.latent.ptr() + mine.keys * kKvMainDims,
                                                     source.latent.ptr() + N * kKvMainDims));
      keys.wk = w.index_wk, keys.norm_w = w.index_norm;
      KvStoreOutputs k = run_index_key_store(keys, opt_);
      log(k.launches);
      const std::vector<int64_t> slots = slot_range(mine.keys, N);
      keep_records(mine.key_pool, N, k.pool, KvFormat::idx_mxfp4, slots);
      tap_records(pending_ + ".index_keys", k.stored, mine.key_pool, KvFormat::idx_mxfp4, slots);
      mine.keys = N;
    }
    KvQuantizeInputs q;
    q.store = options(KvFormat::idx_mxfp4, T * ih);
    q.traffic = Traffic::activation;  // the chunk's queries, read by index_logits alone
    q.values = rope(dense(latent, w.index_wq), ih, kIndexKeyDims, start);
    q.values.shape = {T * ih, kIndexKeyDims};
    q.slots = Tensor<int32_t>({T * ih});
    for (int64_t i = 0; i < T * ih; ++i) q.slots.data[size_t(i)] = int32_t(i);
    KvStoreOutputs qr = run_kv_quantize(q, opt_);
    log(qr.launches);
    tap_records(pending_ + ".index_q", q.values, qr.pool, KvFormat::idx_mxfp4,
                slot_range(0, T * ih));
    const Tensor<float> weights = dense(y_, w.index_w);
    mine.selection = Tensor<int32_t>({T, s.index_topk}, -1);
    if (N > 0) {
      IndexLogitsInputs li;
      li.keys = options(KvFormat::idx_mxfp4, N), li.key_pool = mine.key_pool;
      li.page_table = model_page_table(N);
      li.n_keys = N, li.ratio = s.compress_ratios[size_t(b)], li.start = start;
      li.heads = int(ih);
      li.weight_scale =
          release_index_weight_scale(int(ih));  // as the release scales weights_proj(x)
      const int64_t bytes = T * ih * kv_format_info(KvFormat::idx_mxfp4).record_bytes();
      li.q_records = Tensor<uint8_t>(
          {bytes}, std::vector<uint8_t>(qr.pool.data.begin(), qr.pool.data.begin() + bytes));
      li.w = weights;
      const IndexLogitsOutputs scores = run_index_logits(li, opt_);
      log(scores.launches);
      TopkOutputs top = run_topk_select({scores.scores, scores.lengths, s.index_topk}, opt_);
      log(top.launches);
      mine.selection = std::move(top.indices);
    }
    tap(pending_ + kSelectionSuffix, tensor_cast<float>(mine.selection));
  }

  // Slots first..last-1.
  static std::vector<int64_t> slot_range(int64_t first, int64_t last) {
    std::vector<int64_t> slots;
    for (int64_t j = first; j < last; ++j) slots.push_back(j);
    return slots;
  }

  // The records of `slots` from a launch's pool into the sequence's, grown (poisoned pages
  // appended: a page's slots keep their bytes) to room for `records`.
  void keep_records(Tensor<uint8_t>& kept, int64_t records, const Tensor<uint8_t>& written,
                    KvFormat f, const std::vector<int64_t>& slots) const {
    const int64_t bytes = kv_pool_bytes(options(f, records));
    if (kept.size() < bytes) kept.data.resize(size_t(bytes), kKvPoison), kept.shape = {bytes};
    const KvPageLayout at{kv_format_info(f), kModelKvPage};
    std::vector<uint8_t> row(size_t(at.f.record_bytes()));
    for (int64_t slot : slots) {
      copy_record_out(at, written.ptr(), slot, row.data());
      copy_record_in(at, row.data(), slot, kept.ptr());
    }
  }

  void moe(int b, const std::string& name) {
    const ModelWeights::Block& k = w_.blocks[size_t(b)];
    MoeGateInputs gate;
    gate.logits = dense(y_, k.router);
    gate.is_image = is_image_;
    gate.bias_text = k.bias_text, gate.bias_vl = k.bias_vl;
    gate.top_k = m_.vision.top_k;
    if (k.tid2eid.size() > 0) gate.tid2eid = k.tid2eid, gate.token_ids = ids_;
    const MoeGateOutputs g = run_moe_gate(gate, opt_);
    log(g.launches);
    tap(name + ".experts",
        Tensor<float>(g.experts.shape, {g.experts.data.begin(), g.experts.data.end()}));
    // The routed experts at their gate weights, then the shared one (expert E) at weight 1.
    MoeExpertInputs in{ActDType::f32, y_, g.experts, g.weights, {}, {}};
    append_shared_expert(in.experts, in.weights, int32_t(m_.vision.experts));
    experts_[size_t(b)].bind(in);
    const MoeExpertOutputs o = run_moe_experts(in, opt_);
    log(o.launches);
    f_ = o.f;
    tap(name + ".f", f_);
  }

  const ModelConfig m_;
  const ModelWeights& w_;
  int64_t d_;
  // The sequence: its length, the window ring's slots, the last compressed ids (Engram's
  // look-back into the next chunk), every block's cache.
  int64_t length_ = 0, ring_slots_ = 0;
  bool faulted_ = false;  // a launch failed mid-chunk: the caches are partly updated
  std::vector<int64_t> history_;
  std::vector<Cache> caches_ = std::vector<Cache>(size_t(m_.shape.blocks));
  std::vector<SeededExperts> experts_;  // per block
  // The chunk being appended.
  std::vector<uint8_t> is_image_;
  std::vector<int32_t> ids_;  // the chunk's token ids (image positions: their layout marker)
  std::vector<int64_t> compressed_;
};

namespace {

// The image path's launches on validated patches: patch embedding, unshuffle, aligner.
ImageRun embed_image(const ModelWeights& w, const Tensor<float>& patches, const RunOptions& opt) {
  const int64_t P = w.image.patch_w.dim(1), C = w.image.patch_w.dim(0);
  ImageRun r;
  auto dense = [&](const Tensor<float>& x, const Tensor<float>& W, const Tensor<float>& b,
                   bool gelu) {
    DenseOutputs o = run_dense_rows({ActDType::f32, x, W, b, gelu}, opt);
    r.launches.insert(r.launches.end(), o.launches.begin(), o.launches.end());
    return std::move(o.y);
  };
  const int64_t h = patches.dim(0), gw = patches.dim(1);
  Tensor<float> grid = dense(Tensor<float>({h * gw, P}, patches.data), w.image.patch_w, {}, false);
  grid.shape = {h, gw, C};
  r.taps.push_back({"image.grid", grid});
  UnshuffleOutputs u = run_unshuffle(grid, ActDType::f32, opt);
  r.launches.insert(r.launches.end(), u.launches.begin(), u.launches.end());
  r.taps.push_back({"image.tokens", u.tokens});
  const Tensor<float> hidden = dense(u.tokens, w.image.w1, w.image.b1, true);
  r.visual = dense(hidden, w.image.w2, w.image.b2, false);
  r.taps.push_back({"image.embed", r.visual});
  return r;
}

}  // namespace

ImageRun run_image_embedding(const ModelWeights& w, const Tensor<float>& patches,
                             const RunOptions& opt) {
  if (w.image.w1.data.empty()) throw_bad_input("{}", kNoImagePath);
  const int64_t P = w.image.patch_w.dim(1);
  if (patches.shape.size() != 3 || patches.dim(0) < 1 || patches.dim(1) < 1 || patches.dim(2) != P)
    throw_bad_input("model image: patches must be [grid_h >= 1, grid_w >= 1, {}]", P);
  require_finite(patches, "model image", "patches");
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  // From here each launch reads the previous one's output: a launch refusing it is a kernel fault.
  try {
    return embed_image(w, patches, opt);
  } catch (const BadInput& e) {
    throw KernelFault("image", fmt::format("optimized image embedding: a kernel output was "
                                           "refused by the next launch: {}",
                                           e.what()));
  }
}

OptimizedModel::OptimizedModel(const ModelConfig& m, const ModelWeights& w, const RunOptions& opt) {
  const int64_t d = m.residual.d;
  const int64_t E = m.vision.experts, H = m.shape.ffn_hidden;
  const auto experts_are = [&](const std::vector<SeededMatrix>& x, int64_t r, int64_t c) {
    return x.size() == size_t(E + 1) && std::all_of(x.begin(), x.end(), [&](const auto& e) {
             return e.rows == r && e.cols == c;
           });
  };
  const bool blocks_fit = std::all_of(w.blocks.begin(), w.blocks.end(), [&](const auto& b) {
    return experts_are(b.w_in, 2 * H, d) && experts_are(b.w_out, d, H);
  });
  if (w.blocks.size() != size_t(m.shape.blocks) || !blocks_fit || w.embed.cols != d ||
      w.embed.rows != m.engram.vocab || w.unembed.rows != w.embed.rows || w.unembed.cols != d ||
      w.head_norm_w.shape != Shape{d} || w.compression_map.size() != size_t(w.embed.rows) ||
      w.engram.size() != m.engram.layer_ids.size())
    throw_bad_input("model weights: not those of model '{}' ({} blocks, d = {})", m.name,
                    m.shape.blocks, d);
  validate_block_threads(opt, 256, "the residual kernels use ~200 registers per thread");
  runner_ = std::make_unique<ModelRunner>(m, w, opt);
}
OptimizedModel::~OptimizedModel() = default;
OptimizedModel::OptimizedModel(OptimizedModel&&) noexcept = default;
OptimizedModel& OptimizedModel::operator=(OptimizedModel&&) noexcept = default;

ModelRun OptimizedModel::append(const std::vector<int32_t>& ids, const Tensor<float>& visual) {
  return runner_->append(ids, visual);
}
int64_t OptimizedModel::length() const { return runner_->length(); }

ModelRun run_model(const ModelConfig& m, const ModelWeights& w, const std::vector<int32_t>& ids,
                   const Tensor<float>& visual, const RunOptions& opt) {
  return OptimizedModel(m, w, opt).append(ids, visual);
}

}  // namespace tandem
