#pragma once
// Byte model of the KV cache's write kernels (optimized/kvcache.cuh), launch by launch: it must
// equal the emulator's counts exactly. And the cache's persistent and per-sequence bytes
// (DESIGN 5.5) from the record formats.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/release_config.hpp"
#include "problem/kvcache.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

LaunchLog predict_kv_quantize(KvFormat f, int64_t rows, Traffic records = Traffic::kv_cache);
LaunchLog predict_kv_window_store(KvFormat f, int64_t tokens, int64_t d);
// A prefill of T tokens from position 0, or one decode step at `pos` (T = 1).
LaunchLog predict_kv_compress(const KvCompressor& c, int64_t tokens, int64_t d, bool decode,
                              int64_t pos = 0);
LaunchLog predict_index_key_store(KvFormat f, int64_t keys);

// What one sequence of `tokens` tokens keeps in one cache-owning layer: the compressed records
// and index keys (floor(T / r) each, in pages of page_size, page padding included), the window
// ring (min(T, window) records) and the compressor states (fp32 [c r, c D] a and b of every
// compressor with r > 1: the main one, and V4's index-key compressor, whose index_format is
// given with index_compressor = true; V4.1's index keys come from the main latents).
struct KvSequenceBytes {
  int64_t compressed = 0, index_keys = 0, window = 0, states = 0, padding = 0;
  int64_t total() const { return compressed + index_keys + window + states; }
};
KvSequenceBytes kv_sequence_bytes(const KvCompressor& main, std::optional<KvFormat> index_format,
                                  bool index_compressor, KvFormat window_format, int window,
                                  int64_t tokens, int64_t page_size);

// The same over a release's cache-owning layers (core/release_config: V4 CSA r = 4 with its
// index-key compressor, HCA r = 128, V4.1 r = 2 / r = 1 with index keys from the latents; a
// window ring in every layer the config lists, model1 or v41_window by its record size).
KvSequenceBytes release_sequence_bytes(const ReleaseConfig& r, int64_t tokens, int64_t page_size);

// What one decode step at context `tokens` reads from a release's cache (DESIGN 5.5, 6), by
// attention kind over its layers (ReleaseConfig::attention): the window (min(T, window) records;
// V4.1's consumers read their source's), the selected entries (min(top-k, floor(T / r)) records;
// HCA all floor(T / r); inside the candidates min(top-k, candidate entries)) and the indexer's
// scan of index keys (index sources and the candidate scorer: every visible key; layers selecting
// inside the candidates: the candidates' keys; reusers none). Then a row per compressing ratio
// r >= 2 for the compressor states its cache-owning layers keep (fp32 a and b): the step that
// completes an entry, every r-th, reads them whole, so a step reads state / r on average.
struct KvDecodeRead {
  std::string kind;  // "r=R selection", or "r=R compressor states"
  int layers = 0;
  int64_t window = 0, selected = 0, index_scan = 0, states = 0;  // bytes, all `layers`
  int64_t total() const;
};
std::vector<KvDecodeRead> release_decode_reads(const ReleaseConfig& r, int64_t tokens);

}  // namespace tandem::sim
