// The CUDA backend (backend.hpp): buffers of cuda_buffer.hpp, one compute stream on which every
// op and transfer is enqueued in order, fences as events on it (fence_queue.hpp), and the
// kernels of kernels/cuda, each computing what the CPU backend's op computes, batch-invariant
// (the kernel files give their mappings and reduction orders). Shapes are checked here, on the
// host; a mismatch is a one-line error naming the op.
//
// Experts. The slot pool is device memory: the VRAM expert cache, as large as --cache-gb. The
// expert store reads each record into one of its pinned host staging slots (allocate_host) and,
// on the reader's thread, upload_slot() copies it into its slot on the copy stream and waits for
// that copy; only then is the expert resident, so a kernel enqueued after it was acquired reads
// a complete record, while the compute stream keeps running what was enqueued before (the copies
// of a layer's misses overlap the kernels of the experts that already arrived; the host's
// ordering stands in for an event between the two streams). expert_ffn() takes up to
// kExpertBatch experts, two launches for all of them; the pins the driver hands to hold_until()
// ride on the fence after those launches and are released once it has passed (fence_queue.hpp).
#include <algorithm>
#include <chrono>
#include <array>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_buffer.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/fence_queue.hpp"
#include "backend/cuda/op_timer.hpp"
#include "cuda/ops.cuh"
#include "util/human_bytes.hpp"

namespace deltafin {
namespace {

using cuda::check;
using cuda::CudaBuffer;

// Stored bytes of a weight's data and of its scales (cpu/weight_format.hpp).
uint64_t data_bytes(const Weight& w) { return stored_data_bytes(w.format, w.rows, w.cols); }
uint64_t scale_bytes(const Weight& w) { return stored_scale_bytes(w.format, w.rows, w.cols); }

uint64_t align256(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

// Whether host memory is page-locked (the device may still be reading it after an async copy returns).
bool page_locked(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, int sharers) : device_(device), sharers_(std::max(1, sharers)) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) (void)cudaGetLastError();
    if (status != cudaSuccess || device < 0 || device >= count)
      fail("--backend cuda: no CUDA device {} on this machine ({})", device,
           status != cudaSuccess ? cudaGetErrorString(status) : fmt::format("{} present", count));
    bind();
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (copy)");
    check(cudaDeviceGetAttribute(&max_shared_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
    cudaDeviceProp props{};
    check(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties");
    description_ = fmt::format("cuda ({}, {:.0f} GiB, sm_{}{}, device {})", props.name, props.totalGlobalMem / double(1 << 30),
                               props.major, props.minor, device);
    fences_ = std::make_unique<cuda::FenceQueue>(stream_);
    timer_ = std::make_unique<cuda::OpTimer>(stream_);
  }

  ~CudaBackend() override {  // waits for the stream (FenceQueue), releases the pins, then the rest
    (void)cudaSetDevice(device_);
    fences_.reset();
    timer_.reset();
    for (Scratch* s : {&workspace_, &digits_})
      if (s->p) (void)cudaFree(s->p);
    (void)cudaStreamDestroy(copy_stream_);
    (void)cudaStreamDestroy(stream_);
    (void)cudaGetLastError();
  }

  const char* name() const override { return "cuda"; }
  std::string describe() const override { return description_; }
  int threads() const override { return 1; }
  DeviceTimes times() const override { return timer_->times(); }

  // --- memory ---------------------------------------------------------------------------
  // Two pools: pinned host memory (the staging the device copies from) and the device's memory,
  // whose free bytes cudaMemGetInfo gives.
  std::vector<MemoryPool> memory_pools() const override {
    bind();
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    MemoryPool device{"device", false, total, free, sharers_};
    return {host_memory_pool("host (pinned)"), device};
  }
  std::unique_ptr<Buffer> allocate(uint64_t bytes) override {
    bind();
    return CudaBuffer::allocate(CudaBuffer::Kind::kDevice, bytes);
  }
  std::unique_ptr<Buffer> allocate_slots(uint64_t bytes) override {
    bind();
    return CudaBuffer::allocate(CudaBuffer::Kind::kDevice, bytes);
  }
  std::unique_ptr<Buffer> allocate_host(uint64_t bytes) override {
    bind();
    return CudaBuffer::allocate(CudaBuffer::Kind::kPinned, bytes);
  }
  std::unique_ptr<Buffer> wrap(std::byte* host, uint64_t bytes) override {
    bind();
    return CudaBuffer::wrap(host, bytes);
  }

  void upload(const void* src, Buffer& dst, uint64_t offset, uint64_t bytes) override {
    const CudaBuffer& b = cuda::cuda_buffer(dst, "upload's destination");
    in_range(b, offset, bytes, "upload");
    if (bytes == 0) return;
    if (b.host()) {  // host memory that ops in flight may read: write it once they are done
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      fences_->drain();
      std::memcpy(b.host() + offset, src, bytes);
      return;
    }
    // From pageable memory the copy is staged before the call returns; from page-locked memory
    // it is not, and the caller may reuse src at once, so wait.
    check(cudaMemcpyAsync(b.device() + offset, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (upload)");
    if (page_locked(src)) check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void upload_slot(const Buffer& staging, uint64_t staging_offset, Buffer& slots, uint64_t offset,
                   uint64_t bytes) override {
    const CudaBuffer& from = cuda::cuda_buffer(staging, "upload_slot's staging");
    const CudaBuffer& to = cuda::cuda_buffer(slots, "upload_slot's slot pool");
    in_range(from, staging_offset, bytes, "upload_slot");
    in_range(to, offset, bytes, "upload_slot");
    if (!from.host()) fail("cuda backend: upload_slot: the staging buffer is not host memory");
    if (to.host()) fail("cuda backend: upload_slot: the slot pool is host memory");
    bind();  // the reader's thread
    const auto start = std::chrono::steady_clock::now();
    check(cudaMemcpyAsync(to.device() + offset, from.host() + staging_offset, bytes, cudaMemcpyHostToDevice, copy_stream_),
          "cudaMemcpyAsync (upload_slot)");
    check(cudaStreamSynchronize(copy_stream_), "cudaStreamSynchronize (upload_slot)");
    timer_->add_upload(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), bytes);
  }

  void download(const Tensor& src, void* dst) override {
    const std::byte* from = address(src, "download");
    if (src.rows > 0 && src.cols > 0)
      check(cudaMemcpy2DAsync(dst, src.cols * 4, from, src.stride * 4, src.cols * 4, src.rows, cudaMemcpyDefault, stream_),
            "cudaMemcpy2DAsync (download)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (download)");
    fences_->drain();
    timer_->resolve();
  }

  void copy(const Tensor& src, const Tensor& dst) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    if (src.rows != dst.rows || src.cols != dst.cols)
      fail("cuda backend: copy of [{}, {}] into [{}, {}]", src.rows, src.cols, dst.rows, dst.cols);
    if (src.rows == 0 || src.cols == 0) return;
    const std::byte* from = address(src, "copy's source");
    std::byte* to = address(dst, "copy's destination");
    const uint64_t span_from = extent(src), span_to = extent(dst);
    int64_t from_stride = src.stride;
    if (from < to + span_to && to < from + span_from) {  // overlapping: through the workspace, densely
      std::byte* dense = workspace(src.rows * src.cols * 4);
      check(cudaMemcpy2DAsync(dense, src.cols * 4, from, src.stride * 4, src.cols * 4, src.rows, cudaMemcpyDefault, stream_),
            "cudaMemcpy2DAsync (copy)");
      from = dense, from_stride = src.cols;
    }
    check(cudaMemcpy2DAsync(to, dst.stride * 4, from, from_stride * 4, src.cols * 4, src.rows, cudaMemcpyDefault, stream_),
          "cudaMemcpy2DAsync (copy)");
  }

  void fill(const Tensor& dst, float value) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    check(cuda::launch_fill(f32(dst, "fill"), value, stream_), "fill kernel");
  }

  // --- commands ---------------------------------------------------------------------------
  Fence commit() override {
    fences_->poll();
    return fences_->record();
  }
  void wait(Fence fence) override { fences_->wait(fence); }

  // --- ops --------------------------------------------------------------------------------
  void matmul(const Weight& w, const Tensor& x, const Tensor& y) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    if (x.cols != w.cols || y.cols != w.rows || x.rows != y.rows)
      fail("cuda backend: matmul of x [{}, {}] into y [{}, {}] by a weight [{}, {}]", x.rows, x.cols, y.rows, y.cols,
           w.rows, w.cols);
    cuda::MatmulArgs a;
    a.w[0] = weight(w, "matmul");
    a.in = f32(x, "matmul x"), a.out = f32(y, "matmul y");
    a.n = x.rows;
    check(cuda::launch_matmul(a, stream_), "matmul kernel");
  }

  void embed(const Weight& table, const Tensor& ids, const Tensor& out) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    if (ids.cols != 1 || ids.rows != out.rows || out.cols != table.cols)
      fail("cuda backend: embed of ids [{}, {}] into [{}, {}] from a table [{}, {}]", ids.rows, ids.cols, out.rows, out.cols,
           table.rows, table.cols);
    check(cuda::launch_embed(weight(table, "embed"), i32(ids, "embed ids"), f32(out, "embed out"), stream_), "embed kernel");
  }

  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    same_shape(x, out, "rmsnorm");
    if (weight.cols != x.cols) fail("cuda backend: rmsnorm of [{}, {}] with a weight [1, {}]", x.rows, x.cols, weight.cols);
    check(cuda::launch_rmsnorm(f32(x, "rmsnorm x"), f32(weight, "rmsnorm weight").p, eps, f32(out, "rmsnorm out"), stream_),
          "rmsnorm kernel");
  }

  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    same_shape(a, b, "add");
    same_shape(a, out, "add");
    check(cuda::launch_add(f32(a, "add"), f32(b, "add"), f32(out, "add"), stream_), "add kernel");
  }

  void mul_sigmoid(const Tensor& x, const Tensor& gate, const Tensor& out) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    same_shape(x, gate, "mul_sigmoid");
    same_shape(x, out, "mul_sigmoid");
    check(cuda::launch_mul_sigmoid(f32(x, "mul_sigmoid"), f32(gate, "mul_sigmoid"), f32(out, "mul_sigmoid"), stream_),
          "mul_sigmoid kernel");
  }

  void gated(const GatedActivation& act, const Tensor& gate, const Tensor& up, const Tensor& out) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    same_shape(gate, up, "gated");
    same_shape(gate, out, "gated");
    check(cuda::launch_gated(act, f32(gate, "gated"), f32(up, "gated"), f32(out, "gated"), stream_), "gated kernel");
  }

  void rope(const Tensor& x, int64_t heads, int64_t head_dim, int64_t offset, const Tensor& inv_freq,
            float attention_factor, int64_t start) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    const int64_t half = inv_freq.cols;
    if (heads * head_dim > x.cols || offset < 0 || offset + 2 * half > head_dim)
      fail("cuda backend: rope of [{}, {}] as {} heads of {} from column {} with {} frequencies", x.rows, x.cols, heads,
           head_dim, offset, half);
    check(cuda::launch_rope(f32(x, "rope x"), heads, head_dim, offset, f32(inv_freq, "rope inv_freq").p, half,
                            attention_factor, start, stream_),
          "rope kernel");
  }

  void mla_attention(const MlaShape& s, const Weight& kv_b, const Tensor& q, const Tensor& cache_c,
                     const Tensor& cache_pe, int64_t start, const Tensor& out) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    const int64_t n = q.rows;
    if (q.cols != s.heads * (s.nope + s.rope) || out.rows != n || out.cols != s.heads * s.v || cache_c.cols != s.kv_lora ||
        cache_pe.cols != s.rope || cache_c.rows < start + n || cache_pe.rows < start + n ||
        kv_b.rows != s.heads * (s.nope + s.v) || kv_b.cols != s.kv_lora || start < 0 || n > 65535)
      fail("cuda backend: mla_attention shapes: q [{}, {}], out [{}, {}], caches [{}, {}] and [{}, {}], kv_b [{}, {}], start {}",
           q.rows, q.cols, out.rows, out.cols, cache_c.rows, cache_c.cols, cache_pe.rows, cache_pe.cols, kv_b.rows,
           kv_b.cols, start);
    check(cuda::launch_mla_attention(s, weight(kv_b, "mla_attention kv_b"), f32(q, "mla_attention q"),
                                     f32(cache_c, "mla_attention cache_c"), f32(cache_pe, "mla_attention cache_pe"), start,
                                     f32(out, "mla_attention out"), stream_),
          "mla_attention kernel");
  }

  void kda(const KdaArgs& a) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    const int64_t n = a.q.rows, ch = a.heads * a.head_dim;
    if (!kda_shapes_match(a))
      fail("cuda backend: kda shapes do not match {} heads of {} over {} taps and {} tokens", a.heads, a.head_dim, a.taps, n);
    if (a.head_dim > 1024 || cuda::kda_shared_bytes(a.head_dim) > static_cast<size_t>(max_shared_))
      fail("cuda backend: kda head_dim {} needs {} of shared memory per block; this device has {}", a.head_dim,
           human_bytes(cuda::kda_shared_bytes(a.head_dim)), human_bytes(max_shared_));
    cuda::KdaViews v;
    v.heads = a.heads, v.head_dim = a.head_dim, v.taps = a.taps;
    v.gate_lower_bound = a.gate_lower_bound, v.norm_eps = a.norm_eps;
    v.q = f32(a.q, "kda q"), v.k = f32(a.k, "kda k"), v.v = f32(a.v, "kda v");
    v.beta = f32(a.beta, "kda beta"), v.decay = f32(a.decay, "kda decay");
    auto conv = [&](const Tensor& t, const char* what) { return cuda::FMat{f32(t, what).p, ch, a.taps, a.taps}; };  // [ch, taps]
    v.conv_q = conv(a.conv_q, "kda conv_q"), v.conv_k = conv(a.conv_k, "kda conv_k"), v.conv_v = conv(a.conv_v, "kda conv_v");
    v.dt_bias = f32(a.dt_bias, "kda dt_bias").p, v.decay_rate = f32(a.decay_rate, "kda decay_rate").p;
    v.window = f32(a.window, "kda window"), v.state = f32(a.state, "kda state"), v.out = f32(a.out, "kda out");
    v.conv = reinterpret_cast<float*>(workspace(static_cast<uint64_t>(3 * n * ch) * 4));
    check(cuda::launch_kda(v, stream_), "kda kernels");
  }

  void attn_res_mix(std::span<const Tensor> candidates, const Tensor& query, float eps, const Tensor& out) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    if (candidates.size() > static_cast<size_t>(cuda::kMaxMixCandidates))
      fail("cuda backend: attn_res_mix of {} candidates (at most {})", candidates.size(), cuda::kMaxMixCandidates);
    if (query.cols != out.cols) fail("cuda backend: attn_res_mix of [{}, {}] with a query [1, {}]", out.rows, out.cols, query.cols);
    cuda::MixCandidates c;
    c.count = static_cast<int>(candidates.size());
    for (int i = 0; i < c.count; ++i) {
      same_shape(candidates[i], out, "attn_res_mix");
      const cuda::FMat m = f32(candidates[i], "attn_res_mix candidate");
      c.p[i] = m.p, c.stride[i] = m.stride;
    }
    check(cuda::launch_attn_res_mix(c, f32(query, "attn_res_mix query").p, eps, f32(out, "attn_res_mix out"), stream_),
          "attn_res_mix kernel");
  }

  void route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, const Tensor& ids,
             const Tensor& weights) override {
    const auto timed = timer_->scope(cuda::OpTimer::kSpine);
    const int64_t groups = std::max<int64_t>(spec.n_group, 1), per = spec.experts / groups;
    const int64_t open = spec.n_group > 1 ? spec.topk_group * per : spec.experts;
    if (logits.cols != spec.experts || ids.rows != logits.rows || ids.cols != spec.top_k || weights.rows != logits.rows ||
        weights.cols != spec.top_k || (bias.buffer && bias.cols != spec.experts) || spec.n_group < 1 || spec.n_group > 64 ||
        spec.top_k < 1 || spec.top_k > cuda::kMaxRouteTopK || spec.top_k > open || spec.topk_group > spec.n_group)
      fail("cuda backend: route of logits [{}, {}] to ids [{}, {}]: {} experts, top {} of {} groups' best {}", logits.rows,
           logits.cols, ids.rows, ids.cols, spec.experts, spec.top_k, spec.n_group, spec.topk_group);
    const float* b = bias.buffer ? f32(bias, "route bias").p : nullptr;
    check(cuda::launch_route(spec, f32(logits, "route logits"), b, i32_out(ids, "route ids"), f32(weights, "route weights"),
                             stream_),
          "route kernel");
  }

  void expert_slots(const Tensor& ids, const Tensor& experts, const Tensor& lists, const Tensor& counts) override {
    const int64_t n = ids.rows, count = experts.rows;
    if (experts.cols != 1 || lists.rows != count || lists.cols != n || !lists.dense() || counts.rows != count ||
        counts.cols != 1 || !counts.dense() || ids.cols > 64)
      fail("cuda backend: expert_slots of ids [{}, {}] for {} experts into lists [{}, {}] and counts [{}, {}]", n, ids.cols,
           count, lists.rows, lists.cols, counts.rows, counts.cols);
    if (count == 0 || n == 0) return;
    const auto timed = timer_->scope(cuda::OpTimer::kExpert);
    check(cuda::launch_expert_slots(i32(ids, "expert_slots ids"), i32(experts, "expert_slots experts").p, count,
                                    i32_out(lists, "expert_slots lists").p, i32_out(counts, "expert_slots counts").p, stream_),
          "expert_slots kernel");
  }

  // Experts whose weights the batched kernel reads (expert_matmul.cu) run in one pair of launches
  // per run of the same formats; others alone, two launches each (matmul.cu).
  void expert_ffn(std::span<const ResidentExpert> batch, const Tensor& x, const Tensor& lists, const Tensor& counts,
                  const GatedActivation& act, const Tensor& hidden, const Tensor& y) override {
    const int64_t n = x.rows, in = x.cols, width = hidden.cols, k = n > 0 ? y.rows / n : 1;
    if (static_cast<int64_t>(batch.size()) > cuda::kExpertBatch || lists.cols != n || !lists.dense() ||
        hidden.rows != n * k || !hidden.dense() || y.cols != in || y.rows != n * k || !y.dense() || k > 64)
      fail("cuda backend: expert_ffn of {} experts over x [{}, {}] with lists [{}, {}], hidden [{}, {}], y [{}, {}]",
           batch.size(), n, in, lists.rows, lists.cols, hidden.rows, hidden.cols, y.rows, y.cols);
    if (batch.empty() || n == 0) return;
    const auto timed = timer_->scope(cuda::OpTimer::kExpert);
    const cuda::FMat xs = f32(x, "expert_ffn x");
    float* h = f32(hidden, "expert_ffn hidden").p;
    float* ys = f32(y, "expert_ffn y").p;
    int32_t* list = i32_out(lists, "expert_ffn lists").p;
    int32_t* count = i32_out(counts, "expert_ffn counts").p;
    const bool x_aligned = reinterpret_cast<uintptr_t>(xs.p) % 16 == 0 && xs.stride % 4 == 0;
    cuda::ExpertBatchArgs up_args, down_args;
    up_args.nw = 2, up_args.rows = width, up_args.cols = in, up_args.lists = list, up_args.counts = count;
    up_args.list_stride = n, up_args.k = k, up_args.most_slots = n, up_args.in = xs;
    up_args.out = {h, n * k, width, width}, up_args.out_by_slot = true, up_args.act = act;
    down_args = up_args;
    down_args.nw = 1, down_args.rows = in, down_args.cols = width;
    down_args.in = {h, n * k, width, width}, down_args.out = {ys, n * k, in, in}, down_args.in_by_slot = true;
    // MXFP4 runs on the tensor cores from digit planes (digit_planes.cu): x's once per call, the
    // activations' after each run's gate/up; in their own device buffer, taken at the first use.
    int8_t *x_digits = nullptr, *h_digits = nullptr;
    float *x_factor = nullptr, *h_factor = nullptr;
    auto flush = [&] {  // the waiting run's launches
      if (up_args.batch == 0) return;
      const bool mxfp4 = up_args.format == WeightFormat::MXFP4 && down_args.format == WeightFormat::MXFP4;
      if (mxfp4 && !x_digits) {
        const uint64_t xd = align256(4 * n * in), xf = align256(4 * n), hd = align256(4 * n * k * width);
        std::byte* d = scratch(digits_, xd + xf + hd + align256(4 * n * k), "digit planes");
        x_digits = reinterpret_cast<int8_t*>(d), x_factor = reinterpret_cast<float*>(d + xd);
        h_digits = reinterpret_cast<int8_t*>(d + xd + xf), h_factor = reinterpret_cast<float*>(d + xd + xf + hd);
        check(cuda::launch_digit_planes(xs, x_digits, x_factor, stream_), "digit planes kernel (x)");
      }
      up_args.in_digits = mxfp4 ? x_digits : nullptr, up_args.in_factor = mxfp4 ? x_factor : nullptr;
      down_args.in_digits = mxfp4 ? h_digits : nullptr, down_args.in_factor = mxfp4 ? h_factor : nullptr;
      check(cuda::launch_expert_matmul(up_args, stream_), "expert gate/up kernel (batched)");
      if (mxfp4) check(cuda::launch_digit_planes(down_args.in, h_digits, h_factor, stream_), "digit planes kernel (activations)");
      down_args.batch = up_args.batch;
      std::copy_n(up_args.index, up_args.batch, down_args.index);
      check(cuda::launch_expert_matmul(down_args, stream_), "expert down kernel (batched)");
      up_args.batch = 0;
    };
    for (const ResidentExpert& e : batch) {
      const cuda::WMat wg = weight(e.proj[0], "expert gate"), wu = weight(e.proj[1], "expert up");
      const cuda::WMat wd = weight(e.proj[2], "expert down");
      if (e.list < 0 || e.list >= lists.rows) fail("cuda backend: expert_ffn: list row {} of {}", e.list, lists.rows);
      if (x_aligned && cuda::expert_matmul_supported(wg) && cuda::expert_matmul_supported(wu) &&
          cuda::expert_matmul_supported(wd)) {
        if (up_args.batch > 0 && (up_args.format != wg.format || down_args.format != wd.format)) flush();
        if (up_args.batch == 0) up_args.format = wg.format, down_args.format = wd.format;
        const int b = up_args.batch++;
        up_args.index[b] = static_cast<int32_t>(e.list);
        up_args.data[b][0] = wg.data, up_args.scales[b][0] = wg.scales;
        up_args.data[b][1] = wu.data, up_args.scales[b][1] = wu.scales;
        down_args.data[b][0] = wd.data, down_args.scales[b][0] = wd.scales;
        continue;
      }
      flush();
      cuda::MatmulArgs a;  // gate and up of the rows that chose the expert, activated, per slot
      a.w[0] = wg, a.w[1] = wu, a.nw = 2;
      a.in = xs;
      a.out = {h, n * k, width, width};
      a.n = n, a.slots = list + e.list * n, a.count = count + e.list, a.k = k;
      a.out_by_slot = true;
      a.act = act;
      check(cuda::launch_matmul(a, stream_), "expert gate/up kernel");
      cuda::MatmulArgs d = a;  // down, per slot
      d.w[0] = wd, d.nw = 1;
      d.in = {h, n * k, width, width};
      d.out = {ys, n * k, in, in};
      d.in_by_slot = true;
      check(cuda::launch_matmul(d, stream_), "expert down kernel");
    }
    flush();
  }

  void expert_combine(const Tensor& ids, const Tensor& weights, const Tensor& y, const Tensor& out) override {
    const int64_t n = ids.rows, k = ids.cols;
    if (weights.rows != n || weights.cols != k || out.rows != n || y.rows != n * k || y.cols != out.cols || !y.dense() ||
        k > 64)
      fail("cuda backend: expert_combine of ids [{}, {}], weights [{}, {}] and y [{}, {}] into [{}, {}]", n, k, weights.rows,
           weights.cols, y.rows, y.cols, out.rows, out.cols);
    if (n == 0) return;
    const auto timed = timer_->scope(cuda::OpTimer::kExpert);
    check(cuda::launch_expert_combine(i32(ids, "expert_combine ids"), f32(weights, "expert_combine weights"),
                                      f32(y, "expert_combine y").p, f32(out, "expert_combine out"), stream_),
          "expert_combine kernel");
  }

  int64_t expert_batch() const override { return cuda::kExpertBatch; }

  void hold_until(Fence fence, std::shared_ptr<const void> pin) override { fences_->hold(fence, std::move(pin)); }

 private:
  void bind() const { check(cudaSetDevice(device_), "cudaSetDevice"); }

  // Bytes a tensor's rows span, from element [0, 0].
  static uint64_t extent(const Tensor& t) {
    return t.rows == 0 || t.cols == 0 ? 0 : static_cast<uint64_t>((t.rows - 1) * t.stride + t.cols) * 4;
  }

  static void in_range(const CudaBuffer& b, uint64_t offset, uint64_t bytes, const char* op) {
    if (offset > b.bytes() || bytes > b.bytes() - offset)
      fail("cuda backend: {} of bytes [{}, {}) of a {}-byte buffer", op, offset, offset + bytes, b.bytes());
  }

  static void same_shape(const Tensor& a, const Tensor& b, const char* op) {
    if (a.rows != b.rows || a.cols != b.cols) fail("cuda backend: {} of [{}, {}] and [{}, {}]", op, a.rows, a.cols, b.rows, b.cols);
  }

  // The device address of a tensor's element [0, 0], checking that its rows lie in its buffer.
  static std::byte* address(const Tensor& t, const char* what) {
    if (!t.buffer) fail("cuda backend: {} has no buffer", what);
    const CudaBuffer& b = cuda::cuda_buffer(*t.buffer, what);
    if (t.stride < t.cols) fail("cuda backend: {} [{}, {}] has stride {}", what, t.rows, t.cols, t.stride);
    in_range(b, t.offset, extent(t), what);
    return b.device() + t.offset;
  }

  static cuda::FMat f32(const Tensor& t, const char* what) {
    if (t.elem != Elem::F32) fail("cuda backend: {} must be fp32", what);
    return {reinterpret_cast<float*>(address(t, what)), t.rows, t.cols, t.stride};
  }

  static cuda::Mat<int32_t> i32_out(const Tensor& t, const char* what) {
    if (t.elem != Elem::I32) fail("cuda backend: {} must be int32", what);
    return {reinterpret_cast<int32_t*>(address(t, what)), t.rows, t.cols, t.stride};
  }
  static cuda::IMat i32(const Tensor& t, const char* what) {
    const cuda::Mat<int32_t> m = i32_out(t, what);
    return {m.p, m.rows, m.cols, m.stride};
  }

  static cuda::WMat weight(const Weight& w, const char* what) {
    if (!w.data) fail("cuda backend: {}: the weight has no data", what);
    const bool quantized = scale_bytes(w) > 0;
    if (quantized && !w.scales) fail("cuda backend: {}: a quantized weight without scales", what);
    if (w.format == WeightFormat::MXFP4 && w.cols % 32 != 0) fail("cuda backend: {}: MXFP4 with {} columns", what, w.cols);
    const CudaBuffer& data = cuda::cuda_buffer(*w.data, what);
    in_range(data, w.data_offset, data_bytes(w), what);
    cuda::WMat m{w.format, reinterpret_cast<const uint8_t*>(data.device() + w.data_offset), nullptr, w.rows, w.cols};
    if (reinterpret_cast<uintptr_t>(m.data) % data_alignment(w.format) != 0)
      fail("cuda backend: {}: weight data at an offset not aligned to its elements", what);
    if (quantized) {
      const CudaBuffer& scales = cuda::cuda_buffer(*w.scales, what);
      in_range(scales, w.scales_offset, scale_bytes(w), what);
      m.scales = reinterpret_cast<const uint8_t*>(scales.device() + w.scales_offset);
      if (reinterpret_cast<uintptr_t>(m.scales) % scale_alignment(w.format) != 0)
        fail("cuda backend: {}: weight scales at an offset not aligned to their elements", what);
    }
    return m;
  }

  // Device memory for temporaries; growing waits for the stream (ops in flight may use the old
  // block).
  struct Scratch {
    void* p = nullptr;
    uint64_t bytes = 0;
  };
  std::byte* workspace(uint64_t bytes) { return scratch(workspace_, bytes, "workspace"); }
  std::byte* scratch(Scratch& s, uint64_t bytes, const char* what) {
    if (bytes > s.bytes) {
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (scratch)");
      fences_->drain();
      if (s.p) check(cudaFree(s.p), "cudaFree (scratch)");
      s = {};
      const uint64_t size = std::max<uint64_t>(bytes, 1 << 20);
      const cudaError_t status = cudaMalloc(&s.p, size);
      if (status != cudaSuccess) {
        (void)cudaGetLastError();
        s.p = nullptr;
        fail("CUDA: out of device memory allocating a {}-byte {} ({}): cudaMalloc: {}", size, what, human_bytes(size),
             cudaGetErrorString(status));
      }
      s.bytes = size;
    }
    return static_cast<std::byte*>(s.p);
  }

  int device_;
  int sharers_;  // processes of this run on this device (memory_pools)
  cudaStream_t stream_ = nullptr;       // every op and transfer, in order
  cudaStream_t copy_stream_ = nullptr;  // upload_slot's copies, from the readers' threads
  int max_shared_ = 0;  // dynamic shared memory a block may opt in to
  std::string description_;
  std::unique_ptr<cuda::FenceQueue> fences_;
  std::unique_ptr<cuda::OpTimer> timer_;  // DELTAFIN_DEVICE_PROFILE=1: device time per op category
  Scratch workspace_;  // one op's temporaries
  Scratch digits_;     // expert_ffn's digit planes (MXFP4)
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, int sharers) { return std::make_unique<CudaBackend>(device, sharers); }

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

bool cuda_device_present() { return cuda_device_count() > 0; }

}  // namespace deltafin
