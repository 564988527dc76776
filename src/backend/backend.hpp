// The device boundary every backend implements (CPU, CUDA and Metal): memory the
// backend owns, an asynchronous command stream, and the op set over n positions. The model
// calls nothing else.
//
// Memory (backend/tensor.hpp). Weights, the KV cache, recurrent state and activations live in
// buffers the backend allocates; wrap() makes a buffer of existing host memory (no copy where
// the device can read host memory: the CPU, Apple unified memory at 16 KiB alignment).
// memory_pools() says what memory there is: the host's first, the device's (where allocate()
// and allocate_slots() take from) last; one pool where they are the same memory (CPU, Metal).
//
// Commands. Ops and transfers are enqueued in order and run in that order; the host never sees
// a result before it asks for it. commit() ends a batch and returns its fence; wait() blocks
// until a fence has passed; download() waits for everything enqueued and copies a result to the
// host. The model downloads at one point of a pass besides the logits: after each MoE layer's
// router, the chosen expert ids, because the expert store must issue the reads. Host memory
// given to upload() may be reused when the call returns; upload() takes effect after the ops
// enqueued before it. The CPU backend runs each op when it is
// enqueued, so its fences have passed by the time commit() returns.
//
// Experts. The routed-experts op is three stateless ops that model/expert_driver.hpp runs for
// every backend: expert_slots (each expert's slot list from the routing), expert_ffn (a batch of
// resident experts over their slots, outputs by slot) and expert_combine (each row's outputs
// summed in ascending expert order). The driver acquires experts as their reads land and hands
// each pin to hold_until() with the fence after the commands that read it: a slot is never
// reused under a running kernel. Whatever order experts run in, the sum per row is taken in
// ascending expert order by expert_combine alone.
//
// Exactness. Every op is batch-invariant: row t of an n-row call equals a one-row call on row t
// (fixed reduction order; work split over rows or heads, never inside a sum; nothing depends on
// n or on the thread count). Each op has a reference twin in the parity harness
// (tests/test_backend_ops.cpp) with its error bound.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/tensor.hpp"
#include "op_params.hpp"

namespace deltafin {

// One resident expert of an expert_ffn batch: its projections, gate [width, in], up [width, in]
// and down [in, width], and its row of the slot lists (its place in the pass's union).
struct ResidentExpert {
  std::array<Weight, 3> proj;
  int64_t list = 0;
};

// Tensors of one Kimi Delta Attention layer over n tokens (kda()). ch = heads * head_dim.
struct KdaArgs {
  int64_t heads = 0, head_dim = 0, taps = 0;
  float gate_lower_bound = 0, norm_eps = 0;
  Tensor q, k, v;                 // [n, ch] projections before the short convolution
  Tensor beta;                    // [n, heads] b_proj, before the sigmoid
  Tensor decay;                   // [n, ch] f_b_proj(f_a_proj x), before dt_bias and the gate
  Tensor conv_q, conv_k, conv_v;  // [ch, taps] depthwise convolution weights
  Tensor dt_bias;                 // [1, ch]
  Tensor decay_rate;              // [1, heads] exp(A_log)
  Tensor window;                  // [3 * (taps - 1), ch] the last taps - 1 inputs of q, k, v (updated)
  Tensor state;                   // [heads * head_dim, head_dim] S_h [K, V] per head (updated)
  Tensor out;                     // [n, ch] the delta rule's output, before o_norm
};

// Whether the tensors have the shapes above (n = q.rows); the parameters as the CPU reads them:
// dense, of ch * taps, ch and heads elements whatever their shape ([ch, taps] or [1, ch * taps]).
inline bool kda_shapes_match(const KdaArgs& a) {
  const int64_t n = a.q.rows, ch = a.heads * a.head_dim, hist = a.taps - 1;
  auto shaped = [](const Tensor& t, int64_t rows, int64_t cols) { return t.rows == rows && t.cols == cols; };
  auto dense = [](const Tensor& t, int64_t elements) { return t.dense() && t.elements() == elements; };
  return a.taps >= 1 && shaped(a.q, n, ch) && shaped(a.k, n, ch) && shaped(a.v, n, ch) && shaped(a.beta, n, a.heads) &&
         shaped(a.decay, n, ch) && dense(a.conv_q, ch * a.taps) && dense(a.conv_k, ch * a.taps) &&
         dense(a.conv_v, ch * a.taps) && dense(a.dt_bias, ch) && dense(a.decay_rate, a.heads) &&
         shaped(a.window, 3 * hist, ch) && shaped(a.state, ch, a.head_dim) && shaped(a.out, n, ch);
}

// A pool of memory a backend allocates from (Backend::memory_pools()).
struct MemoryPool {
  std::string name;           // "host", "host (pinned)", "device", "unified"
  bool host_visible = false;  // the host reads and writes it directly (Buffer::host())
  uint64_t size = 0;          // bytes in all (0: unknown)
  uint64_t free = 0;          // bytes this process can still take now (0: unknown)
  int sharers = 1;            // processes of this run that plan in it (MPI ranks sharing one GPU)
};

// The host's memory as one pool named `name`: the machine's physical memory, and what this
// process can still take (util/memory_available: MemAvailable and the cgroups' room).
MemoryPool host_memory_pool(const char* name = "host");

// Where a device backend's time went (Backend::times()), measured only when asked for: on CUDA
// with DELTAFIN_DEVICE_PROFILE=1 (an event pair around each op; the copies timed on the host).
struct DeviceTimes {
  double spine_seconds = 0;   // ops other than the expert op
  double expert_seconds = 0;  // the expert op's kernels
  double upload_seconds = 0;  // upload_slot copies (on the readers' threads, overlapping the rest)
  uint64_t upload_bytes = 0;
};

class Backend {
 public:
  using Fence = uint64_t;

  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // What runs the ops, for the receipt: "cpu (AVX3_DL, 2 threads)", "cuda (NVIDIA H200, ...)".
  virtual std::string describe() const { return name(); }
  virtual int threads() const = 0;
  // Device time so far, for the receipt; all 0 where not measured (the CPU backend).
  virtual DeviceTimes times() const { return {}; }

  // --- memory ---------------------------------------------------------------------------
  // The pools: front() the host's (allocate_host), back() the device's (allocate, allocate_slots);
  // the same single pool where the host can write the device's memory (the default: the CPU's).
  virtual std::vector<MemoryPool> memory_pools() const { return {host_memory_pool()}; }
  virtual std::unique_ptr<Buffer> allocate(uint64_t bytes) = 0;
  // The expert slot pool, allocated once, 2 MiB-aligned, which ops read. CPU: host memory that
  // O_DIRECT reads land in; Metal: one shared-storage buffer; CUDA: device memory (the VRAM
  // expert cache; host() is null, so reads land in allocate_host staging slots first).
  virtual std::unique_ptr<Buffer> allocate_slots(uint64_t bytes) = 0;
  // Host memory the device copies from fastest (pinned on CUDA), 2 MiB-aligned: where expert
  // reads land before upload_slot() when the slot pool is not host-visible.
  virtual std::unique_ptr<Buffer> allocate_host(uint64_t bytes) = 0;
  virtual std::unique_ptr<Buffer> wrap(std::byte* host, uint64_t bytes) = 0;  // memory outlives the buffer
  virtual void upload(const void* src, Buffer& dst, uint64_t offset, uint64_t bytes) = 0;
  // Staged bytes (in an allocate_host buffer) into a buffer the host cannot write (the slot pool,
  // a streamed spine unit's window slot) that no op in flight reads, from any thread (the
  // reader's), on a copy queue that does not wait for the ops in flight; returns when the copy is
  // complete, so the staging memory may be reused and later ops see the bytes (io/landing.hpp).
  virtual void upload_slot(const Buffer& staging, uint64_t staging_offset, Buffer& slots, uint64_t offset,
                           uint64_t bytes) = 0;
  virtual void download(const Tensor& src, void* dst) = 0;  // dst [rows, cols], dense
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;  // same shape
  virtual void fill(const Tensor& dst, float value) = 0;

  // --- commands ---------------------------------------------------------------------------
  virtual Fence commit() = 0;
  virtual void wait(Fence fence) = 0;

  // --- ops over n rows (positions) ----------------------------------------------------------
  // y [n, w.rows] = x [n, w.cols] . W^T
  virtual void matmul(const Weight& w, const Tensor& x, const Tensor& y) = 0;
  // out [n, cols] = row ids[t] of the table, dequantized; ids [n, 1] I32.
  virtual void embed(const Weight& table, const Tensor& ids, const Tensor& out) = 0;
  // out = x / sqrt(mean(x^2) + eps) * weight, per row; weight [1, cols]; out may alias x.
  virtual void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) = 0;
  // out = a + b; out may alias either.
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = x * sigmoid(gate); out may alias x.
  virtual void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& out) = 0;
  // out = act(gate, up) (SiLU: silu(gate) * up; SiTU: cpu/k3_ops.hpp); out may alias gate.
  virtual void gated(const GatedActivation& act, const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  // Interleaved RoPE in place: in row t (position start + t) and head h, the pairs
  // (x[h * head_dim + offset + 2i], x[... + 2i + 1]) turn by (start + t) * inv_freq[i], scaled by
  // attention_factor. inv_freq [1, rope / 2].
  virtual void rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const Tensor& inv_freq,
                    float attention_factor, int64_t start) = 0;
  // MLA for n queries q [n, heads * (nope + rope)] at positions start..start + n - 1, each over
  // the cache rows [0, its position]: cache_c [>= start + n, kv_lora], cache_pe [.., rope];
  // out [n, heads * v].
  virtual void mla_attention(const MlaShape& shape, const Weight& kv_b, const Tensor& q, const Tensor& cache_c,
                             const Tensor& cache_pe, int64_t start, const Tensor& out) = 0;
  // Kimi Delta Attention over n tokens in one op: the short convolutions and SiLU, the l2-norm
  // of q (scaled by head_dim^-0.5) and k, beta = sigmoid(beta), decay = exp(lower_bound *
  // sigmoid(decay_rate * (decay + dt_bias))), then the delta rule token by token.
  virtual void kda(const KdaArgs& args) = 0;
  // Attention-Residuals mix per row over candidates [n, dim] each (the live sum last); query [1, dim].
  virtual void attn_res_mix(std::span<const Tensor> candidates, const Tensor& query, float eps, const Tensor& out) = 0;
  // Top-k routing per row of logits [n, experts] (fp32); bias [1, experts] or none (buffer
  // nullptr); ids [n, k] I32 ascending per row, weights [n, k].
  virtual void route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, const Tensor& ids,
                     const Tensor& weights) = 0;
  // The slot lists of a pass's experts: for each expert e of `experts` [count, 1] I32 (the union
  // of ids [n, k], ascending), lists [count, n] I32 holds in row e the counts[e] slots t * k + j
  // with ids[t, j] == experts[e], t ascending; counts [count, 1] I32.
  virtual void expert_slots(const Tensor& ids, const Tensor& experts, const Tensor& lists, const Tensor& counts) = 0;
  // A batch of resident experts (at most expert_batch()): for each, over the slots of its row of
  // lists (t * k + j: x row t), y[slot] = down(act(gate x[t], up x[t])). x [n, in], y [n k, in];
  // slots of other experts untouched. hidden [n k, width] is the op's workspace (by slot).
  virtual void expert_ffn(std::span<const ResidentExpert> batch, const Tensor& x, const Tensor& lists,
                          const Tensor& counts, const GatedActivation& act, const Tensor& hidden, const Tensor& y) = 0;
  // out [n, in] = per row t, from zero, weights[t, j] * y[t k + j] added in ascending order of
  // ids[t, j] (ascending expert order, whatever order the experts ran in).
  virtual void expert_combine(const Tensor& ids, const Tensor& weights, const Tensor& y, const Tensor& out) = 0;
  // How many experts one expert_ffn call takes at most.
  virtual int64_t expert_batch() const { return 1; }
  // Keeps `pin` (an expert's slot) alive until `fence` has passed; it is let go at the latest in
  // the wait() that sees that fence pass.
  virtual void hold_until(Fence fence, std::shared_ptr<const void> pin) = 0;
};

// The CPU backend with `threads` workers (0: one per CPU this process can use: util/cpus_available.hpp).
std::unique_ptr<Backend> make_cpu_backend(int threads);

// The CUDA backend on `device`, which `sharers` processes of this run use (MPI ranks on one GPU:
// its device pool says so, and each takes its share of the default budget); throws
// deltafin::Error in one line when the build has no CUDA (configure with -DDELTAFIN_CUDA=ON) or
// no such device is present.
std::unique_ptr<Backend> make_cuda_backend(int device = 0, int sharers = 1);
int cuda_device_count();  // 0 without CUDA or a driver
bool cuda_device_present();

// The Metal backend on the system's default GPU (Apple Silicon); throws deltafin::Error in one
// line when the build has no Metal (any build but macOS) or no device is present.
std::unique_ptr<Backend> make_metal_backend();
bool metal_device_present();

}  // namespace deltafin
