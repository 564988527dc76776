// The routed experts' projections for a batch of up to kExpertBatch experts in one launch:
// blockIdx.y picks the expert, blockIdx.x a block of its rows. Each of the 8 warps of a block
// takes R consecutive rows (R = 4 for gate and up together, 8 for down: 8 weight rows in flight
// per lane either way); lane l reads 16-byte chunks l, l + 32, ... of each of its rows, loads the
// chunk's columns of x once for all of them, and runs every slot (t * k + j: row t chose the
// expert in place j) of the expert's compacted list, T slots per pass over the weights.
//
// MXFP4 is decoded without a lookup: a pair of E2M1 nibbles k and k + 4 of a 32-bit word goes
// by two shifts and one LOP3 into an fp16x2 whose halves are exactly e2m1 * 2^-14, converted to
// fp32 (exact). A chunk is one 32-column group: its 32 products are summed by fused multiply-add
// from zero, and the sum is multiplied into the row's sum by the group's power of two
// 2^(s - 113) (the E8M0 scale times 2^14), so an element costs two integer operations, a
// conversion and an FMA; the weights are the stored ones exactly, only the sum is grouped
// differently from the CPU's (within the parity harness's bound). Other formats decode through
// chunks.cuh, element by element.
//
// Order of each output element (batch invariance): per lane, its chunks ascending and each
// chunk's elements in index order by fused multiply-add (MXFP4: into the chunk's sum, then into
// the row's); then the lanes' sums by the fixed xor-shuffle tree. It depends on nothing but the row and the slot: not on the batch, the
// slot tile, n or the grid. No atomics.
#include <cuda_fp16.h>

#include "cuda/activation.cuh"
#include "cuda/chunks.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;

// Elements 8q .. 8q + 7 of an MXFP4 chunk (word q of its 16 bytes) times 2^-14, exactly.
__device__ __forceinline__ void mxfp4_word(uint32_t w, float out[8]) {
  const uint32_t pair[4] = {((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u),
                            ((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u),
                            ((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u),
                            ((w >> 3) & 0x0E000E00u) | (w & 0x80008000u)};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    out[k] = __half2float(__ushort_as_half(static_cast<unsigned short>(pair[k] & 0xffffu)));
    out[k + 4] = __half2float(__ushort_as_half(static_cast<unsigned short>(pair[k] >> 16)));
  }
}

// acc + sum * 2^(s - 127) * 2^14 for an E8M0 scale s: one FMA where 2^(s - 113) is a normal
// float (s <= 240), else in two steps (huge scales; s = 255 is NaN, as weight_at() gives).
__device__ __forceinline__ float add_group(float acc, float sum, uint32_t s) {
  if (s <= 240) return fmaf(sum, __uint_as_float((s + 14u) << 23), acc);
  return fmaf(sum * 0x1p14f, e8m0_to_f32(s), acc);
}

template <WeightFormat F, int NW, int R, int T>
__global__ void __launch_bounds__(kThreads) expert_matmul_kernel(const ExpertBatchArgs a) {
  constexpr int E = kChunkElems<F>;
  const int b = blockIdx.y, lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * R;
  if (row0 >= a.rows) return;  // whole warps; the kernel has no block-wide synchronisation
  const int64_t e = a.index[b], chunks = a.cols / E;
  const int32_t count = a.counts[e];
  const int32_t* list = a.lists + e * a.list_stride;
  WMat w[NW];
#pragma unroll
  for (int v = 0; v < NW; ++v) w[v] = {F, a.data[b][v], a.scales[b][v], a.rows, a.cols};
  const int64_t bytes_per_row = row_bytes(w[0]);

  for (int32_t first = 0; first < count; first += T) {
    const int m = count - first < T ? count - first : T;
    const float* x[T];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const int32_t slot = list[first + (t < m ? t : 0)];
      x[t] = a.in.row(a.in_by_slot ? slot : slot / a.k);
    }
    float acc[T][NW][R];
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int v = 0; v < NW; ++v)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[t][v][r] = 0.0f;

    for (int64_t c = lane; c < chunks; c += 32) {
      uint4 raw[NW][R];
      float scale[NW][R];
      uint32_t e8[NW][R];
#pragma unroll
      for (int v = 0; v < NW; ++v)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const bool ok = row0 + r < a.rows;
          raw[v][r] = ok ? __ldcs(reinterpret_cast<const uint4*>(w[v].data + (row0 + r) * bytes_per_row) + c)
                         : make_uint4(0, 0, 0, 0);
          if constexpr (F == WeightFormat::MXFP4) e8[v][r] = ok ? w[v].scales[(row0 + r) * (a.cols / 32) + c] : 127u;
          else scale[v][r] = ok ? chunk_scale<F>(w[v], row0 + r, c) : 0.0f;
        }
      if constexpr (F == WeightFormat::MXFP4) {
        float4 xv[T][8];  // the chunk's 32 columns of x, per slot
#pragma unroll
        for (int t = 0; t < T; ++t) {
          if (t >= m) break;
          const float4* p = reinterpret_cast<const float4*>(x[t] + c * E);
#pragma unroll
          for (int i = 0; i < 8; ++i) xv[t][i] = __ldg(p + i);
        }
#pragma unroll
        for (int v = 0; v < NW; ++v)
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float sum[T];
#pragma unroll
            for (int t = 0; t < T; ++t) sum[t] = 0.0f;
#pragma unroll
            for (int q = 0; q < 4; ++q) {  // word q: elements 8q .. 8q + 7 of the chunk
              const uint32_t word = q == 0 ? raw[v][r].x : q == 1 ? raw[v][r].y : q == 2 ? raw[v][r].z : raw[v][r].w;
              float wt[8];
              mxfp4_word(word, wt);
#pragma unroll
              for (int t = 0; t < T; ++t) {
                if (t >= m) break;
                const float4 xa = xv[t][2 * q], xb = xv[t][2 * q + 1];
                float s = sum[t];
                s = fmaf(wt[0], xa.x, s), s = fmaf(wt[1], xa.y, s), s = fmaf(wt[2], xa.z, s);
                s = fmaf(wt[3], xa.w, s), s = fmaf(wt[4], xb.x, s), s = fmaf(wt[5], xb.y, s);
                s = fmaf(wt[6], xb.z, s), s = fmaf(wt[7], xb.w, s);
                sum[t] = s;
              }
            }
#pragma unroll
            for (int t = 0; t < T; ++t)
              if (t < m) acc[t][v][r] = add_group(acc[t][v][r], sum[t], e8[v][r]);
          }
      } else {
#pragma unroll
        for (int q = 0; q < E / 4; ++q) {  // quad q: elements 4q .. 4q + 3 of the chunk
          float4 xq[T];
#pragma unroll
          for (int t = 0; t < T; ++t) {
            if (t >= m) break;
            xq[t] = __ldg(reinterpret_cast<const float4*>(x[t] + c * E + 4 * q));
          }
#pragma unroll
          for (int v = 0; v < NW; ++v)
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const float4 wt = decode_quad<F>(raw[v][r], q, scale[v][r]);
#pragma unroll
              for (int t = 0; t < T; ++t) {
                if (t >= m) break;
                float s = acc[t][v][r];
                s = fmaf(wt.x, xq[t].x, s), s = fmaf(wt.y, xq[t].y, s), s = fmaf(wt.z, xq[t].z, s);
                s = fmaf(wt.w, xq[t].w, s);
                acc[t][v][r] = s;
              }
            }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (t >= m) break;
      const int32_t slot = list[first + t];
      float* y = a.out.row(a.out_by_slot ? slot : slot / a.k);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float y0 = warp_sum(acc[t][0][r]);
        const float value = NW == 1 ? y0 : gated_act(a.act, y0, warp_sum(acc[t][NW - 1][r]));
        if (lane == 0 && row0 + r < a.rows) y[row0 + r] = value;
      }
    }
  }
}

template <WeightFormat F, int NW, int R>
cudaError_t launch_rows(const ExpertBatchArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.rows + kWarps * R - 1) / (kWarps * R)), static_cast<unsigned>(a.batch));
  // Slots of one expert are few in decode and verify passes (a row chooses an expert once): there
  // one slot a pass (the weights' re-reads hit L2) keeps the registers low; prefill takes 2.
  if (a.most_slots < 16) expert_matmul_kernel<F, NW, R, 1><<<grid, kThreads, 0, stream>>>(a);
  else expert_matmul_kernel<F, NW, R, 2><<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template <WeightFormat F>
cudaError_t launch_format(const ExpertBatchArgs& a, cudaStream_t stream) {
  return a.nw == 2 ? launch_rows<F, 2, 4>(a, stream) : launch_rows<F, 1, 8>(a, stream);
}

}  // namespace

bool expert_matmul_supported(const WMat& w) {
  return w.cols % chunk_elems(w.format) == 0 && vector_ok(w);
}

cudaError_t launch_expert_matmul(const ExpertBatchArgs& a, cudaStream_t stream) {
  if (a.batch == 0 || a.rows == 0) return cudaSuccess;
  if (a.batch > kExpertBatch || (a.nw != 1 && a.nw != 2)) return cudaErrorInvalidValue;
  switch (a.format) {
    case WeightFormat::F32: return launch_format<WeightFormat::F32>(a, stream);
    case WeightFormat::F16: return launch_format<WeightFormat::F16>(a, stream);
    case WeightFormat::BF16: return launch_format<WeightFormat::BF16>(a, stream);
    case WeightFormat::F8_E4M3_BLOCK128: return launch_format<WeightFormat::F8_E4M3_BLOCK128>(a, stream);
    case WeightFormat::MXFP4:
      return a.in_digits ? launch_expert_mxfp4_mma(a, stream) : launch_format<WeightFormat::MXFP4>(a, stream);
    case WeightFormat::INT4_G32: return launch_format<WeightFormat::INT4_G32>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace deltafin::cuda
