#include "sim/kvcache_traffic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace tandem::sim {
namespace {

constexpr int A = int(Traffic::activation), Wt = int(Traffic::weight),
              C = int(Traffic::coefficient), K = int(Traffic::kv_cache);
constexpr uint64_t kF32 = 4, kBf16 = 2;

LaunchCounts launch(const char* kernel, const std::string& variant) {
  return {launch_name(kernel, ActDType::bf16, variant)};
}

// The record pipeline's bytes for one record (finish_record_warp): the norm weight, the RoPE
// row (cos and sin of 32 pairs), the latent (compressors) and stored values, the record.
void add_record(LaunchCounts& l, KvFormat format, bool latent) {
  const KvFormatInfo f = kv_format_info(format);
  l.read[Wt] += uint64_t(f.normed) * kF32;
  l.read[C] += uint64_t(kKvRopeDims) * kF32;
  l.written[A] += uint64_t(f.dims()) * kBf16 * (latent ? 2 : 1);
  l.written[K] += uint64_t(f.record_bytes());
}

// One token's projections (project_token): its x row, the Wkv (and Wgate, ape) rows, a and b.
void add_projection(LaunchCounts& l, const KvCompressor& c, int64_t d) {
  const uint64_t W = uint64_t(c.width()), gates = c.gated() ? 2 : 1;
  l.read[A] += uint64_t(d) * kBf16;
  l.read[Wt] += gates * W * uint64_t(d) * kF32 + (c.ape ? W * kF32 : 0);
  l.written[K] += gates * W * kF32;
}

// One entry's pooling (pool_channel over D channels): a (and b) of every slot read; with overlap
// the previous group's slots unless `first_prefill_entry` (entry 0 of a prefill reads none).
void add_pooling(LaunchCounts& l, const KvCompressor& c, bool first_prefill_entry) {
  const uint64_t D = uint64_t(c.dims());
  if (!c.gated()) {
    l.read[K] += D * kF32;
    return;
  }
  const uint64_t slots = uint64_t(c.ratio) * (c.overlap && !first_prefill_entry ? 2 : 1);
  l.read[K] += slots * D * 2 * kF32;
}

}  // namespace

LaunchLog predict_kv_quantize(KvFormat format, int64_t rows, Traffic records) {
  const KvFormatInfo f = kv_format_info(format);
  LaunchCounts l = launch("kv_quantize", f.name);
  l.read[A] = uint64_t(rows) * f.dims() * kBf16;
  l.read[C] = uint64_t(rows) * sizeof(int32_t);
  l.written[int(records)] += uint64_t(rows) * f.record_bytes();
  return {l};
}

LaunchLog predict_kv_window_store(KvFormat format, int64_t tokens, int64_t d) {
  const KvFormatInfo f = kv_format_info(format);
  LaunchCounts l = launch("kv_window_store", f.name);
  for (int64_t t = 0; t < tokens; ++t) {
    l.read[A] += uint64_t(d) * kBf16;
    l.read[Wt] += uint64_t(f.dims()) * uint64_t(d) * kF32;
    add_record(l, format, false);
  }
  return {l};
}

LaunchLog predict_kv_compress(const KvCompressor& c, int64_t tokens, int64_t d, bool decode,
                              int64_t pos) {
  const uint64_t W = uint64_t(c.width()), R = uint64_t(c.state_rows());
  const uint64_t gates = c.gated() ? 2 : 1;
  if (decode) {
    LaunchCounts l = launch("kv_compress_decode", c.name);
    add_projection(l, c, d);
    if (kv_decode_emits(pos, c.ratio)) {
      add_pooling(l, c, false);
      add_record(l, c.format, true);
      // The group's rows move to the previous group's (overlap), then are emptied.
      const uint64_t group = uint64_t(c.ratio) * W * kF32 * gates;
      if (c.overlap) l.read[K] += group, l.written[K] += group;
      l.written[K] += group;
    }
    return {l};
  }
  LaunchCounts project = launch("kv_compress_project", c.name);
  for (int64_t t = 0; t < tokens; ++t) add_projection(project, c, d);
  LaunchCounts pool = launch("kv_compress_pool", c.name);
  const int64_t entries = kv_entries(tokens, c.ratio);
  for (int64_t j = 0; j < entries; ++j) {
    add_pooling(pool, c, j == 0);
    add_record(pool, c.format, true);
  }
  // The state block: every row written; the rows holding a token read from the scratch.
  const int64_t partial = tokens - entries * c.ratio;
  const int64_t held = partial + (c.overlap && entries > 0 ? c.ratio : 0);
  pool.written[K] += R * W * kF32 * gates;
  pool.read[K] += uint64_t(held) * W * kF32 * gates;
  return {project, pool};
}

LaunchLog predict_index_key_store(KvFormat format, int64_t keys) {
  const KvFormatInfo f = kv_format_info(format);
  LaunchCounts l = launch("index_key_store", f.name);
  for (int64_t j = 0; j < keys; ++j) {
    l.read[A] += uint64_t(kKvMainDims) * kBf16;
    l.read[Wt] += uint64_t(f.dims()) * kKvMainDims * kF32;
    add_record(l, format, false);
  }
  return {l};
}

namespace {

// `records` records of `format` in whole pages; what the pages hold beyond them goes to padding.
int64_t paged(KvFormat format, int64_t records, int64_t page_size, int64_t& padding) {
  const KvPageLayout l{kv_format_info(format), page_size};
  const int64_t pages = (records + page_size - 1) / page_size;
  padding += pages * l.page_bytes() - records * kv_format_info(format).record_bytes();
  return pages * l.page_bytes();
}

}  // namespace

KvSequenceBytes kv_sequence_bytes(const KvCompressor& main, std::optional<KvFormat> index_format,
                                  bool index_compressor, KvFormat window_format, int window,
                                  int64_t tokens, int64_t page_size) {
  auto state = [](const KvCompressor& c) {
    return c.gated() ? int64_t(c.state_rows()) * c.width() * int64_t(kF32) * 2 : 0;
  };
  KvSequenceBytes b;
  const int64_t entries = kv_entries(tokens, main.ratio);
  b.compressed = paged(main.format, entries, page_size, b.padding);
  if (index_format) b.index_keys = paged(*index_format, entries, page_size, b.padding);
  b.window = paged(window_format, std::min<int64_t>(tokens, window), page_size, b.padding);
  b.states = state(main);
  if (index_format && index_compressor) b.states += state(v4_csa_index_compressor(*index_format));
  return b;
}

namespace {

// A release's cache of one ratio as the compressor that fills it: V4 CSA r = 4 with its
// index-key compressor when it has index keys, HCA r = 128, V4.1 r = 2 / r = 1 with index keys
// from the main latents; and its window record (model1 or v41_window by size).
struct ReleaseCache {
  KvCompressor compressor;
  std::optional<KvFormat> index;
  bool index_compressor = false;
  KvFormat window = KvFormat::v41_window;
};

KvFormat window_format(const ReleaseConfig& r) {
  return r.window_record_bytes == kv_format_info(KvFormat::model1).record_bytes()
             ? KvFormat::model1
             : KvFormat::v41_window;
}

ReleaseCache release_cache(const ReleaseConfig& r, const KvCacheLayers& k) {
  ReleaseCache c;
  c.window = window_format(r);
  c.compressor = k.ratio == 4     ? v4_csa_compressor()
                 : k.ratio == 128 ? v4_hca_compressor()
                                  : v41_compressor(k.ratio);
  c.compressor.ratio = k.ratio;
  for (KvFormat f : {KvFormat::idx_mxfp4, KvFormat::idx_fp8})
    if (k.index_key_bytes == kv_format_info(f).record_bytes()) c.index = f;
  c.index_compressor = c.compressor.format == KvFormat::model1 && c.index;
  return c;
}

}  // namespace

KvSequenceBytes release_sequence_bytes(const ReleaseConfig& r, int64_t tokens, int64_t page_size) {
  KvSequenceBytes total;
  auto add = [&](const KvSequenceBytes& b, int layers) {
    total.compressed += layers * b.compressed, total.index_keys += layers * b.index_keys;
    total.window += layers * b.window, total.states += layers * b.states;
    total.padding += layers * b.padding;
  };
  for (const KvCacheLayers& k : r.kv_caches) {
    if (k.ratio == 0) {  // a window ring only
      KvSequenceBytes ring;
      ring.window =
          paged(window_format(r), std::min<int64_t>(tokens, r.window), page_size, ring.padding);
      add(ring, k.layers);
      continue;
    }
    const ReleaseCache c = release_cache(r, k);
    add(kv_sequence_bytes(c.compressor, c.index, c.index_compressor, c.window, r.window, tokens,
                          page_size),
        k.layers);
  }
  return total;
}

int64_t KvDecodeRead::total() const { return window + selected + index_scan + states; }

std::vector<KvDecodeRead> release_decode_reads(const ReleaseConfig& r, int64_t tokens) {
  const auto cache_of = [&](int ratio) {
    return *std::find_if(r.kv_caches.begin(), r.kv_caches.end(),
                         [&](const KvCacheLayers& k) { return k.ratio == ratio; });
  };
  std::vector<KvDecodeRead> rows;
  for (const AttentionLayers& a : r.attention) {
    KvDecodeRead row{fmt::format("r={} {}", a.ratio, kv_selection_name(a.selection)), a.layers};
    const int64_t L = a.layers;
    row.window = L * std::min<int64_t>(tokens, r.window) * r.window_record_bytes;
    if (a.ratio > 0) {
      const KvCacheLayers k = cache_of(a.ratio);
      const int64_t entries = kv_entries(tokens, a.ratio);
      // The kept blocks' entries: all when every block is kept, else keep - 1 full blocks and
      // the newest (pinned), which may be partial.
      const int64_t B = r.index_candidate_block, blocks = B > 0 ? (entries + B - 1) / B : 0;
      const int64_t candidates =
          blocks <= r.index_candidate_blocks
              ? entries
              : (r.index_candidate_blocks - 1) * B + entries - (blocks - 1) * B;
      const int64_t top_k = r.index_top_k;
      int64_t selected = 0, scanned = 0;
      switch (a.selection) {
        case KvSelection::window:
          break;
        case KvSelection::all:
          selected = entries;
          break;
        case KvSelection::scan:
        case KvSelection::candidates:
          selected = std::min(top_k, entries), scanned = entries;
          break;
        case KvSelection::reuse:
          selected = std::min(top_k, entries);
          break;
        case KvSelection::in_candidates:
          selected = std::min(top_k, candidates), scanned = candidates;
          break;
      }
      row.selected = L * selected * k.record_bytes;
      row.index_scan = L * scanned * k.index_key_bytes;
    }
    rows.push_back(row);
  }
  for (const KvCacheLayers& k : r.kv_caches) {
    if (k.ratio < 2) continue;  // no compressor state: window-only, or r = 1 (one token a group)
    const ReleaseCache c = release_cache(r, k);
    KvDecodeRead row{fmt::format("r={} compressor states", k.ratio), k.layers};
    // The step completing an entry (every r-th) reads the whole state (kv_compress_decode), the
    // others none: per step, state / r (exact: a state holds c r rows of c D fp32 a and b).
    row.states =
        k.layers *
        kv_sequence_bytes(c.compressor, c.index, c.index_compressor, c.window, r.window, tokens, 1)
            .states /
        k.ratio;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace tandem::sim
