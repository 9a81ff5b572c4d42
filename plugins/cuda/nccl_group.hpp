// plugins/cuda/nccl_group.hpp — split: tensor's collectives over NCCL (ABI 1.8 groups).
#pragma once

#include <memory>
#include <vector>

#include "device.hpp"

namespace minfer::cuda {

// One NCCL communicator per rank (ncclCommInitAll over the ranks' devices, rank r = ranks[r]),
// made once at build; the all-reduce runs on each rank's stream. NCCL is loaded (libnccl.so.2)
// when the first group opens, so the plugin loads and runs one GPU on machines without it.
std::unique_ptr<sdk::Group> open_nccl_group(const std::vector<CudaDevice *> &ranks);

}  // namespace minfer::cuda
