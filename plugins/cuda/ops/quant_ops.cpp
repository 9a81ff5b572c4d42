// plugins/cuda/ops/quant_ops.cpp — handlers for embedding gather and dequantize.
#include "minfer/decode.hpp"
#include "ops/op_table.hpp"

namespace minfer::cuda {
namespace {

bool has_kernel(int32_t dtype) {
  return dtype == MINFER_DTYPE_F32 || dtype == MINFER_DTYPE_F16 || dtype == MINFER_DTYPE_BF16 ||
         sdk::visit_block_dtype(dtype, [](auto) {});
}

std::string check_table(const minfer_node &n) {
  return has_kernel(n.inputs[0]->dtype)
             ? ""
             : std::string("the cuda backend has no kernel for ") + minfer_dtype_name(n.inputs[0]->dtype);
}

void run_get_rows(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t tag) {
  const minfer_tensor &table = *n.inputs[0], &ids = *n.inputs[1];
  dev.get_rows(table.dtype, dptr(table), sdk::run_extent(table, 1, args), table.shape[0], dptr<int32_t>(ids),
               sdk::run_extent(ids, 0, args), dptr<float>(*n.output), tag);
}

void run_dequantize(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.dequantize_f16(n.inputs[0]->dtype, dptr(*n.inputs[0]), dptr<uint16_t>(*n.output),
                     sdk::run_elements(*n.output, args));
}

const CudaOp kOps[] = {
    {MINFER_OP_GET_ROWS, check_table, run_get_rows},
    {MINFER_OP_DEQUANTIZE, check_table, run_dequantize},
};

}  // namespace

std::span<const CudaOp> quant_ops() { return kOps; }

}  // namespace minfer::cuda
