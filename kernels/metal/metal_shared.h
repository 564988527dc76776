// The layout the Metal kernels (kernels/metal/*.metal) and their host code
// (src/backend/metal/) share: the argument structs, passed by setBytes at buffer index 0 of every
// kernel, the buffer index of every other argument, and the launch constants. Plain data only
// (32-bit fields, no pointers, no bool), so that MSL and C++ lay them out alike; the host checks
// sizes and offsets with static_asserts (src/backend/metal/metal_layout.hpp).
//
// Conventions of every kernel: 1-D threadgroups of a multiple of kSimdWidth threads; arguments
// [[buffer(i)]] in index order, 0, 1, 2... with none left out (tests/metal/check_msl.sh checks it), then `threadgroup T* tg [[threadgroup(0)]]` (length set by the
// host, at least 16 bytes), `uint3 group [[threadgroup_position_in_grid]]` and
// `uint lid [[thread_index_in_threadgroup]]`. Tensors are bound at their first element; weights
// at an offset rounded down to 16 bytes, the rest (data_skip, scales_skip) in WeightArgs.
#pragma once

#ifdef __METAL_VERSION__
#include <metal_stdlib>
#else
#include <cstdint>
#endif

namespace dfm {

enum : uint32_t {
  kSimdWidth = 32,              // Apple GPUs; the host checks threadExecutionWidth
  kThreads = 128,               // threads of a threadgroup, unless a kernel says otherwise
  kSimdgroups = kThreads / kSimdWidth,
  kMatmulRowsPerSimdgroup = 2,  // output rows one simdgroup computes, one after the other
  kMatmulRowsPerGroup = kMatmulRowsPerSimdgroup * kSimdgroups,
  kMaxTopK = 64,                // router top_k and expert ids per row
  kMaxGroups = 32,              // router groups
  kMlaCtxTile = kThreads,       // positions per online-softmax tile of df_mla_attention
  kMaxMixCandidates = 64,
  kMinThreadgroupBytes = 16,
};

// Codes of cpu/weight_view.hpp's WeightFormat (same numbering; the host asserts it).
enum : uint32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kF8E4M3Block128 = 3, kMXFP4 = 4, kINT4G32 = 5 };
// GatedActivation::Kind, and the element-wise ops of df_binary.
enum : uint32_t { kSiLU = 0, kSiTU = 1 };
enum : uint32_t { kOpAdd = 0, kOpMulSigmoid = 1, kOpGated = 2 };

struct MatArgs {  // a strided fp32 / int32 view [rows, cols], rows `stride` elements apart
  uint32_t rows, cols, stride;
};
struct WeightArgs {  // a weight [rows, cols] in `format` (cpu/weight_view.hpp layouts)
  uint32_t format, rows, cols;
  uint32_t data_skip, scales_skip;  // bytes from the bound offsets to the data and the scales
};
struct ActArgs {
  uint32_t kind;
  float beta, linear_beta;
};

// df_fill: out [rows, cols] = value. Grid (ceil(cols / kThreads), rows).
struct FillArgs { MatArgs out; float value; };
enum : uint32_t { kFillOut = 1 };

// df_copy: dst = src, same shape. Grid (ceil(cols / kThreads), rows).
struct CopyArgs { MatArgs src, dst; };
enum : uint32_t { kCopySrc = 1, kCopyDst = 2 };

// df_binary: out = a + b | a * sigmoid(b) | act(a, b). Grid (ceil(cols / kThreads), rows).
struct BinaryArgs { MatArgs a, b, out; uint32_t op; ActArgs act; };
enum : uint32_t { kBinaryA = 1, kBinaryB = 2, kBinaryOut = 3 };

// df_embed: out [n, cols] = rows ids[t] of the table. Grid (ceil(cols / kThreads), n).
struct EmbedArgs { WeightArgs w; MatArgs ids, out; };
enum : uint32_t { kEmbedData = 1, kEmbedScales = 2, kEmbedIds = 3, kEmbedOut = 4 };

// df_rmsnorm: one threadgroup per row. Grid (1, n); tg: kSimdgroups floats.
struct RmsnormArgs { MatArgs x, out; float eps; };
enum : uint32_t { kRmsnormX = 1, kRmsnormWeight = 2, kRmsnormOut = 3 };

// df_rope: one thread per (head, pair). Grid (ceil(heads * pairs / kThreads), n).
struct RopeArgs { MatArgs x; uint32_t heads, head_dim, offset, pairs, start; float factor; };
enum : uint32_t { kRopeX = 1, kRopeFreq = 2 };

// df_matmul: y [n, w.rows] = x . W^T, kMatmulRowsPerGroup output rows per threadgroup, one
// simdgroup per row. Grid (ceil(w.rows / kMatmulRowsPerGroup), n). Expert mode (expert != 0):
// grid row p is slot slots[p] of the list (p >= count[0]: nothing), x row in_by_slot ? slot :
// slot / k, y row out_by_slot ? slot : slot / k. pair != 0: y = act(x . W0^T, x . W1^T).
struct MatmulArgs {
  WeightArgs w0, w1;
  MatArgs x, y;
  uint32_t pair, expert, k, in_by_slot, out_by_slot;
  ActArgs act;
};
enum : uint32_t { kMatmulData0 = 1, kMatmulScales0 = 2, kMatmulData1 = 3, kMatmulScales1 = 4, kMatmulX = 5,
                  kMatmulY = 6, kMatmulSlots = 7, kMatmulCount = 8 };

// df_expert_slots: per union expert e (grid x), the slots t * k + j whose id is experts[e], in
// ascending t: lists [count, n], counts [count]. Threadgroup kSimdWidth threads.
struct ExpertSlotsArgs { MatArgs ids; uint32_t count; };
enum : uint32_t { kSlotsIds = 1, kSlotsExperts = 2, kSlotsLists = 3, kSlotsCounts = 4 };

// df_expert_combine: out [n, cols] = per row, sum over j in ascending ids[t, j] of
// weights[t, j] * y[t * k + j] (y dense [n * k, cols]). Grid (ceil(cols / kThreads), n);
// tg: kMaxTopK uints.
struct CombineArgs { MatArgs ids, weights, out; };
enum : uint32_t { kCombineIds = 1, kCombineWeights = 2, kCombineY = 3, kCombineOut = 4 };

// df_route: one simdgroup per row. Grid (n); threadgroup kSimdWidth threads; tg: 3 * experts
// floats (score, choice, state).
struct RouteArgs {
  MatArgs logits, ids, weights;
  uint32_t experts, top_k, n_group, topk_group, renormalize, has_bias;
  float scaling;
};
enum : uint32_t { kRouteLogits = 1, kRouteBias = 2, kRouteIds = 3, kRouteWeights = 4 };

// df_mla_attention: one threadgroup per (head, query). Grid (heads, n); tg: mla_tg_floats().
struct MlaArgs {
  WeightArgs kv_b;
  MatArgs q, cache_c, cache_pe, out;
  uint32_t heads, nope, rope, v, kv_lora, start;
  float scale;
};
enum : uint32_t { kMlaData = 1, kMlaScales = 2, kMlaQ = 3, kMlaCacheC = 4, kMlaCachePe = 5, kMlaOut = 6 };

// df_kda_conv: one thread per channel of q, k, v (grid ceil(3 ch / kThreads)); the short
// convolutions and SiLU into conv [3, n, ch], the window updated.
// df_kda_delta: one threadgroup per head (grid heads), ceil(head_dim / 32) * 32 threads, thread j
// owning column j of the head's state; tg: 3 * head_dim + kSimdWidth floats.
struct KdaArgs {
  MatArgs q, k, v, beta, decay, window, state, out;
  uint32_t heads, head_dim, taps, n;
  float gate_lower_bound, norm_eps;
};
enum : uint32_t { kConvQ = 1, kConvK = 2, kConvV = 3, kConvWeightQ = 4, kConvWeightK = 5, kConvWeightV = 6,
                  kConvWindow = 7, kConvOut = 8 };
enum : uint32_t { kDeltaBeta = 1, kDeltaDecay = 2, kDeltaDtBias = 3, kDeltaRate = 4, kDeltaState = 5, kDeltaOut = 6,
                  kDeltaConv = 7 };

// df_attn_res_mix: candidates packed [count, n, dim]; one threadgroup per row. Grid (n);
// tg: kSimdgroups + kMaxMixCandidates floats.
struct MixArgs { MatArgs out; uint32_t count; float eps; };
enum : uint32_t { kMixPacked = 1, kMixQuery = 2, kMixOut = 3 };

}  // namespace dfm
