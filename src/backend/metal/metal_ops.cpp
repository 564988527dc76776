// MetalOps (metal_ops.hpp): each op checks its shapes on the host (a mismatch is a one-line
// error naming the op), fills its kernel's argument struct and launches it. Weights are bound at
// offsets rounded down to 16 bytes with the remainder in WeightArgs; tensors at their first
// element.
#include "backend/metal/metal_ops.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/metal/metal_layout.hpp"
#include "util/error.hpp"

namespace deltafin::metal {
namespace {

uint32_t u32(int64_t v, const char* what) {
  if (v < 0 || v > int64_t{0xffffffff}) fail("metal backend: {} {} does not fit the kernels' 32-bit fields", what, v);
  return static_cast<uint32_t>(v);
}

uint32_t blocks(int64_t n, uint32_t per) { return static_cast<uint32_t>((n + per - 1) / per); }

dfm::MatArgs mat(const Tensor& t) {
  return {u32(t.rows, "rows"), u32(t.cols, "cols"), u32(t.stride, "stride")};
}

Dispatch::Bind bind(const Tensor& t, Elem elem, const char* what) {
  if (!t.buffer || !t.buffer->host()) fail("metal backend: {} has no buffer of this backend", what);
  if (t.elem != elem) fail("metal backend: {} is {}, expected {}", what, t.elem == Elem::F32 ? "f32" : "i32", elem == Elem::F32 ? "f32" : "i32");
  if (t.offset % 4 != 0 || (t.rows > 0 && t.offset + ((t.rows - 1) * t.stride + t.cols) * 4 > t.buffer->bytes()))
    fail("metal backend: {} [{}, {}] lies outside its buffer", what, t.rows, t.cols);
  return {t.buffer, t.offset};
}
Dispatch::Bind f32(const Tensor& t, const char* what) { return bind(t, Elem::F32, what); }
Dispatch::Bind i32(const Tensor& t, const char* what) { return bind(t, Elem::I32, what); }

void same_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (a.rows != b.rows || a.cols != b.cols)
    fail("metal backend: {} of [{}, {}] and [{}, {}]", op, a.rows, a.cols, b.rows, b.cols);
}

// A weight's argument struct and its data and scale bindings (the scales bind the data's buffer
// when the format has none, so that every index is bound).
struct BoundWeight {
  dfm::WeightArgs args;
  Dispatch::Bind data, scales;
};

BoundWeight bind_weight(const Weight& w, const char* what) {
  if (!w.data || !w.data->host()) fail("metal backend: {} has no buffer of this backend", what);
  const bool quantized = w.format == WeightFormat::F8_E4M3_BLOCK128 || w.format == WeightFormat::MXFP4 ||
                         w.format == WeightFormat::INT4_G32;
  if (quantized && (!w.scales || !w.scales->host())) fail("metal backend: {} has no scales", what);
  if (w.format == WeightFormat::MXFP4 && w.cols % 32 != 0) fail("metal backend: {}: MXFP4 with {} columns (not a multiple of 32)", what, w.cols);
  if (w.data_offset % data_alignment(w.format) != 0)
    fail("metal backend: {}: data offset {} is not aligned to its elements", what, w.data_offset);
  BoundWeight b;
  b.args = {static_cast<uint32_t>(w.format), u32(w.rows, "weight rows"), u32(w.cols, "weight cols"),
            static_cast<uint32_t>(w.data_offset % 16), 0};
  b.data = {w.data, w.data_offset / 16 * 16};
  if (quantized) {
    b.args.scales_skip = static_cast<uint32_t>(w.scales_offset % 16);
    b.scales = {w.scales, w.scales_offset / 16 * 16};
  } else {
    b.scales = b.data;
  }
  return b;
}

template <class Args>
Dispatch launch(const char* kernel, const Args& args, uint32_t gx, uint32_t gy, uint32_t threads, uint32_t tg_bytes) {
  Dispatch d;
  d.kernel = kernel;
  d.args = &args;
  d.args_bytes = sizeof(Args);
  d.grid[0] = gx, d.grid[1] = gy;
  d.threads = threads;
  d.tg_bytes = std::max<uint32_t>((tg_bytes + 15) / 16 * 16, dfm::kMinThreadgroupBytes);
  return d;
}

}  // namespace

std::shared_ptr<Buffer> MetalOps::scratch(uint64_t bytes) { return allocate(std::max<uint64_t>(bytes, 16)); }

// --- memory -------------------------------------------------------------------------------

void MetalOps::upload(const void* src, Buffer& dst, uint64_t offset, uint64_t bytes) {
  if (!dst.host() || offset + bytes > dst.bytes()) fail("metal backend: upload of {} bytes at {} outside its buffer", bytes, offset);
  finish();  // the ops enqueued before may read the old contents
  if (bytes) std::memcpy(dst.host() + offset, src, bytes);
}

void MetalOps::upload_slot(const Buffer& staging, uint64_t staging_offset, Buffer& slots, uint64_t offset, uint64_t bytes) {
  // Unified memory: the slot pool is host-visible, and a slot being written holds no pin, so no
  // command in flight reads it.
  if (!staging.host() || !slots.host() || staging_offset + bytes > staging.bytes() || offset + bytes > slots.bytes())
    fail("metal backend: upload_slot of {} bytes outside its buffers", bytes);
  std::memcpy(slots.host() + offset, staging.host() + staging_offset, bytes);
}

void MetalOps::download(const Tensor& src, void* dst) {
  bind(src, src.elem, "download's source");
  finish();
  const size_t row_bytes = static_cast<size_t>(src.cols) * 4;
  for (int64_t r = 0; r < src.rows; ++r)
    std::memcpy(static_cast<std::byte*>(dst) + r * row_bytes, src.buffer->host() + src.offset + r * src.stride * 4, row_bytes);
}

void MetalOps::copy(const Tensor& src, const Tensor& dst) {
  same_shape(src, dst, "copy");
  if (src.rows == 0 || src.cols == 0) return;
  const Dispatch::Bind from = bind(src, src.elem, "copy's source"), to = bind(dst, src.elem, "copy's destination");
  const uint64_t src_end = src.offset + ((src.rows - 1) * src.stride + src.cols) * 4;
  const uint64_t dst_end = dst.offset + ((dst.rows - 1) * dst.stride + dst.cols) * 4;
  if (src.buffer == dst.buffer && src.offset < dst_end && dst.offset < src_end) {  // overlapping: through a dense copy
    const std::shared_ptr<Buffer> tmp = scratch(static_cast<uint64_t>(src.rows * src.cols) * 4);
    const Tensor dense = Tensor::of(*tmp, src.rows, src.cols, src.elem);
    copy(src, dense);
    copy(dense, dst);
    hold(tmp);
    return;
  }
  const dfm::CopyArgs a{mat(src), mat(dst)};
  Dispatch d = launch("df_copy", a, blocks(src.cols, dfm::kThreads), u32(src.rows, "rows"), dfm::kThreads, 0);
  d.buffers[dfm::kCopySrc] = from, d.buffers[dfm::kCopyDst] = to;
  dispatch(d);
}

void MetalOps::fill(const Tensor& dst, float value) {
  if (dst.rows == 0 || dst.cols == 0) return;
  const dfm::FillArgs a{mat(dst), value};
  Dispatch d = launch("df_fill", a, blocks(dst.cols, dfm::kThreads), u32(dst.rows, "rows"), dfm::kThreads, 0);
  d.buffers[dfm::kFillOut] = bind(dst, dst.elem, "fill");
  dispatch(d);
}

// --- ops ------------------------------------------------------------------------------------

void MetalOps::matmul(const Weight& w, const Tensor& x, const Tensor& y) {
  if (x.cols != w.cols || y.cols != w.rows || x.rows != y.rows)
    fail("metal backend: matmul of x [{}, {}] into y [{}, {}] by a weight [{}, {}]", x.rows, x.cols, y.rows, y.cols, w.rows, w.cols);
  if (x.rows == 0 || w.rows == 0) return;
  const BoundWeight bw = bind_weight(w, "matmul weight");
  dfm::MatmulArgs a{};
  a.w0 = a.w1 = bw.args;
  a.x = mat(x), a.y = mat(y);
  a.k = 1;
  Dispatch d = launch("df_matmul", a, blocks(w.rows, dfm::kMatmulRowsPerGroup), u32(x.rows, "rows"), dfm::kThreads, 0);
  d.buffers[dfm::kMatmulData0] = d.buffers[dfm::kMatmulData1] = bw.data;
  d.buffers[dfm::kMatmulScales0] = d.buffers[dfm::kMatmulScales1] = bw.scales;
  d.buffers[dfm::kMatmulX] = f32(x, "matmul x");
  d.buffers[dfm::kMatmulY] = d.buffers[dfm::kMatmulSlots] = d.buffers[dfm::kMatmulCount] = f32(y, "matmul y");
  dispatch(d);
}

void MetalOps::embed(const Weight& table, const Tensor& ids, const Tensor& out) {
  if (ids.cols != 1 || ids.rows != out.rows || out.cols != table.cols)
    fail("metal backend: embed of ids [{}, {}] into [{}, {}] from a table [{}, {}]", ids.rows, ids.cols, out.rows, out.cols,
         table.rows, table.cols);
  if (out.rows == 0) return;
  const BoundWeight bw = bind_weight(table, "embed table");
  const dfm::EmbedArgs a{bw.args, mat(ids), mat(out)};
  Dispatch d = launch("df_embed", a, blocks(out.cols, dfm::kThreads), u32(out.rows, "rows"), dfm::kThreads, 0);
  d.buffers[dfm::kEmbedData] = bw.data, d.buffers[dfm::kEmbedScales] = bw.scales;
  d.buffers[dfm::kEmbedIds] = i32(ids, "embed ids"), d.buffers[dfm::kEmbedOut] = f32(out, "embed out");
  dispatch(d);
}

void MetalOps::rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  same_shape(x, out, "rmsnorm");
  if (weight.cols != x.cols) fail("metal backend: rmsnorm of [{}, {}] with a weight [1, {}]", x.rows, x.cols, weight.cols);
  if (x.rows == 0) return;
  const dfm::RmsnormArgs a{mat(x), mat(out), eps};
  Dispatch d = launch("df_rmsnorm", a, 1, u32(x.rows, "rows"), dfm::kThreads, dfm::kSimdgroups * 4);
  d.buffers[dfm::kRmsnormX] = f32(x, "rmsnorm x"), d.buffers[dfm::kRmsnormWeight] = f32(weight, "rmsnorm weight");
  d.buffers[dfm::kRmsnormOut] = f32(out, "rmsnorm out");
  dispatch(d);
}

void MetalOps::binary(uint32_t op, const GatedActivation& act, const Tensor& a, const Tensor& b, const Tensor& out,
                      const char* name) {
  same_shape(a, b, name);
  same_shape(a, out, name);
  if (a.rows == 0 || a.cols == 0) return;
  const dfm::BinaryArgs args{mat(a), mat(b), mat(out), op, {static_cast<uint32_t>(act.kind), act.beta, act.linear_beta}};
  Dispatch d = launch("df_binary", args, blocks(a.cols, dfm::kThreads), u32(a.rows, "rows"), dfm::kThreads, 0);
  d.buffers[dfm::kBinaryA] = f32(a, name), d.buffers[dfm::kBinaryB] = f32(b, name), d.buffers[dfm::kBinaryOut] = f32(out, name);
  dispatch(d);
}

void MetalOps::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  binary(dfm::kOpAdd, {}, a, b, out, "add");
}
void MetalOps::mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& out) {
  binary(dfm::kOpMulSigmoid, {}, x, gate, out, "mul_sigmoid");
}
void MetalOps::gated(const GatedActivation& act, const Tensor& gate, const Tensor& up, const Tensor& out) {
  binary(dfm::kOpGated, act, gate, up, out, "gated");
}

void MetalOps::rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const Tensor& inv_freq,
                    float attention_factor, int64_t start) {
  const int64_t pairs = inv_freq.cols;
  if (heads * head_dim > x.cols || offset < 0 || offset + 2 * pairs > head_dim || start < 0)
    fail("metal backend: rope of [{}, {}] as {} heads of {} from column {} with {} frequencies", x.rows, x.cols, heads,
         head_dim, offset, pairs);
  if (x.rows == 0 || heads * pairs == 0) return;
  const dfm::RopeArgs a{mat(x), u32(heads, "heads"), u32(head_dim, "head_dim"), u32(offset, "offset"), u32(pairs, "pairs"),
                        u32(start + x.rows, "position") - u32(x.rows, "rows"), attention_factor};
  Dispatch d = launch("df_rope", a, blocks(heads * pairs, dfm::kThreads), u32(x.rows, "rows"), dfm::kThreads, 0);
  d.buffers[dfm::kRopeX] = f32(x, "rope x"), d.buffers[dfm::kRopeFreq] = f32(inv_freq, "rope inv_freq");
  dispatch(d);
}

void MetalOps::mla_attention(const MlaShape& s, const Weight& kv_b, const Tensor& q, const Tensor& cache_c,
                             const Tensor& cache_pe, int64_t start, const Tensor& out) {
  const int64_t n = q.rows;
  if (q.cols != s.heads * (s.nope + s.rope) || out.rows != n || out.cols != s.heads * s.v || cache_c.cols != s.kv_lora ||
      cache_pe.cols != s.rope || cache_c.rows < start + n || cache_pe.rows < start + n ||
      kv_b.rows != s.heads * (s.nope + s.v) || kv_b.cols != s.kv_lora || start < 0)
    fail("metal backend: mla_attention shapes: q [{}, {}], out [{}, {}], caches [{}, {}] and [{}, {}], kv_b [{}, {}], start {}",
         q.rows, q.cols, out.rows, out.cols, cache_c.rows, cache_c.cols, cache_pe.rows, cache_pe.cols, kv_b.rows, kv_b.cols,
         start);
  if (n == 0 || s.heads == 0) return;
  const BoundWeight bw = bind_weight(kv_b, "mla_attention kv_b");
  const dfm::MlaArgs a{bw.args,         mat(q),           mat(cache_c),     mat(cache_pe),        mat(out),
                       u32(s.heads, "heads"), u32(s.nope, "nope"), u32(s.rope, "rope"), u32(s.v, "v"),
                       u32(s.kv_lora, "kv_lora"), u32(start, "start"), s.scale};
  const uint32_t tg = static_cast<uint32_t>(s.nope + s.rope + 2 * s.kv_lora + dfm::kMlaCtxTile + dfm::kSimdgroups) * 4;
  Dispatch d = launch("df_mla_attention", a, u32(s.heads, "heads"), u32(n, "rows"), dfm::kThreads, tg);
  d.buffers[dfm::kMlaData] = bw.data, d.buffers[dfm::kMlaScales] = bw.scales;
  d.buffers[dfm::kMlaQ] = f32(q, "mla_attention q"), d.buffers[dfm::kMlaCacheC] = f32(cache_c, "mla_attention cache_c");
  d.buffers[dfm::kMlaCachePe] = f32(cache_pe, "mla_attention cache_pe"), d.buffers[dfm::kMlaOut] = f32(out, "mla_attention out");
  dispatch(d);
}

void MetalOps::kda(const KdaArgs& a) {
  const int64_t n = a.q.rows, ch = a.heads * a.head_dim;
  if (!kda_shapes_match(a))
    fail("metal backend: kda shapes do not match {} heads of {} over {} taps and {} tokens", a.heads, a.head_dim, a.taps, n);
  if (n == 0 || ch == 0) return;
  const std::shared_ptr<Buffer> conv_buffer = scratch(static_cast<uint64_t>(3 * n * ch) * 4);  // [3, n, ch]
  Buffer& conv = *conv_buffer;
  const dfm::KdaArgs k{mat(a.q), mat(a.k), mat(a.v), mat(a.beta), mat(a.decay), mat(a.window), mat(a.state), mat(a.out),
                       u32(a.heads, "heads"), u32(a.head_dim, "head_dim"), u32(a.taps, "taps"), u32(n, "rows"),
                       a.gate_lower_bound, a.norm_eps};
  Dispatch c = launch("df_kda_conv", k, blocks(3 * ch, dfm::kThreads), 1, dfm::kThreads, 0);
  c.buffers[dfm::kConvQ] = f32(a.q, "kda q"), c.buffers[dfm::kConvK] = f32(a.k, "kda k"), c.buffers[dfm::kConvV] = f32(a.v, "kda v");
  c.buffers[dfm::kConvWeightQ] = f32(a.conv_q, "kda conv_q"), c.buffers[dfm::kConvWeightK] = f32(a.conv_k, "kda conv_k");
  c.buffers[dfm::kConvWeightV] = f32(a.conv_v, "kda conv_v"), c.buffers[dfm::kConvWindow] = f32(a.window, "kda window");
  c.buffers[dfm::kConvOut] = {&conv, 0};
  dispatch(c);
  const uint32_t threads = static_cast<uint32_t>((a.head_dim + 31) / 32 * 32);
  if (threads > 1024) fail("metal backend: kda head_dim {} needs more than 1024 threads per threadgroup", a.head_dim);
  Dispatch delta = launch("df_kda_delta", k, u32(a.heads, "heads"), 1, threads, static_cast<uint32_t>(3 * a.head_dim + 32) * 4);
  delta.buffers[dfm::kDeltaBeta] = f32(a.beta, "kda beta"), delta.buffers[dfm::kDeltaDecay] = f32(a.decay, "kda decay");
  delta.buffers[dfm::kDeltaDtBias] = f32(a.dt_bias, "kda dt_bias"), delta.buffers[dfm::kDeltaRate] = f32(a.decay_rate, "kda decay_rate");
  delta.buffers[dfm::kDeltaState] = f32(a.state, "kda state"), delta.buffers[dfm::kDeltaOut] = f32(a.out, "kda out");
  delta.buffers[dfm::kDeltaConv] = {&conv, 0};
  dispatch(delta);
  hold(conv_buffer);
}

void MetalOps::attn_res_mix(std::span<const Tensor> candidates, const Tensor& query, float eps, const Tensor& out) {
  const int64_t n = out.rows, dim = out.cols, count = static_cast<int64_t>(candidates.size());
  if (count == 0 || count > dfm::kMaxMixCandidates || query.cols != dim)
    fail("metal backend: attn_res_mix of {} candidates into [{}, {}] with a query [1, {}] (1 to {} candidates)", count, n, dim,
         query.cols, int(dfm::kMaxMixCandidates));
  for (const Tensor& c : candidates) same_shape(c, out, "attn_res_mix");
  if (n == 0) return;
  const std::shared_ptr<Buffer> packed_buffer = scratch(static_cast<uint64_t>(count * n * dim) * 4);  // [count, n, dim]
  Buffer& packed = *packed_buffer;
  for (int64_t i = 0; i < count; ++i) copy(candidates[i], Tensor::of(packed, n, dim, Elem::F32, static_cast<uint64_t>(i * n * dim) * 4));
  const dfm::MixArgs a{mat(out), static_cast<uint32_t>(count), eps};
  Dispatch d = launch("df_attn_res_mix", a, u32(n, "rows"), 1, dfm::kThreads, (dfm::kSimdgroups + dfm::kMaxMixCandidates) * 4);
  d.buffers[dfm::kMixPacked] = {&packed, 0}, d.buffers[dfm::kMixQuery] = f32(query, "attn_res_mix query");
  d.buffers[dfm::kMixOut] = f32(out, "attn_res_mix out");
  dispatch(d);
  hold(packed_buffer);
}

void MetalOps::route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, const Tensor& ids, const Tensor& weights) {
  const int64_t n = logits.rows;
  if (logits.cols != spec.experts || ids.rows != n || weights.rows != n || ids.cols != spec.top_k ||
      weights.cols != spec.top_k || spec.top_k < 1 || spec.top_k > dfm::kMaxTopK || spec.n_group < 1 ||
      spec.n_group > dfm::kMaxGroups || spec.experts % spec.n_group != 0 || spec.top_k > spec.experts ||
      (bias.buffer && bias.cols != spec.experts))
    fail("metal backend: route of logits [{}, {}] into ids [{}, {}] for {} experts, top {} of {} groups", n, logits.cols, ids.rows,
         ids.cols, spec.experts, spec.top_k, spec.n_group);
  if (n == 0) return;
  const dfm::RouteArgs a{mat(logits), mat(ids), mat(weights), u32(spec.experts, "experts"), u32(spec.top_k, "top_k"),
                         u32(spec.n_group, "n_group"), u32(spec.topk_group, "topk_group"), spec.renormalize ? 1u : 0u,
                         bias.buffer ? 1u : 0u, spec.scaling};
  Dispatch d = launch("df_route", a, u32(n, "rows"), 1, dfm::kSimdWidth, static_cast<uint32_t>(3 * spec.experts) * 4);
  d.buffers[dfm::kRouteLogits] = f32(logits, "route logits");
  d.buffers[dfm::kRouteBias] = bias.buffer ? f32(bias, "route bias") : d.buffers[dfm::kRouteLogits];
  d.buffers[dfm::kRouteIds] = i32(ids, "route ids"), d.buffers[dfm::kRouteWeights] = f32(weights, "route weights");
  dispatch(d);
}

void MetalOps::expert_slots(const Tensor& ids, const Tensor& experts, const Tensor& lists, const Tensor& counts) {
  const int64_t n = ids.rows, count = experts.rows;
  if (ids.cols < 1 || ids.cols > dfm::kMaxTopK || experts.cols != 1 || lists.rows != count || lists.cols != n ||
      !lists.dense() || counts.rows != count || counts.cols != 1 || !counts.dense())
    fail("metal backend: expert_slots of ids [{}, {}] for {} experts into lists [{}, {}] and counts [{}, {}]", n, ids.cols, count,
         lists.rows, lists.cols, counts.rows, counts.cols);
  if (n == 0 || count == 0) return;
  const dfm::ExpertSlotsArgs a{mat(ids), u32(count, "experts")};
  Dispatch d = launch("df_expert_slots", a, u32(count, "experts"), 1, dfm::kSimdWidth, 0);
  d.buffers[dfm::kSlotsIds] = i32(ids, "expert_slots ids"), d.buffers[dfm::kSlotsExperts] = i32(experts, "expert_slots experts");
  d.buffers[dfm::kSlotsLists] = i32(lists, "expert_slots lists"), d.buffers[dfm::kSlotsCounts] = i32(counts, "expert_slots counts");
  dispatch(d);
}

// Per expert: gate + up + act on the rows that chose it into hidden by slot, and down into y by
// slot (df_matmul in expert mode, reading the expert's row of the slot lists).
void MetalOps::expert_ffn(std::span<const ResidentExpert> batch, const Tensor& x, const Tensor& lists, const Tensor& counts,
                          const GatedActivation& act, const Tensor& hidden, const Tensor& y) {
  const int64_t n = x.rows, in = x.cols, width = hidden.cols, k = n > 0 ? y.rows / n : 1;
  if (lists.cols != n || !lists.dense() || hidden.rows != n * k || y.rows != n * k || y.cols != in || k > dfm::kMaxTopK)
    fail("metal backend: expert_ffn over x [{}, {}] with lists [{}, {}], hidden [{}, {}] and y [{}, {}]", n, in, lists.rows,
         lists.cols, hidden.rows, hidden.cols, y.rows, y.cols);
  if (n == 0) return;
  const Dispatch::Bind list_rows = i32(lists, "expert_ffn lists"), count_rows = i32(counts, "expert_ffn counts");
  for (const ResidentExpert& e : batch) {
    if (e.list < 0 || e.list >= lists.rows) fail("metal backend: expert_ffn: list row {} of {}", e.list, lists.rows);
    const Dispatch::Bind slots{list_rows.buffer, list_rows.offset + static_cast<uint64_t>(e.list * n) * 4};
    const Dispatch::Bind n_slots{count_rows.buffer, count_rows.offset + static_cast<uint64_t>(e.list * counts.stride) * 4};
    const BoundWeight g = bind_weight(e.proj[0], "expert gate"), u = bind_weight(e.proj[1], "expert up");
    const BoundWeight dn = bind_weight(e.proj[2], "expert down");
    dfm::MatmulArgs a{};
    a.w0 = g.args, a.w1 = u.args, a.x = mat(x), a.y = mat(hidden);
    a.pair = 1, a.expert = 1, a.k = static_cast<uint32_t>(k), a.in_by_slot = 0, a.out_by_slot = 1;
    a.act = {static_cast<uint32_t>(act.kind), act.beta, act.linear_beta};
    Dispatch d = launch("df_matmul", a, blocks(width, dfm::kMatmulRowsPerGroup), u32(n, "rows"), dfm::kThreads, 0);
    d.buffers[dfm::kMatmulData0] = g.data, d.buffers[dfm::kMatmulScales0] = g.scales;
    d.buffers[dfm::kMatmulData1] = u.data, d.buffers[dfm::kMatmulScales1] = u.scales;
    d.buffers[dfm::kMatmulX] = f32(x, "expert_ffn x"), d.buffers[dfm::kMatmulY] = f32(hidden, "expert_ffn hidden");
    d.buffers[dfm::kMatmulSlots] = slots, d.buffers[dfm::kMatmulCount] = n_slots;
    dispatch(d);
    dfm::MatmulArgs b{};
    b.w0 = b.w1 = dn.args, b.x = mat(hidden), b.y = mat(y);
    b.expert = 1, b.k = static_cast<uint32_t>(k), b.in_by_slot = 1, b.out_by_slot = 1;
    Dispatch f = launch("df_matmul", b, blocks(in, dfm::kMatmulRowsPerGroup), u32(n, "rows"), dfm::kThreads, 0);
    f.buffers[dfm::kMatmulData0] = f.buffers[dfm::kMatmulData1] = dn.data;
    f.buffers[dfm::kMatmulScales0] = f.buffers[dfm::kMatmulScales1] = dn.scales;
    f.buffers[dfm::kMatmulX] = f32(hidden, "expert_ffn hidden"), f.buffers[dfm::kMatmulY] = f32(y, "expert_ffn y");
    f.buffers[dfm::kMatmulSlots] = slots, f.buffers[dfm::kMatmulCount] = n_slots;
    dispatch(f);
  }
}

void MetalOps::expert_combine(const Tensor& ids, const Tensor& weights, const Tensor& y, const Tensor& out) {
  const int64_t n = ids.rows, k = ids.cols;
  if (weights.rows != n || weights.cols != k || out.rows != n || y.rows != n * k || y.cols != out.cols || !y.dense() || k < 1 ||
      k > dfm::kMaxTopK)
    fail("metal backend: expert_combine of ids [{}, {}], weights [{}, {}] and y [{}, {}] into [{}, {}]", n, k, weights.rows,
         weights.cols, y.rows, y.cols, out.rows, out.cols);
  if (n == 0) return;
  const dfm::CombineArgs a{mat(ids), mat(weights), mat(out)};
  Dispatch d = launch("df_expert_combine", a, blocks(out.cols, dfm::kThreads), u32(n, "rows"), dfm::kThreads, dfm::kMaxTopK * 4);
  d.buffers[dfm::kCombineIds] = i32(ids, "expert_combine ids"), d.buffers[dfm::kCombineWeights] = f32(weights, "expert_combine weights");
  d.buffers[dfm::kCombineY] = f32(y, "expert_combine y"), d.buffers[dfm::kCombineOut] = f32(out, "expert_combine out");
  dispatch(d);
}

}  // namespace deltafin::metal
