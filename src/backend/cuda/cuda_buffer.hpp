// The CUDA backend's buffers. Each has a device address, which is what kernels and copies use:
//   kDevice   cudaMalloc'ed VRAM; host() = nullptr
//   kPinned   page-locked, mapped host memory (cudaHostAlloc), 2 MiB-aligned; host() is it and
//             the device reads it over the bus (allocate_host: the expert staging slots)
//   kSlots    the expert slot pool: pinned host memory as kPinned, which the host writes (expert
//             reads land there), and a device mirror of the same size, which ops read; the
//             backend copies an expert's byte ranges into the mirror before its kernels run
//   kWrapped  existing host memory, registered and mapped (cudaHostRegister, whole pages, shared
//             with other wraps of the same pages); host() is it
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/tensor.hpp"

namespace deltafin::cuda {

class CudaBuffer final : public Buffer {
 public:
  enum class Kind : uint8_t { kDevice, kPinned, kSlots, kWrapped };

  static std::unique_ptr<CudaBuffer> allocate(Kind kind, uint64_t bytes);  // kDevice, kPinned or kSlots
  static std::unique_ptr<CudaBuffer> wrap(std::byte* host, uint64_t bytes);
  ~CudaBuffer() override;

  Kind kind() const { return kind_; }
  std::byte* device() const { return device_; }

 private:
  CudaBuffer(uint64_t bytes, std::byte* host, Kind kind) : Buffer(bytes, host), kind_(kind) {}

  Kind kind_;
  std::byte* device_ = nullptr;
  void* pinned_ = nullptr;   // the cudaHostAlloc block holding host() (kPinned, kSlots)
  void* vram_ = nullptr;     // the cudaMalloc block (kDevice; kSlots: the mirror)
  bool registered_ = false;  // kWrapped: holds its pages' host registrations
};

// The CUDA buffer behind a view; a buffer of another backend is a one-line error naming `what`.
const CudaBuffer& cuda_buffer(const Buffer& buffer, const char* what);

}  // namespace deltafin::cuda
