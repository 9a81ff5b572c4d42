#include "chat/tool_calls.hpp"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/json.hpp"

namespace minfer::chat {
namespace {

using ojson = nlohmann::ordered_json;

constexpr const char *kHermes = "<tool_call>", *kHermesEnd = "</tool_call>", *kMistral = "[TOOL_CALLS]", *kMistralArgs = "[ARGS]",
                     *kGranite = "<|tool_call|>", *kPythonTag = "<|python_tag|>";

bool contains(const std::string &s, const char *what) { return s.find(what) != std::string::npos; }

size_t skip_space(const std::string &s, size_t at) {
  while (at < s.size() && (s[at] == ' ' || s[at] == '\n' || s[at] == '\t' || s[at] == '\r')) ++at;
  return at;
}

std::string trim(const std::string &s) {
  const size_t a = skip_space(s, 0);
  size_t b = s.size();
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\n' || s[b - 1] == '\t' || s[b - 1] == '\r')) --b;
  return s.substr(a, b - a);
}

// The end (one past the closing bracket) of the JSON object or array that starts at `at`, or
// npos when it does not close: brackets counted outside strings.
size_t json_end(const std::string &s, size_t at) {
  if (at >= s.size() || (s[at] != '{' && s[at] != '[')) return std::string::npos;
  minfer::json::NestingScan scan;
  for (size_t i = at; i < s.size(); ++i)
    if (scan.feed(s[i])) return i + 1;
  return std::string::npos;
}

// The JSON value at `at` (an object or array), its end in `end`; discarded on a parse error.
bool json_at(const std::string &s, size_t at, ojson &out, size_t &end) {
  end = json_end(s, at);
  if (end == std::string::npos) return false;
  if (!minfer::json::parse_refusal(std::string_view(s).substr(at, end - at)).empty()) return false;  // no call: text
  out = ojson::parse(s.begin() + std::ptrdiff_t(at), s.begin() + std::ptrdiff_t(end), nullptr, /*allow_exceptions=*/false);
  return !out.is_discarded();
}

// A function's arguments as OpenAI gives them: a JSON object as text. A model may write them as
// an object or as a string holding one.
bool arguments_text(const ojson &a, std::string &out) {
  if (a.is_object()) return out = a.dump(), true;
  if (a.is_string()) {
    if (!minfer::json::parse_refusal(a.get<std::string>()).empty()) return false;
    const ojson inner = ojson::parse(a.get<std::string>(), nullptr, false);
    if (inner.is_object()) return out = inner.dump(), true;
  }
  return false;
}

// {"name": N, "arguments" (or, for Llama 3, "parameters"): {...}}.
bool call_of(const ojson &j, ToolCall &call) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  call.name = j["name"].get<std::string>();
  if (call.name.empty()) return false;
  const char *key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  if (!key) return call.arguments = "{}", true;
  return arguments_text(j[key], call.arguments);
}

bool calls_of_array(const ojson &j, std::vector<ToolCall> &calls) {
  if (!j.is_array() || j.empty()) return false;
  for (const ojson &x : j) {
    ToolCall c;
    if (!call_of(x, c)) return false;
    calls.push_back(std::move(c));
  }
  return true;
}

// <tool_call>{...}</tool_call>, any number, text around them.
bool parse_hermes(const std::string &text, ParsedReply &r) {
  size_t at = text.find(kHermes), tail = 0;
  std::string content = text.substr(0, at);
  while (at != std::string::npos) {
    size_t end;
    ojson j;
    ToolCall c;
    if (!json_at(text, skip_space(text, at + std::strlen(kHermes)), j, end) || !call_of(j, c)) return false;
    r.calls.push_back(std::move(c));
    end = skip_space(text, end);
    if (text.compare(end, std::strlen(kHermesEnd), kHermesEnd) == 0) end += std::strlen(kHermesEnd);
    tail = end;
    at = text.find(kHermes, end);
    content += text.substr(end, at == std::string::npos ? std::string::npos : at - end);
  }
  r.content = trim(content);
  return tail > 0;
}

// The whole reply is one or more {"name", "parameters"} objects (";"-separated or not).
bool parse_llama3(const std::string &text, ParsedReply &r) {
  size_t at = skip_space(text, 0);
  if (text.compare(at, std::strlen(kPythonTag), kPythonTag) == 0) at = skip_space(text, at + std::strlen(kPythonTag));
  if (at >= text.size() || text[at] != '{') return false;
  while (at < text.size()) {
    size_t end;
    ojson j;
    ToolCall c;
    if (!json_at(text, at, j, end) || !call_of(j, c)) return false;
    r.calls.push_back(std::move(c));
    at = skip_space(text, end);
    if (at < text.size() && text[at] == ';') at = skip_space(text, at + 1);
  }
  return true;
}

// [TOOL_CALLS] then a JSON array of calls, or name[ARGS]{...}; repeated markers allowed.
bool parse_mistral(const std::string &text, ParsedReply &r) {
  size_t at = text.find(kMistral);
  if (at == std::string::npos) return false;
  r.content = trim(text.substr(0, at));
  while (at != std::string::npos) {
    at = skip_space(text, at + std::strlen(kMistral));
    size_t end;
    ojson j;
    if (at < text.size() && text[at] == '[') {
      if (!json_at(text, at, j, end) || !calls_of_array(j, r.calls)) return false;
    } else {
      const size_t args = text.find(kMistralArgs, at);
      if (args == std::string::npos) return false;
      ToolCall c;
      c.name = trim(text.substr(at, args - at));
      if (c.name.empty() || !json_at(text, skip_space(text, args + std::strlen(kMistralArgs)), j, end) || !arguments_text(j, c.arguments))
        return false;
      r.calls.push_back(std::move(c));
    }
    at = skip_space(text, end);
    if (at < text.size() && text.compare(at, std::strlen(kMistral), kMistral) != 0) return false;  // text after the calls
    if (at >= text.size()) break;
  }
  return true;
}

// <|tool_call|>[{...}, ...].
bool parse_granite(const std::string &text, ParsedReply &r) {
  const size_t at = text.find(kGranite);
  if (at == std::string::npos) return false;
  size_t end;
  ojson j;
  if (!json_at(text, skip_space(text, at + std::strlen(kGranite)), j, end) || !calls_of_array(j, r.calls)) return false;
  r.content = trim(text.substr(0, at) + text.substr(end));
  return true;
}

// Where a marker begins in text, or where a tail of text that could still grow into it begins.
size_t before_marker(const std::string &text, const char *marker) {
  const size_t at = text.find(marker);
  if (at != std::string::npos) return at;
  const size_t n = std::strlen(marker);
  for (size_t k = std::min(n - 1, text.size()); k > 0; --k)
    if (text.compare(text.size() - k, k, marker, k) == 0) return text.size() - k;
  return text.size();
}

}  // namespace

ToolFormat tool_format_of(const std::string &src) {
  if (!contains(src, "tools")) return ToolFormat::none;
  if (contains(src, "<|channel|>") || contains(src, "tool\xE2\x96\x81" "calls\xE2\x96\x81" "begin") || contains(src, "<arg_key>"))
    return ToolFormat::unsupported;  // gpt-oss harmony, DeepSeek, GLM 4.5+
  if (contains(src, kHermes)) return ToolFormat::hermes;
  if (contains(src, kMistral)) return ToolFormat::mistral;
  if (contains(src, kGranite)) return ToolFormat::granite;
  if (contains(src, kPythonTag) || contains(src, "<|start_header_id|>")) return ToolFormat::llama3;
  return ToolFormat::unsupported;
}

bool mistral_name_args(const std::string &src) { return contains(src, kMistralArgs); }

std::vector<std::string> tool_call_markers(ToolFormat f) {
  switch (f) {
    case ToolFormat::hermes: return {kHermes, kHermesEnd};
    case ToolFormat::llama3: return {kPythonTag};
    case ToolFormat::mistral: return {kMistral, kMistralArgs};
    case ToolFormat::granite: return {kGranite};
    default: return {};
  }
}

const char *tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::none: return "none";
    case ToolFormat::hermes: return "hermes (<tool_call>)";
    case ToolFormat::llama3: return "llama 3 (JSON reply)";
    case ToolFormat::mistral: return "mistral ([TOOL_CALLS])";
    case ToolFormat::granite: return "granite (<|tool_call|>)";
    case ToolFormat::unsupported: return "unsupported";
  }
  return "unsupported";
}

ParsedReply parse_tool_calls(ToolFormat f, const std::string &text) {
  ParsedReply r;
  bool ok = false;
  switch (f) {
    case ToolFormat::hermes: ok = parse_hermes(text, r); break;
    case ToolFormat::llama3: ok = parse_llama3(text, r); break;
    case ToolFormat::mistral: ok = parse_mistral(text, r); break;
    case ToolFormat::granite: ok = parse_granite(text, r); break;
    default: break;
  }
  if (!ok) return ParsedReply{trim(text), {}};
  return r;
}

std::vector<ToolCallStream::Event> ToolCallStream::advance(const std::string &reply, size_t held_from) {
  std::vector<Event> out;
  if (pos_ == std::string::npos) pos_ = held_from;
  // Whether `lit` stands at k (after blanks): 1 yes (k moves past it and the blanks after), 0
  // not yet (the reply ends inside it), -1 no.
  const auto take = [&](size_t &k, const char *lit) {
    k = skip_space(reply, k);
    const size_t n = std::strlen(lit), have = std::min(n, reply.size() - k);
    if (reply.compare(k, have, lit, have) != 0) return -1;
    if (have < n) return 0;
    k = skip_space(reply, k + n);
    return 1;
  };
  const auto begin_args = [&](size_t k, std::string name) {
    out.push_back({started_++, true, std::move(name)});
    pos_ = k, scan_ = {};
    at_ = At::args;
  };
  for (bool progress = true; progress && at_ != At::stopped;) {
    progress = false;
    if (at_ == At::marker) {
      size_t k = pos_;
      int r = -1;
      if (format_ == ToolFormat::llama3) {  // the reply itself, <|python_tag|> optional
        if (started_ > 0) {
          at_ = At::stopped;
          break;
        }
        r = take(k, kPythonTag);
        if (r == 0) break;
        r = 1;
      } else {
        const char *marker = format_ == ToolFormat::hermes ? kHermes : format_ == ToolFormat::mistral ? kMistral : kGranite;
        const size_t m = reply.find(marker, pos_);
        if (m == std::string::npos) break;
        k = skip_space(reply, m + std::strlen(marker));
        if (k >= reply.size()) break;
        in_list_ = format_ == ToolFormat::granite || (format_ == ToolFormat::mistral && reply[k] == '[');
        if (in_list_ && reply[k] != '[') {
          at_ = At::stopped;
          break;
        }
        if (in_list_) ++k;
        if (format_ == ToolFormat::mistral && !in_list_) {  // name[ARGS]{...}
          const size_t args = reply.find(kMistralArgs, k);
          std::string name = trim(reply.substr(k, args == std::string::npos ? std::string::npos : args - k));
          if (const size_t b = name.find('['); args == std::string::npos && b != std::string::npos) {  // [ARGS] on its way?
            const size_t n = std::min(name.size() - b, std::strlen(kMistralArgs));
            if (name.compare(b, n, kMistralArgs, n) != 0) at_ = At::stopped;
            name.resize(b);
          }
          if (name.find_first_of(" \n\t\"{[") != std::string::npos || name.size() > 256) at_ = At::stopped;
          if (args == std::string::npos || at_ == At::stopped) break;
          k = skip_space(reply, args + std::strlen(kMistralArgs));
          if (k >= reply.size()) break;
          if (reply[k] != '{') {
            at_ = At::stopped;
            break;
          }
          name_args_ = true;
          begin_args(k, name);
          progress = true;
          continue;
        }
        r = 1;
      }
      pos_ = k, name_args_ = false;
      at_ = At::head, progress = r == 1;
    } else if (at_ == At::head) {
      // {"name": "N", "arguments":  — whole, or wait for more; anything else stops streaming.
      size_t k = pos_;
      int r = 1;
      for (const char *lit : {"{", "\"name\"", ":", "\""})
        if (r == 1) r = take(k, lit);
      size_t name_end = std::string::npos;
      if (r == 1) {
        name_end = reply.find('"', k);
        if (name_end == std::string::npos) r = 0;
      }
      std::string name;
      if (r == 1) {
        name = reply.substr(k, name_end - k);
        if (name.find('\\') != std::string::npos) r = -1;
        k = name_end + 1;
        r = take(k, ",");
        if (r == 1) {
          const size_t at = k;
          r = take(k, "\"arguments\"");
          if (r == -1 && format_ == ToolFormat::llama3) r = take(k = at, "\"parameters\"");
        }
        if (r == 1) r = take(k, ":");
        if (r == 1 && k >= reply.size()) r = 0;
        if (r == 1 && reply[k] != '{') r = -1;
      }
      if (r < 0) at_ = At::stopped;
      if (r != 1) break;
      begin_args(k, name);
      progress = true;
    } else if (at_ == At::args) {
      // The arguments object's text as far as it is written; it ends where its braces close.
      size_t k = pos_;
      bool closed = false;
      for (; k < reply.size() && !closed; ++k) closed = scan_.feed(reply[k]);
      if (k > pos_) out.push_back({started_ - 1, false, reply.substr(pos_, k - pos_)});
      pos_ = k;
      if (closed) at_ = format_ == ToolFormat::hermes || name_args_ ? At::marker : At::after, progress = true;
    } else if (at_ == At::after) {
      size_t k = pos_;
      const int r = take(k, "}");  // the call object closes
      if (r != 1) {
        if (r < 0) at_ = At::stopped;
        break;
      }
      if (k >= reply.size()) break;
      if (format_ == ToolFormat::llama3) {  // another call after ';', or the reply's end
        if (reply[k] == ';') ++k;
        pos_ = k, at_ = At::head, progress = true;
        continue;
      }
      if (reply[k] == ',') pos_ = k + 1, at_ = At::head;
      else if (reply[k] == ']') pos_ = k + 1, at_ = format_ == ToolFormat::mistral ? At::marker : At::stopped;
      else at_ = At::stopped;
      progress = at_ != At::stopped;
    }
  }
  return out;
}

size_t plain_text_before_calls(ToolFormat f, const std::string &text) {
  switch (f) {
    case ToolFormat::hermes: return before_marker(text, kHermes);
    case ToolFormat::mistral: return before_marker(text, kMistral);
    case ToolFormat::granite: return before_marker(text, kGranite);
    case ToolFormat::llama3: {
      // A reply that opens with '{' or <|python_tag|> may be a call: all of it waits.
      const size_t at = skip_space(text, 0);
      if (at == text.size()) return 0;
      if (text[at] == '{') return 0;
      const size_t n = std::min(text.size() - at, std::strlen(kPythonTag));
      return text.compare(at, n, kPythonTag, n) == 0 ? 0 : text.size();
    }
    default: return text.size();
  }
}

}  // namespace minfer::chat
