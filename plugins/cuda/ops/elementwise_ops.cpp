// plugins/cuda/ops/elementwise_ops.cpp — handlers for the f32 elementwise family, scale, convert and argmax.
#include "minfer/op_contract.hpp"
#include "ops/op_table.hpp"

namespace minfer::cuda {
namespace {

std::string any(const minfer_node &) { return ""; }

void run_add(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.add_f32(dptr<float>(*n.inputs[0]), dptr<float>(*n.inputs[1]), dptr<float>(*n.output),
              sdk::run_elements(*n.output, args));
}

void run_mul(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.mul_f32(dptr<float>(*n.inputs[0]), dptr<float>(*n.inputs[1]), dptr<float>(*n.output),
              sdk::run_elements(*n.output, args));
}

void run_silu(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.silu_f32(dptr<float>(*n.inputs[0]), dptr<float>(*n.output), sdk::run_elements(*n.output, args));
}

void run_add_row_broadcast(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.add_row_broadcast_f32(dptr<float>(*n.inputs[0]), dptr<float>(*n.inputs[1]),
                            dptr<float>(*n.output), sdk::run_rows(*n.output, args), n.output->shape[0]);
}

void run_convert(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.convert_f32_f16(dptr<float>(*n.inputs[0]), dptr<uint16_t>(*n.output), sdk::run_elements(*n.output, args));
}

void run_scale(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  const auto &p = sdk::params_of<minfer_scale_params>(n);
  dev.scale_f32(dptr<float>(*n.inputs[0]), dptr<float>(*n.output), sdk::run_elements(*n.output, args), p.scale, p.softcap);
}

void run_argmax(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.argmax_f32(dptr<float>(*n.inputs[0]), dptr<int32_t>(*n.output), n.inputs[0]->shape[0], sdk::run_rows(*n.inputs[0], args));
}

const CudaOp kOps[] = {
    {MINFER_OP_ARGMAX, any, run_argmax},
    {MINFER_OP_SCALE, any, run_scale},
    {MINFER_OP_ADD, any, run_add},
    {MINFER_OP_MUL, any, run_mul},
    {MINFER_OP_SILU, any, run_silu},
    {MINFER_OP_ADD_ROW_BROADCAST, any, run_add_row_broadcast},
    {MINFER_OP_CONVERT, any, run_convert},
};

}  // namespace

std::span<const CudaOp> elementwise_ops() { return kOps; }

}  // namespace minfer::cuda
