// plugins/cuda/ops/op_table.hpp — the CUDA plugin's one op table (hop 1 handlers).
//
// supports() and dispatch both read these entries: an op is supported exactly when it has an
// entry and the entry's check passes.
#pragma once

#include <cstdint>
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
  void (*run)(CudaDevice &dev, const minfer_node &n, int32_t node_tag);
};

const CudaOp *find_op(int32_t op);

// Families register their entries (one file each).
void elementwise_ops(const CudaOp **begin, const CudaOp **end);
void quant_ops(const CudaOp **begin, const CudaOp **end);

}  // namespace minfer::cuda
