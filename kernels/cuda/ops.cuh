// Host entry points of the CUDA kernels: each enqueues one op on `stream` and returns the launch
// status (cudaGetLastError). Shapes are in the comments; every FMat/IMat is strided. The backend
// (src/backend/cuda/cuda_backend.cu) builds the views and checks shapes; these only launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/views.cuh"
#include "op_params.hpp"

namespace deltafin::cuda {

// --- matmul.cu ---------------------------------------------------------------------------
// y [n, w.rows] = x [n, w.cols] . W^T. Expert mode (slots != nullptr): the x rows are the
// `*count` slots of the list (slot = t * k + j: x row t chose the expert in place j); x row of a
// slot: in_by_slot ? slot : slot / k, y row: out_by_slot ? slot : slot / k. With two weights
// (gate, up of the same shape) y = act(x . gate^T, x . up^T).
struct MatmulArgs {
  WMat w[2];
  int nw = 1;                        // 1, or 2 for gate and up
  FMat in, out;
  int64_t n = 0;                     // plain: x rows; expert mode: the list's capacity
  const int32_t* slots = nullptr;    // expert mode: [n] slot list
  const int32_t* count = nullptr;    // expert mode: its length, on the device
  int64_t k = 1;
  bool in_by_slot = false, out_by_slot = false;
  GatedActivation act;
};
cudaError_t launch_matmul(const MatmulArgs& a, cudaStream_t stream);

// --- expert_matmul.cu ---------------------------------------------------------------------
// One projection (nw = 1: down) or two (nw = 2: gate and up, activated) of a batch of experts,
// each weight [rows, cols] in `format`: for batch entry b (union index index[b]) and each slot of
// its list (lists [union, list_stride], counts [union], on the device), out[slot or slot / k] =
// x[slot or slot / k] . W^T. most_slots bounds every count (n). Weights must satisfy
// expert_matmul_supported() (whole 16-byte chunks, aligned rows); x rows 16-byte aligned.
inline constexpr int kExpertBatch = 32;
struct ExpertBatchArgs {
  WeightFormat format = WeightFormat::F32;
  int nw = 1, batch = 0;
  int64_t rows = 0, cols = 0;
  const uint8_t* data[kExpertBatch][2] = {};
  const uint8_t* scales[kExpertBatch][2] = {};
  const int32_t* lists = nullptr;
  const int32_t* counts = nullptr;
  int32_t index[kExpertBatch] = {};  // each entry's row of lists and counts
  int64_t list_stride = 0, k = 1, most_slots = 1;
  FMat in, out;
  bool in_by_slot = false, out_by_slot = false;
  GatedActivation act;
  // MXFP4 only: the digit planes of `in` (digit_planes.cu), which its tensor-core kernel reads
  // instead of `in` (expert_mxfp4_mma.cu); without them MXFP4 takes the fp32 kernel.
  const int8_t* in_digits = nullptr;
  const float* in_factor = nullptr;
};
bool expert_matmul_supported(const WMat& w);
cudaError_t launch_expert_matmul(const ExpertBatchArgs& a, cudaStream_t stream);

// --- expert_mxfp4_mma.cu -------------------------------------------------------------------
// The same op for MXFP4 weights on the int8 tensor cores, from in_digits / in_factor; weight and
// scale rows as expert_matmul_supported() requires.
cudaError_t launch_expert_mxfp4_mma(const ExpertBatchArgs& a, cudaStream_t stream);

// --- digit_planes.cu ---------------------------------------------------------------------
// x [rows, cols] (cols % 32 == 0) -> digits [rows, cols / 32, 4, 32] int8 and factor [rows]:
// x = factor * 2 * sum_p digits_p 128^(3 - p) to 28 bits of the row's largest element.
cudaError_t launch_digit_planes(const FMat& x, int8_t* digits, float* factor, cudaStream_t stream);

// --- experts.cu ----------------------------------------------------------------------------
// For each of `experts` union ids [count] (device), the slots choosing it: lists [count, n],
// row i holding counts[i] slots t * k + j in ascending t. ids [n, k].
cudaError_t launch_expert_slots(const IMat& ids, const int32_t* experts, int64_t count, int32_t* lists,
                                int32_t* counts, cudaStream_t stream);
// out [n, cols] = per row t, sum over j in ascending ids[t, j] of weights[t, j] * y[t * k + j]
// (y [n * k, cols] dense), accumulated by fused multiply-add from zero.
cudaError_t launch_expert_combine(const IMat& ids, const FMat& weights, const float* y, const FMat& out,
                                  cudaStream_t stream);

// --- embed.cu ------------------------------------------------------------------------------
// out [n, cols] = row ids[t] of the table, dequantized exactly; ids [n, 1].
cudaError_t launch_embed(const WMat& table, const IMat& ids, const FMat& out, cudaStream_t stream);

// --- elementwise.cu ------------------------------------------------------------------------
// All [rows, cols]; out may alias an input.
cudaError_t launch_fill(const FMat& out, float value, cudaStream_t stream);
cudaError_t launch_add(const FMat& a, const FMat& b, const FMat& out, cudaStream_t stream);
cudaError_t launch_mul_sigmoid(const FMat& x, const FMat& gate, const FMat& out, cudaStream_t stream);
cudaError_t launch_gated(const GatedActivation& act, const FMat& gate, const FMat& up, const FMat& out,
                         cudaStream_t stream);

// --- rmsnorm.cu ----------------------------------------------------------------------------
// out [n, cols] = x / sqrt(mean(x^2) + eps) * weight [1, cols]; out may alias x.
cudaError_t launch_rmsnorm(const FMat& x, const float* weight, float eps, const FMat& out, cudaStream_t stream);

// --- rope.cu -------------------------------------------------------------------------------
// Interleaved RoPE in place on x [n, heads * head_dim] (see Backend::rope); inv_freq [half].
cudaError_t launch_rope(const FMat& x, int64_t heads, int64_t head_dim, int64_t offset, const float* inv_freq,
                        int64_t half, float attention_factor, int64_t start, cudaStream_t stream);

// --- mla_attention.cu ----------------------------------------------------------------------
// Absorbed MLA of q [n, heads * (nope + rope)] at positions start..start + n - 1 over
// cache_c [>= start + n, kv_lora] and cache_pe [.., rope]; out [n, heads * v].
cudaError_t launch_mla_attention(const MlaShape& s, const WMat& kv_b, const FMat& q, const FMat& cache_c,
                                 const FMat& cache_pe, int64_t start, const FMat& out, cudaStream_t stream);

// --- kda.cu --------------------------------------------------------------------------------
struct KdaViews {
  int64_t heads = 0, head_dim = 0, taps = 0;
  float gate_lower_bound = 0, norm_eps = 0;
  FMat q, k, v, beta, decay;   // [n, ch], [n, heads]
  FMat conv_q, conv_k, conv_v; // [ch, taps]
  const float* dt_bias = nullptr;     // [ch]
  const float* decay_rate = nullptr;  // [heads]
  FMat window, state, out;     // [3 (taps - 1), ch], [heads * head_dim, head_dim], [n, ch]
  float* conv = nullptr;       // workspace [3, n, ch]: q, k, v after the convolution and SiLU
};
// Shared memory the delta-rule kernel needs per head (its state), for the caller's check.
size_t kda_shared_bytes(int64_t head_dim);
cudaError_t launch_kda(const KdaViews& a, cudaStream_t stream);

// --- attn_res_mix.cu -----------------------------------------------------------------------
inline constexpr int kMaxMixCandidates = 64;
struct MixCandidates {
  const float* p[kMaxMixCandidates];
  int64_t stride[kMaxMixCandidates];
  int count = 0;
};
// out [n, dim] = per row the softmax mix of the candidates (each [n, dim]); query [dim].
cudaError_t launch_attn_res_mix(const MixCandidates& c, const float* query, float eps, const FMat& out,
                                cudaStream_t stream);

// --- router.cu -----------------------------------------------------------------------------
// Top-k routing per row of logits [n, experts]; bias [experts] or nullptr; ids [n, top_k]
// ascending, weights [n, top_k]. Identical choices to cpu::route_token.
inline constexpr int64_t kMaxRouteTopK = 64;
cudaError_t launch_route(const RouterSpec& spec, const FMat& logits, const float* bias, const Mat<int32_t>& ids,
                         const FMat& weights, cudaStream_t stream);

}  // namespace deltafin::cuda
