// The routed experts' MXFP4 projections on the int8 tensor cores (mma.m16n8k32.s8), with the
// weights exactly as stored and the activations as exact digit planes (digit_planes.cu).
//
// Work: blockIdx.y picks the expert of the batch, each warp one tile of 16 rows (of gate and up
// together, or of down) and streams it through shared memory by cp.async in stages of 4 groups
// of 32 columns (a 3-stage ring per warp, no block-wide synchronisation); the tile's E8M0 scales
// are staged once. A 32-column group is one mma's k: its A fragment comes from ldmatrix, each
// E2M1 nibble turned into an int8 by two byte-permutes (prmt in its sign-replicating mode):
//   P = prmt(Tp, c):      2 e2m1 + 1 for a positive nonzero code, 0 for a negative one;
//   Q = prmt(Tn, c ^ 8):  -2 e2m1 for a negative code, -1 for a positive nonzero one;
// so P + Q = 2 e2m1 exactly, and mma(P) then mma(Q) into one int32 accumulator sums it. The
// nibbles of a fragment word are columns 8t .. 8t + 7 of the group (t = lane % 4), taken as the
// mma's k = 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3; B (the digits) is read in the same order.
// B's 8 columns are two slots' four digit planes. Every such int32 sum is exact; per row and
// group the two planes a thread holds are combined exactly (d_even * 128 + d_odd < 2^24),
// converted, and added by fused multiply-add times the group's power of two 2^(s - 127) in
// ascending group order; the two halves (planes 0-1 and 2-3, lanes t and t ^ 1) are then
// joined as hi * 2^14 + lo and multiplied by the row of x's factor.
//
// Accuracy: the only approximations are x's rounding to 28 bits of its row's largest element
// and fp32 rounding of per-group sums, below the CPU's own fp32 summation error. Order
// (batch invariance): a slot's outputs depend only on its row of x and the weights, never on the
// other slots, the slot tile, n or the grid. No atomics. A NaN scale (255) gives an infinite or
// NaN group; infinite results are returned as NaN, so non-finite sums stay non-finite through
// any activation, as the CPU's NaN does.
#include <cmath>

#include "cuda/activation.cuh"
#include "cuda/ops.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kTileRows = 16, kStageGroups = 4, kStages = 3, kMaxWarps = 4;
constexpr int kRowPitch = kStageGroups * 16 + 16;  // 80 bytes: 8 rows fall in 8 distinct 16-byte bank groups
constexpr int kDigitTile = kStageGroups * 8 * 32;  // a stage's digits of one 8-column tile (2 slots x 4 planes)

// 2 e2m1 + (code != 0) and -2 e2m1 as int8, indexed by the 3-bit magnitude.
constexpr uint32_t kTpLo = 0x04030200u, kTpHi = 0x0D090705u;
constexpr uint32_t kTnLo = 0xFDFEFF00u, kTnHi = 0xF4F8FAFCu;

__host__ __device__ constexpr int64_t align16(int64_t v) { return (v + 15) / 16 * 16; }

// Shared memory of one warp: scales [NW][16][groups] (each projection's block rounded up to 16
// bytes), then kStages stages of weights [NW][16][kRowPitch] and digits [NT][kDigitTile].
__host__ __device__ constexpr int64_t stage_bytes(int nw, int nt) { return nw * kTileRows * kRowPitch + nt * kDigitTile; }
__host__ __device__ constexpr int64_t warp_smem_bytes(int nw, int nt, int64_t groups) {
  return nw * align16(kTileRows * groups) + kStages * stage_bytes(nw, nt);
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += A . B for the 16 x 32 int8 tile A and the 32 x 8 tile B.
__device__ __forceinline__ void mma_s8(int (&d)[4], const uint32_t (&a)[4], uint2 b) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

// The A fragments (P and Q) of one group from its words of rows g (w0) and g + 8 (w1).
__device__ __forceinline__ void decode(uint32_t w0, uint32_t w1, uint32_t (&p)[4], uint32_t (&q)[4]) {
  const uint32_t h0 = w0 >> 16, h1 = w1 >> 16;
  p[0] = prmt(kTpLo, kTpHi, w0), p[1] = prmt(kTpLo, kTpHi, w1);
  p[2] = prmt(kTpLo, kTpHi, h0), p[3] = prmt(kTpLo, kTpHi, h1);
  q[0] = prmt(kTnLo, kTnHi, w0 ^ 0x8888u), q[1] = prmt(kTnLo, kTnHi, w1 ^ 0x8888u);
  q[2] = prmt(kTnLo, kTnHi, h0 ^ 0x8888u), q[3] = prmt(kTnLo, kTnHi, h1 ^ 0x8888u);
}

template <int NW, int NT>
__global__ void __launch_bounds__(32 * kMaxWarps) mxfp4_mma_kernel(const ExpertBatchArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp) * kTileRows;
  if (row0 >= a.rows) return;  // whole warps; nothing here synchronises the block
  const int b = blockIdx.y;
  const int64_t e = a.index[b], groups = a.cols / 32, row_bytes = a.cols / 2;
  const int32_t count = a.counts[e];
  if (count == 0) return;
  const int32_t* list = a.lists + e * a.list_stride;
  const int stages = static_cast<int>((groups + kStageGroups - 1) / kStageGroups);
  const uint8_t* data[NW];
  const uint8_t* scales[NW];
#pragma unroll
  for (int v = 0; v < NW; ++v) data[v] = a.data[b][v], scales[v] = a.scales[b][v];

  uint8_t* mine = smem + warp * warp_smem_bytes(NW, NT, groups);
  const uint8_t* scale_at = mine;  // [NW][16][groups]
  const uint8_t* ring_at = mine + NW * align16(kTileRows * groups);
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(ring_at));

  // The tile's scales: one contiguous block of each projection.
  const int64_t valid_rows = a.rows - row0 < kTileRows ? a.rows - row0 : kTileRows;
  const int64_t scale_len = valid_rows * groups;
#pragma unroll
  for (int v = 0; v < NW; ++v) {
    const uint8_t* src = scales[v] + row0 * groups;
    uint8_t* dst = mine + v * align16(kTileRows * groups);
    if (reinterpret_cast<uintptr_t>(src) % 16 == 0) {
      const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
      for (int64_t i = lane; 16 * i < scale_len; i += 32)
        cp_async16(d + 16 * i, src + 16 * i, static_cast<int>(scale_len - 16 * i < 16 ? scale_len - 16 * i : 16));
    } else {
      for (int64_t i = lane; i < scale_len; i += 32) dst[i] = src[i];
    }
  }

  for (int32_t first = 0; first < count; first += 2 * NT) {
    const int m = count - first < 2 * NT ? count - first : 2 * NT;
    const int8_t* digit_row[2 * NT];  // each slot's digits [groups][4][32]
#pragma unroll
    for (int i = 0; i < 2 * NT; ++i) {
      const int32_t slot = list[first + (i < m ? i : 0)];
      digit_row[i] = a.in_digits + (a.in_by_slot ? slot : slot / a.k) * 4 * a.cols;
    }
    auto issue = [&](int s) {  // stage s into its buffer, always one commit group
      if (s < stages) {
        const uint32_t buf = ring + (s % kStages) * stage_bytes(NW, NT);
        for (int i = lane; i < NW * kTileRows * kStageGroups; i += 32) {
          const int v = i / (kTileRows * kStageGroups), r = (i / kStageGroups) % kTileRows, j = i % kStageGroups;
          const int64_t grp = static_cast<int64_t>(s) * kStageGroups + j;
          const bool ok = r < valid_rows && grp < groups;
          cp_async16(buf + (v * kTileRows + r) * kRowPitch + j * 16, ok ? data[v] + (row0 + r) * row_bytes + grp * 16 : data[v],
                     ok ? 16 : 0);
        }
        const uint32_t dbuf = buf + NW * kTileRows * kRowPitch;
        for (int i = lane; i < m * kStageGroups * 8; i += 32) {  // per slot and group: 128 bytes, 8 chunks
          const int slot = i / (kStageGroups * 8), j = (i / 8) % kStageGroups, c = i % 8;
          const int64_t grp = static_cast<int64_t>(s) * kStageGroups + j;
          const bool ok = grp < groups;
          const int tile = slot / 2, half = slot % 2;
          cp_async16(dbuf + tile * kDigitTile + (j * 8 + 4 * half) * 32 + c * 16,
                     ok ? digit_row[slot] + grp * 128 + c * 16 : digit_row[slot], ok ? 16 : 0);
        }
      }
      cp_commit();
    };

    float acc[NT][NW][2];
#pragma unroll
    for (int q = 0; q < NT; ++q)
#pragma unroll
      for (int v = 0; v < NW; ++v) acc[q][v][0] = acc[q][v][1] = 0.0f;

    __syncwarp();  // the previous pass's readers are done with the ring
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(s);
    for (int s = 0; s < stages; ++s) {
      cp_wait<kStages - 2>();
      __syncwarp();  // stage s (and the scales) landed for every lane; stage s - 1's readers are done
      issue(s + kStages - 1);
      const uint32_t buf = ring + (s % kStages) * stage_bytes(NW, NT);
      const uint8_t* digits_at = ring_at + (s % kStages) * stage_bytes(NW, NT) + NW * kTileRows * kRowPitch;
#pragma unroll
      for (int jj = 0; jj < kStageGroups; jj += 2) {
        uint32_t w[NW][4];  // rows g, g + 8 of group jj, then of group jj + 1
#pragma unroll
        for (int v = 0; v < NW; ++v)
          ldmatrix_x4(w[v], buf + (v * kTileRows + (lane & 15)) * kRowPitch + (jj + (lane >> 4)) * 16);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t grp = static_cast<int64_t>(s) * kStageGroups + jj + h;
          if (grp >= groups) break;
          float wf[NW][2];  // 2^(s - 127) of rows g and g + 8
#pragma unroll
          for (int v = 0; v < NW; ++v)
#pragma unroll
            for (int r = 0; r < 2; ++r)
              wf[v][r] = __uint_as_float(static_cast<uint32_t>(scale_at[v * align16(kTileRows * groups) + (g + 8 * r) * groups + grp]) << 23);
          uint32_t ap[NW][4], aq[NW][4];
#pragma unroll
          for (int v = 0; v < NW; ++v) decode(w[v][2 * h], w[v][2 * h + 1], ap[v], aq[v]);
#pragma unroll
          for (int q = 0; q < NT; ++q) {
            if (2 * q >= m) break;
            const uint2 bx = *reinterpret_cast<const uint2*>(digits_at + q * kDigitTile + ((jj + h) * 8 + g) * 32 + 8 * t);
#pragma unroll
            for (int v = 0; v < NW; ++v) {
              int d[4] = {0, 0, 0, 0};
              mma_s8(d, ap[v], bx);
              mma_s8(d, aq[v], bx);
              acc[q][v][0] = fmaf(static_cast<float>(d[0] * 128 + d[1]), wf[v][0], acc[q][v][0]);
              acc[q][v][1] = fmaf(static_cast<float>(d[2] * 128 + d[3]), wf[v][1], acc[q][v][1]);
            }
          }
        }
      }
    }

    // Join the planes: lanes t and t ^ 1 hold planes 0-1 (t even) and 2-3 of the same slot.
#pragma unroll
    for (int q = 0; q < NT; ++q) {
      if (2 * q >= m) break;
      const int slot_in_pass = 2 * q + (t >> 1);
      const bool writes = (t & 1) == 0 && slot_in_pass < m;
      const int32_t slot = list[first + (slot_in_pass < m ? slot_in_pass : 0)];
      const float f = a.in_factor[a.in_by_slot ? slot : slot / a.k];
      float* y = a.out.row(a.out_by_slot ? slot : slot / a.k);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float value[NW];
#pragma unroll
        for (int v = 0; v < NW; ++v) {
          const float own = acc[q][v][r], other = __shfl_xor_sync(0xffffffffu, own, 1);
          const float sum = fmaf(t & 1 ? other : own, 0x1p14f, t & 1 ? own : other) * f;
          value[v] = isinf(sum) ? NAN : sum;
        }
        const float out = NW == 1 ? value[0] : gated_act(a.act, value[0], value[NW - 1]);
        const int64_t row = row0 + g + 8 * r;
        if (writes && row < a.rows) y[row] = out;
      }
    }
  }
  cp_wait<0>();  // no copy outlives the kernel
}

template <int NW, int NT>
cudaError_t launch_tiles(const ExpertBatchArgs& a, cudaStream_t stream) {
  const int64_t per_warp = warp_smem_bytes(NW, NT, a.cols / 32);
  int warps = kMaxWarps;
  while (warps > 1 && warps * per_warp > 200 * 1024) --warps;
  const int64_t bytes = warps * per_warp;
  if (bytes > 227 * 1024) return cudaErrorInvalidValue;
  static int64_t allowed = 48 * 1024;  // per instantiation: the largest dynamic size opted into
  if (bytes > allowed) {
    const cudaError_t e = cudaFuncSetAttribute(mxfp4_mma_kernel<NW, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes));
    if (e != cudaSuccess) return e;
    allowed = bytes;
  }
  const int64_t rows_per_block = warps * kTileRows;
  const dim3 grid(static_cast<unsigned>((a.rows + rows_per_block - 1) / rows_per_block), static_cast<unsigned>(a.batch));
  mxfp4_mma_kernel<NW, NT><<<grid, 32 * warps, static_cast<size_t>(bytes), stream>>>(a);
  return cudaGetLastError();
}

template <int NW>
cudaError_t launch_slots(const ExpertBatchArgs& a, cudaStream_t stream) {
  // Decode gives an expert one slot (a row chooses an expert once): one 8-column tile; verify
  // passes and prefill give several: four tiles, eight slots a pass over the weights.
  return a.most_slots <= 2 ? launch_tiles<NW, 1>(a, stream) : launch_tiles<NW, 4>(a, stream);
}

}  // namespace

cudaError_t launch_expert_mxfp4_mma(const ExpertBatchArgs& a, cudaStream_t stream) {
  if (a.batch == 0 || a.rows == 0) return cudaSuccess;
  if (a.format != WeightFormat::MXFP4 || a.cols % 32 != 0 || !a.in_digits || !a.in_factor || a.batch > kExpertBatch)
    return cudaErrorInvalidValue;
  return a.nw == 2 ? launch_slots<2>(a, stream) : a.nw == 1 ? launch_slots<1>(a, stream) : cudaErrorInvalidValue;
}

}  // namespace deltafin::cuda
