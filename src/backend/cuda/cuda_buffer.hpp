// The CUDA backend's buffers. Each has a device address, which is what kernels and copies use:
//   kDevice   cudaMalloc'ed VRAM; host() = nullptr (also the expert slot pool: the VRAM expert
//             cache, which the store fills through kPinned staging slots and upload_slot)
//   kPinned   page-locked, mapped host memory (cudaHostAlloc), 2 MiB-aligned; host() is it and
//             the device reads it over the bus (allocate_host: the expert staging slots)
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
  enum class Kind : uint8_t { kDevice, kPinned, kWrapped };

  static std::unique_ptr<CudaBuffer> allocate(Kind kind, uint64_t bytes);  // kDevice or kPinned
  static std::unique_ptr<CudaBuffer> wrap(std::byte* host, uint64_t bytes);
  ~CudaBuffer() override;

  Kind kind() const { return kind_; }
  std::byte* device() const { return device_; }

 private:
  CudaBuffer(uint64_t bytes, std::byte* host, Kind kind) : Buffer(bytes, host), kind_(kind) {}

  Kind kind_;
  std::byte* device_ = nullptr;
  void* pinned_ = nullptr;   // the cudaHostAlloc block holding host() (kPinned)
  void* vram_ = nullptr;     // the cudaMalloc block (kDevice)
  bool registered_ = false;  // kWrapped: holds its pages' host registrations
};

// The CUDA buffer behind a view; a buffer of another backend is a one-line error naming `what`.
const CudaBuffer& cuda_buffer(const Buffer& buffer, const char* what);

}  // namespace deltafin::cuda
