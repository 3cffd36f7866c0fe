#pragma once
// topk_select: one block per row of scores, any row length; a row reads only its visible
// entries [0, lengths[t]). A radix select on the scores' order
// keys (problem/indexer.hpp) finds the k-th largest key u* in four passes over the row (8 bits a
// pass: a shared-memory histogram of the keys that share the bits chosen so far, then the bin
// holding the k-th); a fifth pass collects every key above u* and, in index order (a block scan
// per chunk), the lowest-indexed keys equal to u*; a bitonic sort in shared memory orders the
// selection by key descending, then index ascending. Reads are five passes over the visible
// entries whatever their scores, so the byte model is exact. V4.1's candidate_blocks and
// candidate_topk run the same select on other rows: blocks' maxima, and the candidates' entries.
#include "optimized/kernel.cuh"
#include "problem/indexer.hpp"
#include "problem/kv_record.hpp"

namespace tandem::TANDEM_BACKEND_NS {

// ---------------------------------------------------------------- index_logits
// Grid (key blocks, T): a block stages token t's queries, dequantized, in shared memory
// ([heads, 128] floats, and the head weights); each warp takes keys in turn: the lanes dequantize
// four dims each into the warp's row of shared memory (codes in one 2- or 4-byte load per lane,
// the scales loaded once and shuffled), then lane h sums head h's dot over the 128 dims, relu,
// times w[t, h] x weight_scale, and one warp sum gives I[t, j]. Block 0 of a token writes its
// visible length.
inline constexpr int kIndexKeysPerBlock = 64;

template <KvFormat F>
__device__ __forceinline__ void dequantize_index_record_warp(const uint8_t* __restrict__ records,
                                                             const KvPageLayout& at, int64_t slot,
                                                             Traffic traffic,
                                                             float* out /* [128] */) {
  constexpr KvFormatInfo f = kv_format_info(F);
  static_assert(f.dims() == 128 && f.rope == 0, "index keys: 128 quantized dims, 4 per lane");
  const int lane = threadIdx.x % kWarpSize;
  uint32_t codes;  // the lane's four codes
  if constexpr (f.code == KvCode::e2m1)
    codes = ld(reinterpret_cast<const uint16_t*>(records + at.code_at(slot)) + lane, traffic);
  else
    codes = ld(reinterpret_cast<const uint32_t*>(records + at.code_at(slot)) + lane, traffic);
  // Scale words: the first lanes load one 32-bit word each, a lane takes its tile's byte.
  constexpr int kScaleWords = f.scale_bytes() / 4;
  uint32_t word =
      lane < kScaleWords
          ? ld(reinterpret_cast<const uint32_t*>(records + at.scale_at(slot)) + lane, traffic)
          : 0u;
  const int tile = lane * 4 / f.tile;
  word = __shfl_sync(0xffffffffu, word, (tile * f.scale_unit()) / 4);
  const uint32_t bits = f.scale == KvScale::fp32 ? word : (word >> (8 * (tile % 4))) & 0xffu;
  const float s = kv_scale_value(f, bits);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint8_t c = f.code == KvCode::e2m1 ? uint8_t((codes >> (4 * e)) & 0xf)
                                             : uint8_t((codes >> (8 * e)) & 0xff);
    out[lane * 4 + e] = kv_element_value(f, c) * s;
  }
}

// q_records: [T * heads] records; w: [T, heads]; key_pool, page_table: the paged keys;
// scores: [T, n_keys]; lengths: [T]. Dynamic shared memory: [heads * 128 + heads +
// warps * 128] floats.
template <KvFormat F>
__global__ void index_logits(const uint8_t* __restrict__ q_records, const float* __restrict__ w,
                             const uint8_t* __restrict__ key_pool,
                             const int32_t* __restrict__ page_table, int heads, int64_t n_keys,
                             int ratio, int64_t start, int64_t page_size, float weight_scale,
                             float* scores, int32_t* lengths) {
  constexpr int kDims = 128;
  TANDEM_DYNAMIC_SHARED(float, smem);
  float* q = smem;                // [heads, 128]
  float* wt = q + heads * kDims;  // [heads]
  float* keys = wt + heads;       // [warps, 128]
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  const int64_t t = blockIdx.y;
  const int64_t length = visible_entries(start + t, ratio, n_keys);
  if (blockIdx.x == 0 && threadIdx.x == 0) st(lengths + t, int32_t(length), Traffic::coefficient);
  const int64_t first = int64_t(blockIdx.x) * kIndexKeysPerBlock;
  if (first >= length) return;  // the whole block's keys are past this token's view
  const KvPageLayout q_at{kv_format_info(F), int64_t(gridDim.y) * heads};
  // The queries are the chunk's activations (quantized as the keys are), not cache.
  for (int h = warp; h < heads; h += warps)
    dequantize_index_record_warp<F>(q_records, q_at, t * heads + h, Traffic::activation,
                                    q + h * kDims);
  for (int h = threadIdx.x; h < heads; h += blockDim.x)
    wt[h] = ld(w + t * heads + h, Traffic::weight) * weight_scale;
  __syncthreads();
  const KvPageLayout k_at{kv_format_info(F), page_size};
  float* k = keys + warp * kDims;
  const int64_t last = first + kIndexKeysPerBlock < length ? first + kIndexKeysPerBlock : length;
  for (int64_t j = first + warp; j < last; j += warps) {
    int32_t page = lane == 0 ? ld(page_table + j / page_size, Traffic::coefficient) : 0;
    page = __shfl_sync(0xffffffffu, page, 0);
    dequantize_index_record_warp<F>(key_pool, k_at, int64_t(page) * page_size + j % page_size,
                                    Traffic::kv_cache, k);
    __syncwarp();
    float partial = 0.0f;
    for (int h = lane; h < heads; h += kWarpSize) {
      float dot = 0.0f;
      for (int i = 0; i < kDims; ++i) dot += q[h * kDims + i] * k[i];
      partial += wt[h] * (dot > 0.0f ? dot : 0.0f);  // relu; NaN -> 0, as the reference
    }
    const float score = warp_sum(partial);
    if (lane == 0) st(scores + t * n_keys + j, score, Traffic::activation);
    __syncwarp();  // the key row is read before the next key overwrites it
  }
}

inline constexpr int kTopkBins = 256;

// The selection: `count` slots, padded to a power of two with keys that sort last.
struct TopkShared {
  uint32_t key[kTopkMax];
  int32_t index[kTopkMax];
  int hist[kTopkBins];
  int scan[1024];
  int bin, need, greater, cursor, taken, length;
};

// Inclusive prefix sum of v over the block (Hillis-Steele in shared memory).
__device__ __forceinline__ int block_inclusive_scan(int v, int* scan) {
  scan[threadIdx.x] = v;
  __syncthreads();
  for (int offset = 1; offset < int(blockDim.x); offset *= 2) {
    const int add = threadIdx.x >= unsigned(offset) ? scan[threadIdx.x - offset] : 0;
    __syncthreads();
    scan[threadIdx.x] += add;
    __syncthreads();
  }
  const int total = scan[threadIdx.x];
  __syncthreads();  // scan may be reused after this
  return total;
}

// Sorts sh.key/sh.index[0, n) (n a power of two): by key descending, then index ascending; or,
// kByIndex, by index ascending.
template <bool kByIndex>
__device__ __forceinline__ void bitonic_sort_selection(TopkShared& sh, int n) {
  for (int size = 2; size <= n; size *= 2)
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int j = i ^ stride;
        if (j <= i) continue;
        const bool lower_index = sh.index[i] < sh.index[j];
        const bool first_before =
            kByIndex ? lower_index
                     : sh.key[i] > sh.key[j] || (sh.key[i] == sh.key[j] && lower_index);
        const bool descending = (i & size) == 0;  // the final merge sorts the whole run first-best
        if (first_before != descending) {
          const uint32_t k = sh.key[i];
          sh.key[i] = sh.key[j], sh.key[j] = k;
          const int32_t x = sh.index[i];
          sh.index[i] = sh.index[j], sh.index[j] = x;
        }
      }
      __syncthreads();
    }
}

inline constexpr uint32_t kTopkNone = 0;  // below every finite score's key: pads, chunk tails

// The k largest of key_at(p) over p in [0, length), ties to the lower p, into sh.key/sh.index
// (index_at(p), increasing in p) [0, count), sorted by kByIndex's order; returns count =
// min(k, length). key_at runs five times for each p (once a pass, by one thread), index_at only
// for the p that are selected.
template <bool kByIndex, class KeyAt, class IndexAt>
__device__ __forceinline__ int select_largest(const KeyAt& key_at, const IndexAt& index_at,
                                              int length, int k, TopkShared& sh) {
  // Passes 0..3: the bits of u*, the k-th largest key (the smallest when fewer than k), most
  // significant byte first.
  uint32_t prefix = 0, prefix_mask = 0;
  if (threadIdx.x == 0) sh.need = k, sh.greater = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int b = threadIdx.x; b < kTopkBins; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < length; p += blockDim.x) {
      const uint32_t u = key_at(p);
      if ((u & prefix_mask) == prefix) atomicAdd(&sh.hist[(u >> shift) & 0xff], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the bin holding the need-th largest (or the lowest bin)
      int above = 0, b = kTopkBins - 1;
      while (b > 0 && above + sh.hist[b] < sh.need) above += sh.hist[b--];
      sh.bin = b, sh.greater += above, sh.need -= above;
    }
    __syncthreads();
    prefix |= uint32_t(sh.bin) << shift, prefix_mask |= 0xffu << shift;
  }
  // Pass 4: every key above u* into slots [0, greater) (any order), then the keys equal to u* in
  // p order into the next `need` slots (a block scan ranks a chunk's ties).
  const int greater = sh.greater, need = sh.need;
  if (threadIdx.x == 0) sh.cursor = 0, sh.taken = 0;
  __syncthreads();
  for (int base = 0; base < length; base += blockDim.x) {
    const int p = base + int(threadIdx.x);
    const bool visible = p < length;
    const uint32_t u = visible ? key_at(p) : kTopkNone;
    const bool tie = visible && u == prefix;
    if (visible && u > prefix) {
      const int slot = atomicAdd(&sh.cursor, 1);
      sh.key[slot] = u, sh.index[slot] = index_at(p);
    }
    const int taken = sh.taken;
    const int through = block_inclusive_scan(tie ? 1 : 0, sh.scan);  // ties up to p, this chunk
    const int rank = taken + through - (tie ? 1 : 0);
    if (tie && rank < need) sh.key[greater + rank] = u, sh.index[greater + rank] = index_at(p);
    if (threadIdx.x == blockDim.x - 1) sh.taken = taken + through;
    __syncthreads();
  }
  const int count = greater + (sh.taken < need ? sh.taken : need);
  int padded = 1;
  while (padded < count) padded *= 2;
  for (int i = count + int(threadIdx.x); i < padded; i += blockDim.x)
    sh.key[i] = kTopkNone, sh.index[i] = 0x7fffffff;  // after every selected entry
  __syncthreads();
  bitonic_sort_selection<kByIndex>(sh, padded);
  return count;
}

// Writes the selection's indices [0, count) and -1 up to k.
__device__ __forceinline__ void write_selection(const TopkShared& sh, int count, int k,
                                                int32_t* dst) {
  for (int i = threadIdx.x; i < k; i += blockDim.x)
    st(dst + i, i < count ? sh.index[i] : -1, Traffic::coefficient);
}

__device__ __forceinline__ int load_row_length(const int32_t* lengths, TopkShared& sh) {
  if (threadIdx.x == 0) sh.length = ld(lengths + blockIdx.x, Traffic::coefficient);
  __syncthreads();
  return sh.length;
}

// scores: [T, n]; lengths: [T]; out: [T, k]. Static shared memory: TopkShared. blockDim.x <=
// 1024.
__global__ void topk_select(const float* __restrict__ scores, const int32_t* __restrict__ lengths,
                            int n, int k, int32_t* out) {
  static_assert(kTopkMax <= 2048 && (kTopkMax & (kTopkMax - 1)) == 0,
                "the selection is sorted in shared memory, a power of two at most");
  __shared__ TopkShared sh;
  const float* row = scores + static_cast<size_t>(blockIdx.x) * n;
  const int length = load_row_length(lengths, sh);
  const int count =
      select_largest<false>([&](int j) { return topk_order_key(ld(row + j, Traffic::activation)); },
                            [](int j) { return j; }, length, k, sh);
  write_selection(sh, count, k, out + static_cast<size_t>(blockIdx.x) * k);
}

// ---------------------------------------------------------------- candidate blocks
// candidate_blocks: one block per row; the row's blocks are the keys' row (a block's key is the
// largest order key among its entries, read from the scores in each pass; the newest block's is
// above every score's without reading it), the selection sorted by block id. out: [T, keep].
__global__ void candidate_blocks(const float* __restrict__ scores,
                                 const int32_t* __restrict__ lengths, int n, int block, int keep,
                                 int32_t* out) {
  __shared__ TopkShared sh;
  const float* row = scores + static_cast<size_t>(blockIdx.x) * n;
  const int length = load_row_length(lengths, sh);
  const int n_blocks = (length + block - 1) / block, pinned = n_blocks - 1;
  const int count = select_largest<true>(
      [&](int b) {
        if (b == pinned) return 0xffffffffu;
        uint32_t best = kTopkNone;
        for (int j = b * block; j < (b + 1) * block; ++j) {
          const uint32_t u = topk_order_key(ld(row + j, Traffic::activation));
          best = u > best ? u : best;
        }
        return best;
      },
      [](int b) { return b; }, n_blocks, keep, sh);
  write_selection(sh, count, keep, out + static_cast<size_t>(blockIdx.x) * keep);
}

// candidate_topk: one block per row; the row's candidates (blocks: [T, c], ascending, -1 after)
// staged in shared memory, their entries (candidate_entries) are the keys' row; the selection
// records entry indices. out: [T, k].
__global__ void candidate_topk(const float* __restrict__ scores,
                               const int32_t* __restrict__ lengths,
                               const int32_t* __restrict__ blocks, int n, int c, int block, int k,
                               int32_t* out) {
  __shared__ TopkShared sh;
  __shared__ int32_t kept[kTopkMax];
  __shared__ int kept_count;
  const float* row = scores + static_cast<size_t>(blockIdx.x) * n;
  const int32_t* ids = blocks + static_cast<size_t>(blockIdx.x) * c;
  const int length = load_row_length(lengths, sh);
  if (threadIdx.x == 0) kept_count = 0;
  for (int i = threadIdx.x; i < c; i += blockDim.x) kept[i] = ld(ids + i, Traffic::coefficient);
  __syncthreads();
  for (int i = threadIdx.x; i < c; i += blockDim.x)  // the last kept id counts them
    if (kept[i] != -1 && (i + 1 == c || kept[i + 1] == -1)) kept_count = i + 1;
  __syncthreads();
  const int entries = int(candidate_entries(kept, kept_count, block, length));
  auto entry = [&](int p) { return kept[p / block] * block + p % block; };
  const int count = select_largest<false>(
      [&](int p) { return topk_order_key(ld(row + entry(p), Traffic::activation)); }, entry,
      entries, k, sh);
  write_selection(sh, count, k, out + static_cast<size_t>(blockIdx.x) * k);
}

}  // namespace tandem::TANDEM_BACKEND_NS
