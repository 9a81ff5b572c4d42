#include "nccl_group.hpp"

#include <dlfcn.h>

#include <string>

#include "cuda_buffer.hpp"

#if __has_include(<nccl.h>)
#include <nccl.h>  // types and signatures only: the functions come from libnccl.so.2 at run time
#define MINFER_HAVE_NCCL 1
#endif

namespace minfer::cuda {

#ifdef MINFER_HAVE_NCCL
namespace {

struct Nccl {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  int version = 0;
};

template <class F>
void find(void *lib, const char *name, F &f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) throw sdk::Error(MINFER_ERR_DEVICE, std::string("libnccl.so.2 has no ") + name + "; install NCCL 2.x");
}

// Loaded once; a failed load throws and is tried again by the next group.
const Nccl &nccl() {
  static const Nccl n = [] {
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      throw sdk::Error(MINFER_ERR_DEVICE, std::string("cannot load NCCL (") + dlerror() +
                                              "); split: tensor on cuda needs it: install NCCL or put the folder of libnccl.so.2 on "
                                              "LD_LIBRARY_PATH");
    Nccl x;
    find(lib, "ncclCommInitAll", x.comm_init_all);
    find(lib, "ncclCommDestroy", x.comm_destroy);
    find(lib, "ncclAllReduce", x.all_reduce);
    find(lib, "ncclGroupStart", x.group_start);
    find(lib, "ncclGroupEnd", x.group_end);
    find(lib, "ncclGetErrorString", x.error_string);
    decltype(&ncclGetVersion) get_version = nullptr;
    find(lib, "ncclGetVersion", get_version);
    get_version(&x.version);
    return x;
  }();
  return n;
}

void check_nccl(ncclResult_t r, const std::string &what) {
  if (r != ncclSuccess) throw sdk::Error(MINFER_ERR_DEVICE, what + ": " + nccl().error_string(r));
}

class NcclGroup : public sdk::Group {
 public:
  explicit NcclGroup(const std::vector<CudaDevice *> &ranks) : Group(ranks.size()), ranks_(ranks), comms_(ranks.size()) {
    std::vector<int> devices;
    std::string list;
    for (CudaDevice *d : ranks) devices.push_back(d->id()), list += (list.empty() ? "cuda:" : ", cuda:") + std::to_string(d->id());
    check_nccl(nccl().comm_init_all(comms_.data(), int(ranks.size()), devices.data()),
               "NCCL " + std::to_string(nccl().version) + " communicators over " + list);
    ranks_[0]->host().log(MINFER_LOG_INFO, "NCCL " + std::to_string(nccl().version) + ": " + std::to_string(ranks.size()) +
                                               " ranks over " + list);
  }
  ~NcclGroup() override {
    for (ncclComm_t c : comms_)
      if (c) nccl().comm_destroy(c);
  }

  void all_reduce(int32_t dtype, uint64_t count, const std::vector<sdk::Buffer *> &send, const std::vector<uint64_t> &send_offsets,
                  const std::vector<sdk::Buffer *> &recv, const std::vector<uint64_t> &recv_offsets) override {
    if (dtype != MINFER_DTYPE_F32) throw sdk::Error(MINFER_ERR_UNSUPPORTED, std::string("all_reduce of ") + minfer_dtype_name(dtype) + "; f32 only");
    const uint64_t bytes = count * sizeof(float);
    auto at = [&](sdk::Buffer *b, uint64_t off, size_t r, const char *which) {
      auto &buf = static_cast<CudaBuffer &>(*b);
      if (&buf.device() != ranks_[r])
        throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "all_reduce: rank " + std::to_string(r) + "'s " + which + " buffer is not on cuda:" +
                                                          std::to_string(ranks_[r]->id()));
      if (off > buf.size() || bytes > buf.size() - off)
        throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "all_reduce: rank " + std::to_string(r) + "'s " + which + " range exceeds its buffer");
      return buf.data() + off;
    };
    // One thread drives every rank: NCCL needs the ranks' calls inside one group.
    check_nccl(nccl().group_start(), "ncclGroupStart");
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const ncclResult_t res = nccl().all_reduce(at(send[r], send_offsets[r], r, "send"), at(recv[r], recv_offsets[r], r, "receive"), count,
                                                 ncclFloat32, ncclSum, comms_[r], ranks_[r]->stream());
      if (res != ncclSuccess) {
        nccl().group_end();
        check_nccl(res, "ncclAllReduce on rank " + std::to_string(r) + " (cuda:" + std::to_string(ranks_[r]->id()) + ")");
      }
    }
    check_nccl(nccl().group_end(), "ncclAllReduce over " + std::to_string(ranks_.size()) + " ranks (ncclGroupEnd)");
  }

 private:
  std::vector<CudaDevice *> ranks_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace

std::unique_ptr<sdk::Group> open_nccl_group(const std::vector<CudaDevice *> &ranks) { return std::make_unique<NcclGroup>(ranks); }

#else

std::unique_ptr<sdk::Group> open_nccl_group(const std::vector<CudaDevice *> &) {
  throw sdk::Error(MINFER_ERR_UNSUPPORTED, "this cuda plugin was built without NCCL's header (nccl.h), so it has no all-reduce; "
                                           "rebuild it where the CUDA toolkit has NCCL, or use split: layer");
}

#endif

}  // namespace minfer::cuda
