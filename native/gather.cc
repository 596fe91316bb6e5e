// The host row gather of gns-jax's feature loader: out[i] = store[ids[i]] (or, given positions,
// out[positions[i]] = store[ids[i]]: the rows read in id order written to their slots), rows of
// a fixed byte width, called through ctypes by gns_jax/gather.py (one call per thread's piece; ctypes
// releases the GIL). Plain C functions, no XLA: the rows are gathered on the host before they
// are put on the device.
//
// Two things make it faster than NumPy's take of the same rows (experiments/bench_gather.py
// times both against a plain copy of the same bytes):
//
//   * the rows PREFETCH_ROWS ahead are prefetched, every cache line of them, so that the
//     memory reads of a batch's scattered rows overlap instead of waiting one row at a time.
//     The hint is prefetcht1 (into the L2): with prefetchnta a 2-core Xeon gathered 300,000
//     rows of 400 bytes in 1.60x a plain copy's time, with prefetcht1 in 1.17-1.20x (85,000
//     rows: 1.78x and 1.68x), at any distance from 4 to 32 rows;
//   * where the output rows are 16-byte aligned (an aligned buffer and a row width that is a
//     multiple of 16 bytes) they are written with non-temporal stores, which go to memory
//     without first reading the output's cache lines (the read-for-ownership a plain store
//     makes, a third of a gather's memory traffic) and without evicting the rows being read:
//     what a large memcpy does too.
//
// The caller checks every id in range; nothing is checked here.
//
// gns_count_resident_*: how many of a batch's rows of a memory-mapped store lie wholly on pages
// that mincore reported resident (the page-cache hit rate of gns_jax.instrument), one pass.
//
// gns_sorted_order_*: the ids of a batch in ascending order and the rank of each (where it
// landed), by a bitmap over the id range and a popcount prefix over its words, both small enough
// to stay in the cache (1M ids: 122 KiB and 61 KiB): three passes over the ids instead of a sort.

#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace {

constexpr int64_t PREFETCH_ROWS = 16;
constexpr int64_t LINE = 64;

// positions: nullptr (row i to out row i) or the out row of each row.
template <typename Id>
void TakeRows(const char* store, const Id* ids, int64_t n, int64_t row_bytes, char* out,
              const int32_t* positions) {
#if defined(__SSE2__)
  const bool stream = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
#else
  const bool stream = false;
#endif
  for (int64_t i = 0; i < n; ++i) {
    if (i + PREFETCH_ROWS < n) {
      const char* ahead = store + static_cast<int64_t>(ids[i + PREFETCH_ROWS]) * row_bytes;
      // every line the row touches (it need not start on a line)
      for (int64_t offset = 0; offset < row_bytes + LINE - 1; offset += LINE) {
        __builtin_prefetch(ahead + offset, 0, 2);  // into L2 and L1 (prefetcht1)
      }
    }
    const char* source = store + static_cast<int64_t>(ids[i]) * row_bytes;
    char* target = out + (positions ? static_cast<int64_t>(positions[i]) : i) * row_bytes;
#if defined(__SSE2__)
    if (stream) {
      const __m128i* s = reinterpret_cast<const __m128i*>(source);
      __m128i* t = reinterpret_cast<__m128i*>(target);
      for (int64_t k = 0; k < row_bytes / 16; ++k) {
        _mm_stream_si128(t + k, _mm_loadu_si128(s + k));
      }
      continue;
    }
#endif
    std::memcpy(target, source, row_bytes);
  }
#if defined(__SSE2__)
  if (stream) _mm_sfence();  // the streamed rows are visible before the caller reads them
#endif
}

// rank[k] = the set bits of the bitmap below ids[k] (before: the set bits before each word).
template <typename Id>
inline __attribute__((always_inline)) void RanksBody(const Id* ids, int64_t n,
                                                     const uint64_t* bits,
                                                     const int32_t* before, int32_t* rank) {
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t id = static_cast<uint64_t>(ids[k]);
    const uint64_t below = bits[id >> 6] & ((uint64_t{1} << (id & 63)) - 1);
    rank[k] = before[id >> 6] + __builtin_popcountll(below);
  }
}

// x86_64's baseline has no popcount instruction (the build targets the baseline): the same loop
// inlined into a function compiled for it, chosen at run time where the CPU has it (a third
// faster for 300,000 ids).
#if defined(__x86_64__) && defined(__GNUC__)
#define GNS_POPCNT_DISPATCH 1
template <typename Id>
__attribute__((target("popcnt"))) void RanksPopcnt(const Id* ids, int64_t n,
                                                   const uint64_t* bits, const int32_t* before,
                                                   int32_t* rank) {
  RanksBody(ids, n, bits, before, rank);
}
#else
#define GNS_POPCNT_DISPATCH 0
#endif

template <typename Id>
int SortedOrder(const Id* ids, int64_t n, int64_t span, Id* ordered, int32_t* rank) {
  const int64_t words = (span + 63) / 64;
  std::vector<uint64_t> bits(words, 0);
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t id = static_cast<uint64_t>(ids[k]);
    const uint64_t bit = uint64_t{1} << (id & 63);
    if (bits[id >> 6] & bit) return 1;  // a repeated id: the caller sorts instead
    bits[id >> 6] |= bit;
  }
  std::vector<int32_t> before(words);  // set bits in the words before each word
  int32_t count = 0;
  for (int64_t w = 0; w < words; ++w) {
    before[w] = count;
    uint64_t word = bits[w];
    while (word) {
      ordered[count++] = static_cast<Id>(w * 64 + __builtin_ctzll(word));
      word &= word - 1;
    }
  }
#if GNS_POPCNT_DISPATCH
  if (__builtin_cpu_supports("popcnt")) {
    RanksPopcnt(ids, n, bits.data(), before.data(), rank);
    return 0;
  }
#endif
  RanksBody(ids, n, bits.data(), before.data(), rank);
  return 0;
}

template <typename Id, typename PageOf>
int64_t CountResidentBy(const uint8_t* resident, const Id* ids, int64_t n, int64_t offset,
                        int64_t row_bytes, PageOf page_of) {
  int64_t count = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t start = offset + static_cast<int64_t>(ids[k]) * row_bytes;
    const int64_t last = page_of(start + row_bytes - 1);
    bool all = true;
    for (int64_t p = page_of(start); p <= last && all; ++p) all = resident[p] & 1;
    count += all;
  }
  return count;
}

template <typename Id>
int64_t CountResident(const uint8_t* resident, const Id* ids, int64_t n, int64_t offset,
                      int64_t row_bytes, int64_t page) {
  if ((page & (page - 1)) == 0) {  // a power of two (every page size is): shifts, not divisions
    const int shift = __builtin_ctzll(static_cast<uint64_t>(page));
    return CountResidentBy(resident, ids, n, offset, row_bytes,
                           [shift](int64_t byte) { return byte >> shift; });
  }
  return CountResidentBy(resident, ids, n, offset, row_bytes,
                         [page](int64_t byte) { return byte / page; });
}

}  // namespace

extern "C" {

// The rows ids[k] (of row_bytes each, the store starting offset bytes into the first page of
// the mincore vector `resident`) whose every page has resident[page] & 1. int32 ids.
int64_t gns_count_resident_i32(const uint8_t* resident, const int32_t* ids, int64_t n,
                               int64_t offset, int64_t row_bytes, int64_t page) {
  return CountResident(resident, ids, n, offset, row_bytes, page);
}

// The same with int64 ids.
int64_t gns_count_resident_i64(const uint8_t* resident, const int64_t* ids, int64_t n,
                               int64_t offset, int64_t row_bytes, int64_t page) {
  return CountResident(resident, ids, n, offset, row_bytes, page);
}

// ordered = the n distinct ids in [0, span) in ascending order, rank[k] = the position of ids[k]
// in ordered. Returns 0, or 1 (nothing meaningful written) when an id repeats. int32 ids.
int gns_sorted_order_i32(const int32_t* ids, int64_t n, int64_t span, int32_t* ordered,
                         int32_t* rank) {
  return SortedOrder(ids, n, span, ordered, rank);
}

// The same with int64 ids.
int gns_sorted_order_i64(const int64_t* ids, int64_t n, int64_t span, int64_t* ordered,
                         int32_t* rank) {
  return SortedOrder(ids, n, span, ordered, rank);
}

// out[i * row_bytes ...] = store[ids[i] * row_bytes ...] for i < n; int32 ids.
void gns_take_rows_i32(const void* store, const int32_t* ids, int64_t n, int64_t row_bytes,
                       void* out) {
  TakeRows(static_cast<const char*>(store), ids, n, row_bytes, static_cast<char*>(out), nullptr);
}

// The same with int64 ids.
void gns_take_rows_i64(const void* store, const int64_t* ids, int64_t n, int64_t row_bytes,
                       void* out) {
  TakeRows(static_cast<const char*>(store), ids, n, row_bytes, static_cast<char*>(out), nullptr);
}

// out[positions[i] * row_bytes ...] = store[ids[i] * row_bytes ...] for i < n; int32 ids.
void gns_take_rows_to_i32(const void* store, const int32_t* ids, int64_t n, int64_t row_bytes,
                          void* out, const int32_t* positions) {
  TakeRows(static_cast<const char*>(store), ids, n, row_bytes, static_cast<char*>(out), positions);
}

// The same with int64 ids.
void gns_take_rows_to_i64(const void* store, const int64_t* ids, int64_t n, int64_t row_bytes,
                          void* out, const int32_t* positions) {
  TakeRows(static_cast<const char*>(store), ids, n, row_bytes, static_cast<char*>(out), positions);
}

}  // extern "C"
