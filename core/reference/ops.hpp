// core/reference/ops.hpp — scalar host implementations of every op: the conformance oracle.
//
// Slow and plain on purpose. Block-type inputs are decoded with core/quant's per-value
// reference codecs, so a backend that agrees with these read the bytes the same way.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace minfer::reference {

struct RefTensor {
  int32_t dtype = 0;
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  uint8_t *data = nullptr;  // contiguous bytes; ATTENTION writes its cache inputs
};

// Computes one op. out_dtype/out_shape describe the output; returns its bytes. params: the
// op's parameter struct (NULL for ops without). ATTENTION writes its cache inputs.
// Throws minfer::Error for a bad input (an id out of the table's range, say).
std::vector<uint8_t> run_op(int32_t op, const std::vector<RefTensor> &inputs, int32_t out_dtype,
                            const std::array<int64_t, 4> &out_shape, const void *params = nullptr);

// Evaluates a whole graph. inputs: bytes of every Input tensor by name.
// Returns the bytes of every output tensor by name.
std::map<std::string, std::vector<uint8_t>> evaluate(
    const Graph &g, const std::map<std::string, std::vector<uint8_t>> &inputs);

}  // namespace minfer::reference
