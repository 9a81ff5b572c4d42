// apps/minfer-server/cors.cpp — see cors.hpp.
#include "cors.hpp"

namespace minfer::server {

const std::vector<std::string> &default_cors_origins() {
  static const std::vector<std::string> local = {
      "http://localhost",  "https://localhost", "http://127.0.0.1", "https://127.0.0.1", "http://[::1]", "https://[::1]", "http://0.0.0.0",
      "app://*",           "file://*",          "tauri://*",        "vscode-webview://*", "vscode-file://*", "chrome-extension://*",
      "moz-extension://*", "safari-web-extension://*"};
  return local;
}

bool origin_allowed(const std::string &origin, const std::vector<std::string> &allowed) {
  if (origin.empty()) return false;
  for (const std::string &a : allowed) {
    if (a == "*") return true;
    if (!a.empty() && a.back() == '*') {
      if (origin.compare(0, a.size() - 1, a, 0, a.size() - 1) == 0) return true;
      continue;
    }
    if (origin == a) return true;
    // scheme://host matches scheme://host:PORT (digits only after the colon)
    if (origin.size() > a.size() + 1 && origin.compare(0, a.size(), a) == 0 && origin[a.size()] == ':' &&
        origin.find_first_not_of("0123456789", a.size() + 1) == std::string::npos)
      return true;
  }
  return false;
}

}  // namespace minfer::server
