// Kimi Delta Attention over n tokens (Backend::kda, cpu/k3_ops.hpp), in two kernels:
//   conv   one thread per channel of q, k and v: the causal depthwise convolution over the
//          carried window and the new inputs (taps ascending), SiLU, then the window updated to
//          the last taps - 1 inputs; writes the workspace [3, n, ch].
//   delta  one block per head, one thread per value column j, the head's state S [K, V] in
//          shared memory for all n tokens. Per token: q and k l2-normalised (block tree sums),
//          beta and the decays prepared, then thread j runs the CPU's column recurrence:
//          S[c, j] *= alpha[c] and du += k[c] S[c, j] (c ascending); du = beta (v[j] - du);
//          S[c, j] += k[c] du and o += q[c] S[c, j] (c ascending).
// A token's result depends only on the state it finds, so n tokens in one op equal n one-token
// ops bit for bit.
#include "cuda/activation.cuh"
#include "cuda/ops.cuh"
#include "cuda/reduce.cuh"

namespace deltafin::cuda {
namespace {

constexpr int kConvThreads = 128;

__global__ void __launch_bounds__(kConvThreads) conv_kernel(const KdaViews a) {
  const int64_t ch = a.heads * a.head_dim, n = a.q.rows, hist = a.taps - 1;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kConvThreads + threadIdx.x;
  if (idx >= 3 * ch) return;
  const int64_t which = idx / ch, c = idx % ch;  // q, k or v; channel
  const FMat& u = which == 0 ? a.q : which == 1 ? a.k : a.v;
  const FMat& w = which == 0 ? a.conv_q : which == 1 ? a.conv_k : a.conv_v;
  float* window = a.window.row(which * hist) + c;  // [hist] oldest first, a.window.stride apart
  float* y = a.conv + which * n * ch + c;
  for (int64_t t = 0; t < n; ++t) {
    float acc = 0.0f;
    for (int64_t j = 0; j < a.taps; ++j) {
      const int64_t src = t - hist + j;  // < 0: from the carried window
      const float x = src >= 0 ? u.row(src)[c] : window[(hist + src) * a.window.stride];
      acc = fmaf(w.row(c)[j], x, acc);
    }
    y[t * ch] = acc / (1.0f + expf(-acc));
  }
  // The last hist inputs; in place in ascending order, as entry i reads entry n + i > i.
  for (int64_t i = 0; i < hist; ++i) {
    const int64_t src = n - hist + i;
    window[i * a.window.stride] = src >= 0 ? u.row(src)[c] : window[(hist + src) * a.window.stride];
  }
}

// Block: head_dim threads rounded up to whole warps. Shared: S [K * V], then q, k, alpha [K].
__global__ void delta_kernel(const KdaViews a) {
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  const int64_t K = a.head_dim, V = a.head_dim, ch = a.heads * a.head_dim, n = a.q.rows;
  const int64_t h = blockIdx.x, j = threadIdx.x;
  float* S = smem;
  float* q = S + K * V;
  float* k = q + K;
  float* alpha = k + K;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(K));
  const float* qc = a.conv + h * K;
  const float* kc = a.conv + n * ch + h * K;
  const float* vc = a.conv + 2 * n * ch + h * V;
  const float rate = a.decay_rate[h];

  for (int64_t i = threadIdx.x; i < K * V; i += blockDim.x) S[i] = a.state.row(h * K + i / V)[i % V];
  for (int64_t t = 0; t < n; ++t) {
    const float qv = j < K ? qc[t * ch + j] : 0.0f, kv = j < K ? kc[t * ch + j] : 0.0f;
    const float q_inv = q_scale / sqrtf(block_sum(qv * qv, scratch) + a.norm_eps);
    const float k_inv = 1.0f / sqrtf(block_sum(kv * kv, scratch) + a.norm_eps);
    if (j < K) {
      q[j] = qv * q_inv;
      k[j] = kv * k_inv;
      alpha[j] = expf(a.gate_lower_bound * sigmoid(rate * (a.decay.row(t)[h * K + j] + a.dt_bias[h * K + j])));
    }
    const float beta = sigmoid(a.beta.row(t)[h]);
    __syncthreads();
    if (j < V) {
      float du = 0.0f;
      for (int64_t c = 0; c < K; ++c) {
        const float s = S[c * V + j] * alpha[c];
        S[c * V + j] = s;
        du = fmaf(k[c], s, du);
      }
      du = beta * (vc[t * ch + j] - du);
      float o = 0.0f;
      for (int64_t c = 0; c < K; ++c) {
        const float s = fmaf(k[c], du, S[c * V + j]);
        S[c * V + j] = s;
        o = fmaf(q[c], s, o);
      }
      a.out.row(t)[h * V + j] = o;
    }
    __syncthreads();  // q, k and alpha are rewritten for the next token
  }
  for (int64_t i = threadIdx.x; i < K * V; i += blockDim.x) a.state.row(h * K + i / V)[i % V] = S[i];
}

}  // namespace

size_t kda_shared_bytes(int64_t head_dim) { return static_cast<size_t>(head_dim * head_dim + 3 * head_dim) * sizeof(float); }

cudaError_t launch_kda(const KdaViews& a, cudaStream_t stream) {
  const int64_t ch = a.heads * a.head_dim;
  if (a.q.rows == 0 || ch == 0) return cudaSuccess;
  conv_kernel<<<static_cast<unsigned>((3 * ch + kConvThreads - 1) / kConvThreads), kConvThreads, 0, stream>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const size_t smem = kda_shared_bytes(a.head_dim);
  if (smem > 48 * 1024) {
    e = cudaFuncSetAttribute(delta_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const unsigned threads = static_cast<unsigned>((a.head_dim + 31) / 32 * 32);
  delta_kernel<<<static_cast<unsigned>(a.heads), threads, smem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace deltafin::cuda
