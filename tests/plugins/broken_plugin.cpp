// Deliberately broken plugins for the loader tests. One source, built several times:
//   BROKEN_MAJOR  the table claims ABI major MINFER_ABI_MAJOR + 1
//   BROKEN_SMALL  the table's struct_size is smaller than ABI 1.0's
//   BROKEN_NULL   the entry returns no table
#include <memory>

#include "minfer/plugin.hpp"

namespace {

struct Broken {
  static constexpr const char *name = "broken";
  static constexpr const char *version = "0";
  static int32_t device_count(std::string &) { return 1; }
  static void device_info(int32_t, minfer_device_info &) {}
  static std::unique_ptr<minfer::sdk::Backend> open(int32_t, minfer::sdk::Options &, const minfer::sdk::Host &) {
    throw minfer::sdk::Error(MINFER_ERR_INTERNAL, "never opened");
  }
};

}  // namespace

extern "C" MINFER_EXPORT const minfer_backend_api *minfer_backend_entry(uint32_t, uint32_t) {
  static minfer_backend_api api = *minfer::sdk::detail::Api<Broken>::table();
#if defined(BROKEN_MAJOR)
  api.abi_major = MINFER_ABI_MAJOR + 1;
  api.abi_minor = 3;
#elif defined(BROKEN_SMALL)
  api.struct_size = MINFER_SIZE_UP_TO(minfer_backend_api, open);
#elif defined(BROKEN_NULL)
  return nullptr;
#endif
  return &api;
}
