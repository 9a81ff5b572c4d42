// plugins/cuda/cuda_buffer.hpp — device memory as an sdk::Buffer.
#pragma once

#include "device.hpp"
#include "minfer/tensor.hpp"

namespace minfer::cuda {

class CudaBuffer : public sdk::Buffer {
 public:
  CudaBuffer(CudaDevice &dev, uint64_t bytes) : Buffer(bytes), dev_(dev), data_(static_cast<uint8_t *>(dev.alloc(bytes))) {}
  ~CudaBuffer() override { dev_.release(data_); }
  // Ordered after the kernels already enqueued on the device's stream and before those
  // enqueued after it; src may be reused on return. From pageable memory CUDA has taken the
  // bytes into its staging memory when the call returns, so a small write (a step's token ids
  // and positions) needs no wait; a large one, or one from pinned memory, waits.
  void write(uint64_t offset, const void *src, uint64_t bytes) override {
    check_range(offset, bytes, "write");
    DeviceScope scope(dev_.id());
    check_cuda(cudaMemcpyAsync(data_ + offset, src, bytes, cudaMemcpyHostToDevice, dev_.stream()), "buffer write");
    constexpr uint64_t kNoWaitBytes = 64 * 1024;
    cudaPointerAttributes attr{};
    const cudaError_t known = cudaPointerGetAttributes(&attr, src);
    if (known != cudaSuccess) cudaGetLastError();  // clear that lookup's own error only
    const bool pageable = known == cudaSuccess && attr.type == cudaMemoryTypeUnregistered;
    if (bytes > kNoWaitBytes || !pageable) check_cuda(cudaStreamSynchronize(dev_.stream()), "buffer write");
  }
  void read(uint64_t offset, void *dst, uint64_t bytes) override {
    check_range(offset, bytes, "read");
    DeviceScope scope(dev_.id());
    check_cuda(cudaMemcpyAsync(dst, data_ + offset, bytes, cudaMemcpyDeviceToHost, dev_.stream()), "buffer read");
    check_cuda(cudaStreamSynchronize(dev_.stream()), "buffer read");
  }
  // The same copy queued behind the step's kernels: the step's synchronize waits for both
  // (into page-locked memory, host_alloc's, it does not block; into ordinary memory CUDA
  // finishes it before returning).
  void read_async(uint64_t offset, void *dst, uint64_t bytes) override {
    check_range(offset, bytes, "read");
    DeviceScope scope(dev_.id());
    check_cuda(cudaMemcpyAsync(dst, data_ + offset, bytes, cudaMemcpyDeviceToHost, dev_.stream()), "buffer read");
  }
  // Another buffer of this plugin (the host checks): of this device, or of another one.
  void copy_from(sdk::Buffer &src, uint64_t src_offset, uint64_t offset, uint64_t bytes) override {
    auto &from = static_cast<CudaBuffer &>(src);
    check_range(offset, bytes, "copy");
    from.check_range(src_offset, bytes, "copy source");
    dev_.copy_from(from.dev_, data_ + offset, from.data_ + src_offset, bytes);
  }
  uint8_t *data() const { return data_; }
  CudaDevice &device() const { return dev_; }

 private:
  CudaDevice &dev_;
  uint8_t *data_;
};

// Device address of a tensor's element 0.
template <class T = uint8_t>
T *dptr(const minfer_tensor &t) {
  return reinterpret_cast<T *>(sdk::buffer_of<CudaBuffer>(t).data() + t.offset);
}

}  // namespace minfer::cuda
