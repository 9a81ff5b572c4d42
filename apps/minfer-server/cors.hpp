// apps/minfer-server/cors.hpp — which web pages may call the server from a browser (CORS).
// A page of another origin (a web UI on localhost:3000, an editor's webview, a browser
// extension) can read the server's answers only when the server names its origin in
// Access-Control-Allow-Origin, after a preflight OPTIONS request for anything but simple GETs.
// Allowing every origin would let any web site the user visits drive a server on their machine,
// so by default only local pages and app-like schemes are (as Ollama does); `cors_origins`
// in the run config or --cors-origins widens or narrows that, "*" allowing all.
#pragma once

#include <string>
#include <vector>

namespace minfer::server {

// The origins allowed when the config names none.
const std::vector<std::string> &default_cors_origins();

// origin (as the browser sends it: scheme://host[:port]) against the allowed entries: "*"
// (any), an entry ending in '*' (a prefix: "chrome-extension://*"), or scheme://host, which
// also matches that host on any port.
bool origin_allowed(const std::string &origin, const std::vector<std::string> &allowed);

}  // namespace minfer::server
