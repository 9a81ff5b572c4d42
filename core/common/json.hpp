// core/common/json.hpp — JSON for the tools' --json output and the trace, on nlohmann-json.
#pragma once

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

namespace minfer::json {

using Json = nlohmann::ordered_json;  // keys stay in the order they were written

// One line (indent < 0) or indented. Bytes that are no UTF-8 become U+FFFD, one per maximal
// ill-formed subpart: the rule of common/utf8.hpp, so --json and the text stream agree.
inline std::string dump(const Json &j, int indent = -1) { return j.dump(indent, ' ', false, Json::error_handler_t::replace); }

// A number, or null where JSON has none (NaN, infinities).
inline Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

}  // namespace minfer::json
