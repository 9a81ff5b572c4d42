// Deliberately broken plugins for the loader tests. One source, built several times:
//   BROKEN_MAJOR  the table claims ABI major MINFER_ABI_MAJOR + 1
//   BROKEN_SMALL  the table's struct_size is smaller than ABI 1.0's
//   BROKEN_NULL   the entry returns no table
//   BROKEN_LONGWHY   device_count and supports fill every byte of `why`, with no NUL
//   BROKEN_NULLMSG   device_count fails with a status whose message is NULL
//   BROKEN_OLDMINOR  built against ABI 1.3: the host must not give it nodes that need 1.4
#include <cstring>
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

#if defined(BROKEN_LONGWHY) || defined(BROKEN_NULLMSG) || defined(BROKEN_OLDMINOR)
// Raw C entries, past the SDK's helpers (which always terminate): what a careless or hostile
// plugin written against the bare ABI can do.
struct Opaque {
  int unused;
};
Opaque g_backend, g_status;

minfer_status *fill_why(int32_t *out_count, char *why, size_t why_size) {
  *out_count = 0;
  std::memset(why, 'x', why_size);
  return nullptr;
}
minfer_status *open_any(int32_t, const minfer_host *, const char *const *, const char *const *, int32_t, minfer_backend **out) {
  *out = reinterpret_cast<minfer_backend *>(&g_backend);
  return nullptr;
}
void close_any(minfer_backend *) {}
minfer_status *supports_all(minfer_backend *, const minfer_node *, int32_t *yes, char *why, size_t) {
  *yes = 1;
  why[0] = '\0';
  return nullptr;
}
minfer_status *supports_fill_why(minfer_backend *, const minfer_node *, int32_t *yes, char *why, size_t why_size) {
  *yes = 0;
  std::memset(why, 'y', why_size);
  return nullptr;
}
minfer_status *fail_count(int32_t *, char *, size_t) { return reinterpret_cast<minfer_status *>(&g_status); }
int32_t code_internal(const minfer_status *) { return MINFER_ERR_INTERNAL; }
const char *no_message(const minfer_status *) { return nullptr; }
void free_nothing(minfer_status *) {}
#endif

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
#elif defined(BROKEN_LONGWHY)
  api.device_count = fill_why;
  api.open = open_any;
  api.close = close_any;
  api.supports = supports_fill_why;
#elif defined(BROKEN_OLDMINOR)
  api.abi_minor = 3;
  api.open = open_any;
  api.close = close_any;
  api.supports = supports_all;
#elif defined(BROKEN_NULLMSG)
  api.device_count = fail_count;
  api.status_code = code_internal;
  api.status_message = no_message;
  api.status_free = free_nothing;
#endif
  return &api;
}
