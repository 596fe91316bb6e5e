// Native CPU kernels of gns-jax's samplers, called from jitted JAX code through XLA's FFI.
//
// Two kernels, each the exact sequential counterpart of a jitted JAX function of
// gns_jax/sampling/nodewise.py (the tests check that the outputs are equal, element for
// element, on random graphs):
//
//   gns_expand_layer   expand_layer: min(k, d_v) distinct neighbours of every destination by
//                      Floyd's algorithm, from the words jax.random.bits draws from the same
//                      key (threefry2x32, computed here: XLA:CPU's took most of the layer's
//                      time), with the mean coefficient 1 / min(k, d_v).
//   gns_relabel        relabel: the source set [dst | new nodes in order of first occurrence |
//                      dummy] and the local sender id of every sampled entry.
//
// XLA:CPU runs the JAX versions as dense [n, k] array programs over node-sized scratch arrays;
// here each is one pass over the sampled entries, with a per-thread node-sized scratch array
// that is reset entry by entry, so the cost follows the batch, not the graph.

#include <algorithm>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// JAX's threefry2x32 hash (jax._src.random.threefry2x32, 20 rounds) of the 64-bit counter
// (hi, lo), and the 32-bit word jax.random.bits draws from it: with
// jax_threefry_partitionable (JAX's default) word i of bits(key, (N,)) is the XOR of the two
// outputs for the counter i. The tests compare the words with jax.random.bits.
inline uint32_t Rotl(uint32_t x, int d) { return (x << d) | (x >> (32 - d)); }

inline uint32_t ThreefryWord(uint32_t k0, uint32_t k1, uint64_t counter) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  static constexpr int kRot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  uint32_t x0 = static_cast<uint32_t>(counter >> 32) + ks[0];
  uint32_t x1 = static_cast<uint32_t>(counter) + ks[1];
  for (int i = 0; i < 5; ++i) {
    for (int r : kRot[i % 2]) {
      x0 += x1;
      x1 = Rotl(x1, r) ^ x0;
    }
    x0 += ks[(i + 1) % 3];
    x1 += ks[(i + 2) % 3] + static_cast<uint32_t>(i + 1);
  }
  return x0 ^ x1;
}

// Words first .. first + count - 1 of the stream (a 32-bit counter): one simple loop that the
// compiler vectorises (with AVX2 where the CPU has it, chosen at load time).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void ThreefryWords(uint32_t k0, uint32_t k1, uint32_t first, int64_t count, uint32_t* out) {
  const uint32_t ks2 = k0 ^ k1 ^ 0x1BD11BDAu;
  for (int64_t j = 0; j < count; ++j) {
    uint32_t x0 = k0;  // the counter's high word is 0
    uint32_t x1 = first + static_cast<uint32_t>(j) + k1;
#define GNS_ROUND(r) x0 += x1; x1 = Rotl(x1, r) ^ x0;
#define GNS_R0 GNS_ROUND(13) GNS_ROUND(15) GNS_ROUND(26) GNS_ROUND(6)
#define GNS_R1 GNS_ROUND(17) GNS_ROUND(29) GNS_ROUND(16) GNS_ROUND(24)
    GNS_R0 x0 += k1; x1 += ks2 + 1u;
    GNS_R1 x0 += ks2; x1 += k0 + 2u;
    GNS_R0 x0 += k0; x1 += k1 + 3u;
    GNS_R1 x0 += k1; x1 += ks2 + 4u;
    GNS_R0 x0 += ks2; x1 += k0 + 5u;
#undef GNS_R1
#undef GNS_R0
#undef GNS_ROUND
    out[j] = x0 ^ x1;
  }
}

// Floyd's algorithm, exactly as sample_without_replacement in nodewise.py: for draw c of k,
// j = d - k + c and t = word mod (j + 1); take t unless taken already, else j. Word c of row i
// is word i * k + c of jax.random.bits(key, (n * k,)), drawn here only for the rows that need
// them (degree above k).
ffi::Error ExpandLayer(ffi::Buffer<ffi::S32> indptr, ffi::Buffer<ffi::S32> indices,
                       ffi::Buffer<ffi::S32> dst, ffi::Buffer<ffi::U32> key,
                       ffi::ResultBuffer<ffi::S32> nbrs, ffi::ResultBuffer<ffi::PRED> mask,
                       ffi::ResultBuffer<ffi::F32> weight, int64_t k) {
  const int64_t n = dst.element_count();
  if (key.element_count() != 2) {
    return ffi::Error::InvalidArgument("gns_expand_layer: key must be threefry's uint32[2]");
  }
  const uint32_t k0 = key.typed_data()[0], k1 = key.typed_data()[1];
  const int32_t* ip = indptr.typed_data();
  const int32_t* ix = indices.typed_data();
  const int32_t* d = dst.typed_data();
  int32_t* out = nbrs->typed_data();
  bool* m = mask->typed_data();
  float* wt = weight->typed_data();
  std::vector<int32_t> chosen(static_cast<size_t>(k));
  std::unordered_set<int32_t> taken;  // for large k only: membership of the chosen positions
  // Rows in chunks whose words are drawn together (vectorised) when the counters fit 32 bits.
  const bool vector_words = n * k < (int64_t{1} << 32);
  const int64_t chunk = k > 0 ? std::max<int64_t>(1, 8192 / k) : n + 1;
  std::vector<uint32_t> words(vector_words ? static_cast<size_t>(chunk * k) : 0);
  int64_t chunk_start = -chunk;
  for (int64_t i = 0; i < n; ++i) {
    if (i + 16 < n && d[i + 16] >= 0) __builtin_prefetch(ip + d[i + 16]);
    const int32_t v = d[i];
    const int32_t start = v >= 0 ? ip[v] : 0;
    const int64_t degree = v >= 0 ? static_cast<int64_t>(ip[v + 1]) - start : 0;
    const int64_t take = degree < k ? degree : k;
    if (degree > k) {
      if (vector_words && i >= chunk_start + chunk) {
        chunk_start = i;
        const int64_t rows = std::min(chunk, n - i);
        ThreefryWords(k0, k1, static_cast<uint32_t>(i * k), rows * k, words.data());
      }
      if (k > 32) taken.clear();
      for (int64_t c = 0; c < k; ++c) {
        const int64_t j = degree - k + c;
        const uint32_t word = vector_words ? words[(i - chunk_start) * k + c]
                                           : ThreefryWord(k0, k1, static_cast<uint64_t>(i * k + c));
        const int32_t t = static_cast<int32_t>(word % static_cast<uint32_t>(j + 1));
        bool seen = false;
        if (k > 32) {
          seen = taken.count(t) > 0;
        } else {
          for (int64_t c2 = 0; c2 < c; ++c2) seen |= chosen[c2] == t;
        }
        chosen[c] = seen ? static_cast<int32_t>(j) : t;
        if (k > 32) taken.insert(chosen[c]);
      }
    } else {
      for (int64_t c = 0; c < k; ++c) chosen[c] = static_cast<int32_t>(c);
    }
    const float coefficient = 1.0f / static_cast<float>(take > 1 ? take : 1);
    for (int64_t c = 0; c < k; ++c) {
      const bool real = c < take;
      out[i * k + c] = real ? start + chosen[c] : -1;  // the edge's position, read below
      m[i * k + c] = real;
      wt[i * k + c] = real ? coefficient : 0.0f;
    }
  }
  // The neighbours, in a second pass that keeps many reads of `indices` (random, mostly cache
  // misses on a large graph) in flight.
  constexpr int64_t kAhead = 32;
  const int64_t entries = n * k;
  for (int64_t e = 0; e < entries; ++e) {
    if (e + kAhead < entries && out[e + kAhead] >= 0) __builtin_prefetch(ix + out[e + kAhead]);
    if (out[e] >= 0) out[e] = ix[out[e]];
  }
  return ffi::Error::Success();
}

// A node-sized array of -1 per thread, returned to all -1 after each call.
std::vector<int32_t>& Scratch(int64_t size) {
  thread_local std::vector<int32_t> local;
  if (static_cast<int64_t>(local.size()) < size) local.assign(static_cast<size_t>(size), -1);
  return local;
}

constexpr int32_t kDropped = -2;  // a new node beyond max_new: counted once, never a slot

// relabel's arrays for raw pointers: src [max_dst + max_new + 1], snd [entries]; returns the
// overflow (new nodes beyond max_new).
int32_t RelabelCore(const int32_t* d, int64_t max_dst, const int32_t* nb, const bool* m,
                    int64_t entries, int64_t num_nodes, int64_t max_new, int32_t* src,
                    int32_t* snd) {
  const int64_t max_src = max_dst + max_new + 1;
  std::vector<int32_t>& local = Scratch(num_nodes);
  std::vector<int32_t> dropped;
  for (int64_t i = 0; i < max_dst; ++i) {
    src[i] = d[i];
    if (d[i] >= 0) local[d[i]] = static_cast<int32_t>(i);
  }
  int64_t count = 0;  // new nodes seen, kept or not
  const int32_t dummy = static_cast<int32_t>(max_src - 1);
  for (int64_t e = 0; e < entries; ++e) {
    if (e + 32 < entries && nb[e + 32] >= 0) __builtin_prefetch(local.data() + nb[e + 32], 1);
    const int32_t v = nb[e];
    if (!m[e] || v < 0) {
      snd[e] = dummy;
      continue;
    }
    int32_t slot = local[v];
    if (slot == -1) {  // first occurrence of a node that is not a destination
      if (count < max_new) {
        slot = static_cast<int32_t>(max_dst + count);
        src[max_dst + count] = v;
      } else {
        slot = kDropped;
        dropped.push_back(v);
      }
      local[v] = slot;
      ++count;
    }
    snd[e] = slot >= 0 ? slot : dummy;
  }
  const int64_t kept = count < max_new ? count : max_new;
  for (int64_t s = max_dst + kept; s < max_src; ++s) src[s] = -1;
  // Back to all -1 for the next call on this thread: only the entries this call set.
  for (int64_t s = 0; s < max_dst + kept; ++s) {
    if (src[s] >= 0) local[src[s]] = -1;
  }
  for (const int32_t v : dropped) local[v] = -1;
  return static_cast<int32_t>(count > max_new ? count - max_new : 0);
}

ffi::Error Relabel(ffi::Buffer<ffi::S32> dst, ffi::Buffer<ffi::S32> nbrs,
                   ffi::Buffer<ffi::PRED> mask, ffi::ResultBuffer<ffi::S32> src_nodes,
                   ffi::ResultBuffer<ffi::S32> senders, ffi::ResultBuffer<ffi::S32> overflow,
                   int64_t num_nodes, int64_t max_new) {
  if (mask.element_count() != nbrs.element_count()) {
    return ffi::Error::InvalidArgument("gns_relabel: nbrs and mask differ in size");
  }
  *overflow->typed_data() =
      RelabelCore(dst.typed_data(), dst.element_count(), nbrs.typed_data(), mask.typed_data(),
                  nbrs.element_count(), num_nodes, max_new, src_nodes->typed_data(),
                  senders->typed_data());
  return ffi::Error::Success();
}

// make_block of nodewise.py: relabel, then the block's edge arrays, in place ([max_dst, width]
// entries, max_edges < 0) or the kept edges compacted in order into max_edges slots.
ffi::Error MakeBlock(ffi::Buffer<ffi::S32> dst, ffi::Buffer<ffi::S32> nbrs,
                     ffi::Buffer<ffi::PRED> mask, ffi::Buffer<ffi::F32> weight,
                     ffi::ResultBuffer<ffi::S32> src_nodes, ffi::ResultBuffer<ffi::S32> senders,
                     ffi::ResultBuffer<ffi::S32> receivers,
                     ffi::ResultBuffer<ffi::F32> edge_weight,
                     ffi::ResultBuffer<ffi::S32> overflow, int64_t num_nodes, int64_t max_new,
                     int64_t max_edges) {
  const int64_t max_dst = dst.element_count();
  const int64_t entries = nbrs.element_count();
  if (mask.element_count() != entries || weight.element_count() != entries || max_dst == 0) {
    return ffi::Error::InvalidArgument("gns_make_block: nbrs, mask and weight differ in size");
  }
  const int64_t width = entries / max_dst;
  const int32_t dummy_src = static_cast<int32_t>(max_dst + max_new);
  const int32_t dummy_dst = static_cast<int32_t>(max_dst - 1);
  const float* w = weight.typed_data();
  int32_t* snd = senders->typed_data();
  int32_t* rcv = receivers->typed_data();
  float* wt = edge_weight->typed_data();
  const bool compact = max_edges >= 0;
  // Compacting: every entry's sender first, in a per-thread buffer kept from call to call (no
  // fresh pages to fault in per batch).
  thread_local std::vector<int32_t> local_senders;
  if (compact && static_cast<int64_t>(local_senders.size()) < entries) {
    local_senders.resize(static_cast<size_t>(entries));
  }
  int32_t* all = compact ? local_senders.data() : snd;
  int64_t over = RelabelCore(dst.typed_data(), max_dst, nbrs.typed_data(), mask.typed_data(),
                             entries, num_nodes, max_new, src_nodes->typed_data(), all);
  if (!compact) {
    for (int64_t e = 0; e < entries; ++e) {
      const bool kept = all[e] != dummy_src;  // masked and dropped entries hold the dummy
      rcv[e] = kept ? static_cast<int32_t>(e / width) : dummy_dst;
      wt[e] = kept ? w[e] : 0.0f;
    }
  } else {
    int64_t out = 0, kept_total = 0;
    for (int64_t e = 0; e < entries; ++e) {
      if (all[e] == dummy_src) continue;
      ++kept_total;
      if (out < max_edges) {
        snd[out] = all[e];
        rcv[out] = static_cast<int32_t>(e / width);
        wt[out] = w[e];
        ++out;
      }
    }
    for (; out < max_edges; ++out) {
      snd[out] = dummy_src;
      rcv[out] = dummy_dst;
      wt[out] = 0.0f;
    }
    over += kept_total > max_edges ? kept_total - max_edges : 0;
  }
  *overflow->typed_data() = static_cast<int32_t>(over);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GnsExpandLayer, ExpandLayer,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()  // indptr
                                  .Arg<ffi::Buffer<ffi::S32>>()  // indices
                                  .Arg<ffi::Buffer<ffi::S32>>()  // dst
                                  .Arg<ffi::Buffer<ffi::U32>>()  // threefry key data [2]
                                  .Ret<ffi::Buffer<ffi::S32>>()  // nbrs [n, k]
                                  .Ret<ffi::Buffer<ffi::PRED>>()  // edge mask [n, k]
                                  .Ret<ffi::Buffer<ffi::F32>>()  // edge weight [n, k]
                                  .Attr<int64_t>("fanout"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(GnsRelabel, Relabel,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()  // dst [max_dst]
                                  .Arg<ffi::Buffer<ffi::S32>>()  // nbrs (any shape)
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // edge mask (same shape)
                                  .Ret<ffi::Buffer<ffi::S32>>()  // src_nodes [max_src]
                                  .Ret<ffi::Buffer<ffi::S32>>()  // senders (nbrs' shape)
                                  .Ret<ffi::Buffer<ffi::S32>>()  // overflow []
                                  .Attr<int64_t>("num_nodes")
                                  .Attr<int64_t>("max_new"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(GnsMakeBlock, MakeBlock,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()  // dst [max_dst]
                                  .Arg<ffi::Buffer<ffi::S32>>()  // nbrs [max_dst, width]
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // edge mask
                                  .Arg<ffi::Buffer<ffi::F32>>()  // edge weight
                                  .Ret<ffi::Buffer<ffi::S32>>()  // src_nodes [max_src]
                                  .Ret<ffi::Buffer<ffi::S32>>()  // senders [edges]
                                  .Ret<ffi::Buffer<ffi::S32>>()  // receivers [edges]
                                  .Ret<ffi::Buffer<ffi::F32>>()  // edge weight [edges]
                                  .Ret<ffi::Buffer<ffi::S32>>()  // overflow []
                                  .Attr<int64_t>("num_nodes")
                                  .Attr<int64_t>("max_new")
                                  .Attr<int64_t>("max_edges"));

// The XLA FFI API version of the headers this file was compiled against (those of the jaxlib
// present at build time, jax.ffi.include_dir()): gns_jax/native.py compares it with the running
// jaxlib's before it registers the handlers above, and falls back to the JAX versions on a
// mismatch instead of leaving XLA to reject them.
extern "C" int gns_ffi_api_major() { return XLA_FFI_API_MAJOR; }
extern "C" int gns_ffi_api_minor() { return XLA_FFI_API_MINOR; }
