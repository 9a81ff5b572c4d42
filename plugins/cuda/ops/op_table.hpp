// plugins/cuda/ops/op_table.hpp — the CUDA plugin's one op table (hop 1 handlers).
//
// supports() and dispatch both read these entries: an op is supported exactly when it has an
// entry and the entry's check passes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "cuda_buffer.hpp"
#include "device.hpp"
#include "minfer/tensor.hpp"

namespace minfer::cuda {

struct CudaOp {
  int32_t op;
  // Limits beyond the SDK's op contract; "" = supported.
  std::string (*check)(const minfer_node &n);
  // Validates the run-time invariants, picks the path and calls the device.
  void (*run)(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t node_tag);
};

// The op families, one file each.
std::span<const CudaOp> elementwise_ops();
std::span<const CudaOp> quant_ops();
std::span<const CudaOp> model_ops();

}  // namespace minfer::cuda
