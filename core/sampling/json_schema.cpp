#include "sampling/json_schema.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/error.hpp"

namespace minfer::sampling {

using ojson = nlohmann::ordered_json;

namespace {

bool blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool digit(char c) { return c >= '0' && c <= '9'; }
bool hex(char c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

constexpr int kMaxIndent = 20;
constexpr size_t kMaxDepth = 64;     // nesting of containers a reply may reach
constexpr size_t kMaxThreads = 1024;  // alternatives alive at once (more are dropped): a call of any of 1,024 tools
constexpr size_t kMaxNodes = 20000;  // a schema's compiled size
constexpr int kMaxDigits = 16;       // integer and fraction digits of a number, as llama.cpp
constexpr int kMaxExpDigits = 3;
constexpr int kMaxSchemaDepth = 64;  // schemas nested within one another (JSON text nests up to kMaxDepth)

// The formats a string is held to (RFC 3339's date, time and date-time, RFC 4122's uuid), as
// patterns; other formats are annotations (JSON Schema's default): any string.
const char *format_pattern(const std::string &format) {
  if (format == "date") return "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$";
  if (format == "time") return "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";
  if (format == "date-time")
    return "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?"
           "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";
  if (format == "uuid") return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  return nullptr;
}

// Keywords that restrict values in ways this automaton does not follow.
constexpr const char *kUnsupported[] = {"patternProperties", "not", "if", "then", "else", "dependentSchemas",
                                        "dependentRequired", "uniqueItems", "contains", "minContains", "maxContains",
                                        "multipleOf", "propertyNames", "minProperties", "maxProperties",
                                        "unevaluatedProperties", "unevaluatedItems"};

}  // namespace

// ---- compiling a schema -------------------------------------------------------------------

class SchemaCompiler {
 public:
  SchemaCompiler(const ojson &doc, bool strict) : doc_(doc), strict_(strict) {}

  std::shared_ptr<const Schema> run() {
    auto s = std::make_shared<Schema>();
    s->root_ = compile(doc_, "#");
    prune(s->root_);
    s->nodes_ = std::move(nodes_);
    return s;
  }

  // Which nodes can be written out whole (a fixpoint: a $ref cycle with nothing between, an
  // object that requires itself, or an array that needs an item it cannot have, never can).
  // Alternatives, optional keys and items that cannot are dropped, so decoding never walks
  // into a dead end; a schema whose root cannot is refused.
  void prune(int32_t root) {
    std::vector<uint8_t> ok(nodes_.size(), 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (ok[i]) continue;
        const SchemaNode &n = nodes_[i];
        bool v = false;
        switch (n.kind) {
          case SchemaNode::literal: v = !n.texts.empty(); break;
          case SchemaNode::string:
          case SchemaNode::number:
          case SchemaNode::integer: v = true; break;
          case SchemaNode::any_of: v = std::any_of(n.alts.begin(), n.alts.end(), [&](int32_t a) { return ok[size_t(a)] != 0; }); break;
          case SchemaNode::object:
            v = std::all_of(n.props.begin(), n.props.end(), [&](const SchemaNode::Property &p) { return !p.required || ok[size_t(p.node)]; });
            break;
          case SchemaNode::array:
            v = true;
            for (int64_t k = 0; k < n.min_n && v; ++k) {
              const int32_t item = size_t(k) < n.prefix.size() ? n.prefix[size_t(k)] : n.items;
              v = item >= 0 && ok[size_t(item)];
            }
            break;
        }
        if (v) ok[i] = 1, changed = true;
      }
    }
    if (!ok[size_t(root)]) fail("#", "the schema admits no value (a reference to itself with nothing between, or a required part that cannot be written)");
    for (SchemaNode &n : nodes_) {
      std::erase_if(n.alts, [&](int32_t a) { return !ok[size_t(a)]; });
      std::erase_if(n.props, [&](const SchemaNode::Property &p) { return !ok[size_t(p.node)]; });  // required ones are ok where n is
      if (n.extra >= 0 && !ok[size_t(n.extra)]) n.extra = -1;
      if (n.kind == SchemaNode::array) {
        size_t good = 0;
        while (good < n.prefix.size() && ok[size_t(n.prefix[good])]) ++good;
        if (good < n.prefix.size()) n.prefix.resize(good), n.items = -1;
        if (n.items >= 0 && !ok[size_t(n.items)]) n.items = -1;
        if (n.items < 0 && (n.max_n < 0 || n.max_n > int64_t(n.prefix.size()))) n.max_n = int64_t(n.prefix.size());
      }
    }
  }

  // The node of any JSON value (built once; its object and array parts refer back to it).
  int32_t any() {
    if (any_ >= 0) return any_;
    any_ = add({});
    SchemaNode obj, arr, str, num, boolean, null;
    obj.kind = SchemaNode::object;
    obj.extra = any_;
    arr.kind = SchemaNode::array;
    arr.items = any_;
    str.kind = SchemaNode::string;
    num.kind = SchemaNode::number;
    boolean.kind = null.kind = SchemaNode::literal;
    boolean.texts = {"true", "false"};
    null.texts = {"null"};
    std::vector<int32_t> alts;
    for (SchemaNode *n : {&obj, &arr, &str, &num, &boolean, &null}) alts.push_back(add(std::move(*n)));
    nodes_[size_t(any_)].alts = std::move(alts);
    return any_;
  }

 private:
  [[noreturn]] void fail(const std::string &path, const std::string &what) const {
    throw Error("JSON schema, at " + path + ": " + what);
  }
  int32_t add(SchemaNode n) {
    if (nodes_.size() >= kMaxNodes) fail("#", "more than " + std::to_string(kMaxNodes) + " parts; give a smaller schema");
    nodes_.push_back(std::move(n));
    return int32_t(nodes_.size() - 1);
  }

  int64_t count(const ojson &s, const char *key, const std::string &path) const {
    const auto it = s.find(key);
    if (it == s.end()) return -1;
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
      fail(path, std::string("'") + key + "' must be a non-negative integer, not " + it->dump());
    return it->get<int64_t>();
  }

  // A "$ref" into this document: "#" or a JSON pointer after it ("#/$defs/Item").
  int32_t reference(const std::string &ref, const std::string &path) {
    if (const auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.empty() || ref[0] != '#')
      fail(path, "'$ref' \"" + ref + "\" points outside the schema; only references into it (\"#/$defs/...\") are followed");
    const ojson *target = nullptr;
    try {
      target = &doc_.at(ojson::json_pointer(ref.substr(1)));
    } catch (const std::exception &) {
      fail(path, "'$ref' \"" + ref + "\" names nothing in the schema");
    }
    const int32_t slot = add({});  // filled below; a recursive reference finds it already
    refs_[ref] = slot;
    const int32_t n = compile(*target, ref);
    nodes_[size_t(slot)].alts = {n};
    return slot;
  }

  int32_t literal(std::vector<std::string> texts) {
    SchemaNode n;
    n.kind = SchemaNode::literal;
    n.texts = std::move(texts);
    return add(std::move(n));
  }

  int32_t compile(const ojson &s, const std::string &path) {
    // A request's schema nested thousands deep would take the stack with it.
    struct Depth {
      int &d;
      explicit Depth(int &x) : d(++x) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxSchemaDepth) fail(path, "the schema nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    if (s.is_boolean()) {
      if (s.get<bool>()) return any();
      fail(path, "the schema false admits no value");
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean, not " + s.dump());
    if (strict_)
      for (const char *k : kUnsupported)
        if (s.contains(k)) fail(path, std::string("'") + k + "' is not supported in constrained decoding; leave it out");
    if (const auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) fail(path, "'$ref' must be a string");
      return reference(it->get<std::string>(), path);
    }
    if (const auto it = s.find("const"); it != s.end()) return literal({it->dump()});
    if (const auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) fail(path, "'enum' must be a non-empty array");
      std::vector<std::string> texts;
      for (const ojson &v : *it) texts.push_back(v.dump());
      return literal(std::move(texts));
    }
    for (const char *k : {"anyOf", "oneOf"})
      if (const auto it = s.find(k); it != s.end()) {
        if (!it->is_array() || it->empty()) fail(path, std::string("'") + k + "' must be a non-empty array");
        for (const char *other : {"type", "properties", "items", "allOf"})
          if (s.contains(other) && strict_)
            fail(path, std::string("'") + k + "' beside '" + other + "' is not supported; move '" + other + "' into each alternative");
        SchemaNode n;
        const int32_t slot = add({});
        for (size_t i = 0; i < it->size(); ++i) n.alts.push_back(compile((*it)[i], path + "/" + k + "/" + std::to_string(i)));
        nodes_[size_t(slot)] = std::move(n);
        return slot;
      }
    if (const auto it = s.find("allOf"); it != s.end()) return all_of(s, *it, path);
    if (const auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) return typed(s, it->get<std::string>(), path);
      if (!it->is_array() || it->empty()) fail(path, "'type' must be a type name or a non-empty array of them");
      SchemaNode n;
      const int32_t slot = add({});
      for (const ojson &t : *it) {
        if (!t.is_string()) fail(path, "'type' must be a type name or a non-empty array of them");
        n.alts.push_back(typed(s, t.get<std::string>(), path));
      }
      nodes_[size_t(slot)] = std::move(n);
      return slot;
    }
    // No type: told by the keywords, else any value.
    if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) return typed(s, "object", path);
    if (s.contains("items") || s.contains("prefixItems")) return typed(s, "array", path);
    return any();
  }

  // allOf: one schema, or objects whose properties and required keys are merged.
  int32_t all_of(const ojson &s, const ojson &parts, const std::string &path) {
    if (!parts.is_array() || parts.empty()) fail(path, "'allOf' must be a non-empty array");
    ojson merged = s;
    merged.erase("allOf");
    if (parts.size() == 1 && !s.contains("properties") && !s.contains("type")) return compile(parts[0], path + "/allOf/0");
    merged["type"] = "object";
    for (size_t i = 0; i < parts.size(); ++i) {
      const ojson *p = &parts[i];
      for (int hops = 0; p->is_object() && p->contains("$ref") && hops < 16; ++hops) {
        const std::string ref = (*p)["$ref"].is_string() ? (*p)["$ref"].get<std::string>() : "";
        try {
          p = &doc_.at(ojson::json_pointer(ref.substr(ref.empty() ? 0 : 1)));
        } catch (const std::exception &) {
          fail(path + "/allOf/" + std::to_string(i), "'$ref' \"" + ref + "\" names nothing in the schema");
        }
      }
      const bool object = p->is_object() && (p->value("type", ojson("object")) == "object");
      if (!object) fail(path + "/allOf/" + std::to_string(i), "'allOf' is supported for objects only (their properties are merged)");
      const ojson props = p->value("properties", ojson::object());  // named: items() of a temporary would dangle
      for (const auto &[k, v] : props.items()) merged["properties"][k] = v;
      for (const ojson &r : p->value("required", ojson::array())) merged["required"].push_back(r);
      if (p->contains("additionalProperties")) merged["additionalProperties"] = (*p)["additionalProperties"];
    }
    return compile(merged, path);
  }

  void bounds(SchemaNode &n, const ojson &s, const std::string &path) const {
    auto number = [&](const char *k) {
      if (!s[k].is_number()) fail(path, std::string("'") + k + "' must be a number");
      return s[k].get<double>();
    };
    if (s.contains("minimum")) n.has_lo = true, n.lo = number("minimum");
    if (s.contains("maximum")) n.has_hi = true, n.hi = number("maximum");
    // 2019+: a number; draft 4: a flag on minimum/maximum.
    if (s.contains("exclusiveMinimum")) {
      if (s["exclusiveMinimum"].is_boolean()) n.lo_excl = n.has_lo && s["exclusiveMinimum"].get<bool>();
      else if (double v = number("exclusiveMinimum"); !n.has_lo || v >= n.lo) n.has_lo = n.lo_excl = true, n.lo = v;
    }
    if (s.contains("exclusiveMaximum")) {
      if (s["exclusiveMaximum"].is_boolean()) n.hi_excl = n.has_hi && s["exclusiveMaximum"].get<bool>();
      else if (double v = number("exclusiveMaximum"); !n.has_hi || v <= n.hi) n.has_hi = n.hi_excl = true, n.hi = v;
    }
    if (n.kind == SchemaNode::integer) {  // to whole, inclusive bounds
      if (n.has_lo) n.lo = n.lo_excl ? std::floor(n.lo) + 1 : std::ceil(n.lo), n.lo_excl = false;
      if (n.has_hi) n.hi = n.hi_excl ? std::ceil(n.hi) - 1 : std::floor(n.hi), n.hi_excl = false;
    }
    if (n.has_lo && n.has_hi && (n.lo > n.hi || (n.lo == n.hi && (n.lo_excl || n.hi_excl))))
      fail(path, "no number lies within its minimum and maximum");
  }

  int32_t typed(const ojson &s, const std::string &type, const std::string &path) {
    SchemaNode n;
    if (type == "boolean") return literal({"true", "false"});
    if (type == "null") return literal({"null"});
    if (type == "number" || type == "integer") {
      n.kind = type == "number" ? SchemaNode::number : SchemaNode::integer;
      bounds(n, s, path);
      return add(std::move(n));
    }
    if (type == "string") {
      n.kind = SchemaNode::string;
      n.min_n = std::max<int64_t>(0, count(s, "minLength", path));
      n.max_n = count(s, "maxLength", path);
      if (n.max_n >= 0 && n.max_n < n.min_n) fail(path, "'maxLength' is below 'minLength'");
      try {
        if (const auto it = s.find("pattern"); it != s.end()) {
          if (!it->is_string()) fail(path, "'pattern' must be a string");
          n.pattern = Regex::compile(it->get<std::string>());
        } else if (const auto f = s.find("format"); f != s.end() && f->is_string() && format_pattern(f->get<std::string>())) {
          n.pattern = Regex::compile(format_pattern(f->get<std::string>()));
        }
      } catch (const Error &e) {
        if (strict_) fail(path, e.what());  // otherwise the string is any string
      }
      return add(std::move(n));
    }
    if (type == "array") {
      n.kind = SchemaNode::array;
      const int32_t slot = add({});
      const ojson *tuple = nullptr;
      const char *rest = "items";  // the schema of the items after the tuple
      if (s.contains("prefixItems")) tuple = &s.at("prefixItems");
      else if (s.contains("items") && s.at("items").is_array()) tuple = &s.at("items"), rest = "additionalItems";  // draft 4-7
      if (tuple) {
        if (!tuple->is_array()) fail(path, "'prefixItems' must be an array of schemas");
        for (size_t i = 0; i < tuple->size(); ++i) n.prefix.push_back(compile((*tuple)[i], path + "/prefixItems/" + std::to_string(i)));
      }
      if (const auto it = s.find(rest); it == s.end() || (it->is_boolean() && it->get<bool>())) n.items = any();
      else if (!(it->is_boolean())) n.items = compile(*it, path + "/" + rest);
      n.min_n = std::max<int64_t>(0, count(s, "minItems", path));
      n.max_n = count(s, "maxItems", path);
      if (n.items < 0 && (n.max_n < 0 || n.max_n > int64_t(n.prefix.size()))) n.max_n = int64_t(n.prefix.size());
      if (n.max_n >= 0 && n.max_n < n.min_n) fail(path, "no array fits: 'maxItems' (or the items allowed) is below 'minItems'");
      nodes_[size_t(slot)] = std::move(n);
      return slot;
    }
    if (type == "object") {
      n.kind = SchemaNode::object;
      const int32_t slot = add({});
      std::vector<std::string> required;
      if (const auto it = s.find("required"); it != s.end()) {
        if (!it->is_array()) fail(path, "'required' must be an array of names");
        for (const ojson &r : *it) {
          if (!r.is_string()) fail(path, "'required' must be an array of names");
          required.push_back(r.get<std::string>());
        }
      }
      auto is_required = [&](const std::string &k) { return std::find(required.begin(), required.end(), k) != required.end(); };
      if (const auto it = s.find("properties"); it != s.end()) {
        if (!it->is_object()) fail(path, "'properties' must be an object");
        for (const auto &[k, v] : it->items())
          n.props.push_back({ojson(k).dump(), compile(v, path + "/properties/" + k), is_required(k)});
      }
      for (const std::string &r : required)  // required but not described: any value
        if (std::none_of(n.props.begin(), n.props.end(), [&](const SchemaNode::Property &p) { return p.key == ojson(r).dump(); }))
          n.props.push_back({ojson(r).dump(), any(), true});
      const auto ap = s.find("additionalProperties");
      if (ap == s.end()) n.extra = s.contains("properties") ? -1 : any();  // llama.cpp's default: listed keys only
      else if (ap->is_boolean()) n.extra = ap->get<bool>() ? any() : -1;
      else n.extra = compile(*ap, path + "/additionalProperties");
      nodes_[size_t(slot)] = std::move(n);
      return slot;
    }
    fail(path, "unknown type \"" + type + "\" (JSON Schema's are object, array, string, number, integer, boolean, null)");
  }

  const ojson &doc_;
  bool strict_;
  int depth_ = 0;
  std::vector<SchemaNode> nodes_;
  std::map<std::string, int32_t> refs_;
  int32_t any_ = -1;
};

std::shared_ptr<const Schema> Schema::compile(const nlohmann::ordered_json &schema, bool strict) {
  return SchemaCompiler(schema, strict).run();
}

std::shared_ptr<const Schema> Schema::any_object() {
  static const std::shared_ptr<const Schema> s = compile(ojson{{"type", "object"}}, true);
  return s;
}

std::shared_ptr<const Schema> Schema::any_value() {
  static const std::shared_ptr<const Schema> s = compile(ojson::object(), true);
  return s;
}

// ---- the automaton --------------------------------------------------------------------------
//
// Frames by kind (phase values below):
//   value   a value of `node` is to begin: blanks, then its first character picks the kinds
//           that can start with it (one thread each); phase 1: no blanks (the reply's start)
//   object  open, first (a key or '}'), key (after ','), in_key, colon, value, after
//           keys are matched as texts: `lo` an eligible listed key (from `next` up to the first
//           required one) whose first `at` characters were written, `lo_all` any listed key;
//           `free_key` while the key may be one not listed (additionalProperties)
//   array   open, first (a value or ']'), value, after; `next` items written
//   string  open, body; `len` characters, `esc`; with a pattern `re`, and `cp`/`pending` for a
//           code point being read
//   number  open, sign, zero, int, dot, frac, exp_mark, exp_sign, exp; `len` the integer part,
//           `frac` the fraction digits; bounds checked on every prefix (some completion must fit)
//   literal `lo` a value text whose first `at` characters were written

namespace {

using Frame = SchemaState::Frame;
using Thread = SchemaState::Thread;

enum Obj : uint8_t { o_open, o_first, o_key, o_in_key, o_colon, o_value, o_after };
enum Arr : uint8_t { a_open, a_first, a_value, a_after };
enum Str : uint8_t { s_open, s_body };
enum Num : uint8_t { n_open, n_sign, n_zero, n_int, n_dot, n_frac, n_exp_mark, n_exp_sign, n_exp };

enum class Step { fail, ok, done, pass, push, push_refeed };

bool blank_ok(Thread &t, char c) {
  if (t.blanks == 0) {
    t.newline_run = c == '\n';
    t.blanks = 1;
    return c == ' ' || c == '\t' || c == '\n';
  }
  return t.newline_run && (c == ' ' || c == '\t') && ++t.blanks <= kMaxIndent + 1;
}

// One character of a string's body other than its closing quote: escapes, no control bytes.
bool string_char(uint8_t &esc, char c) {
  if (esc == 1) {
    if (c == 'u') return esc = 5, true;
    if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) return false;
    return esc = 0, true;
  }
  if (esc >= 2) {
    if (!hex(c)) return false;
    if (--esc == 1) esc = 0;
    return true;
  }
  if (c == '\\') return esc = 1, true;
  return c != '"' && static_cast<unsigned char>(c) >= 0x20;
}

// Texts [from, to) share their first `at` characters with texts[lo]: the first of them that
// goes on with c, or -1.
// text(k): the k-th text.
template <typename Text>
int32_t advance(Text text, int32_t from, int32_t to, int32_t lo, int32_t at, char c) {
  if (lo < 0) return -1;
  const std::string &p = text(lo);
  for (int32_t k = from; k < to; ++k) {
    const std::string &q = text(k);
    if (q.size() > size_t(at) && q[size_t(at)] == c && q.compare(0, size_t(at), p, 0, size_t(at)) == 0) return k;
  }
  return -1;
}

// Of the texts sharing texts[lo]'s first `at` characters: is one exactly that long, is one longer.
bool text_whole(const std::vector<std::string> &texts, int32_t lo, int32_t at) {
  if (lo < 0) return false;
  for (const std::string &q : texts)
    if (q.size() == size_t(at) && q.compare(0, size_t(at), texts[size_t(lo)], 0, size_t(at)) == 0) return true;
  return false;
}
bool text_goes_on(const std::vector<std::string> &texts, int32_t lo, int32_t at) {
  for (const std::string &q : texts)
    if (q.size() > size_t(at) && q.compare(0, size_t(at), texts[size_t(lo)], 0, size_t(at)) == 0) return true;
  return false;
}

// The eligible keys: from `next` up to and including the first required one.
int32_t window_end(const SchemaNode &n, int32_t next) {
  for (int32_t k = next; k < int32_t(n.props.size()); ++k)
    if (n.props[size_t(k)].required) return k + 1;
  return int32_t(n.props.size());
}
bool closable(const SchemaNode &n, int32_t next) {
  for (size_t k = size_t(next); k < n.props.size(); ++k)
    if (n.props[k].required) return false;
  return true;
}

int32_t item_node(const SchemaNode &n, int32_t i) { return size_t(i) < n.prefix.size() ? n.prefix[size_t(i)] : n.items; }

// Numbers: is there a value within the node's bounds in the interval between a and b (each end
// in or out)?
bool meets(const SchemaNode &n, long double a, bool a_in, long double b, bool b_in) {
  long double L = a, U = b;
  bool L_in = a_in, U_in = b_in;
  if (n.has_lo) {
    const long double lo = n.lo;
    if (lo > L) L = lo, L_in = !n.lo_excl;
    else if (lo == L) L_in = L_in && !n.lo_excl;
  }
  if (n.has_hi) {
    const long double hi = n.hi;
    if (hi < U) U = hi, U_in = !n.hi_excl;
    else if (hi == U) U_in = U_in && !n.hi_excl;
  }
  return L < U || (L == U && L_in && U_in);
}

using ld = long double;

ld pow10l_(int k) {
  ld p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

// Some completion of the number written so far lies within the bounds.
bool number_feasible(const SchemaNode &n, const Frame &f) {
  if (!n.has_lo && !n.has_hi) return true;
  const bool whole = n.kind == SchemaNode::integer;
  // Magnitudes [a, b) (integers: [a, b - 1]) mapped to values by the sign.
  auto fits = [&](long double a, long double b) {
    if (whole) b -= 1;
    return f.neg ? meets(n, -b, whole, -a, true) : meets(n, a, true, b, whole);
  };
  switch (f.phase) {
    case n_sign: return !n.has_lo || n.lo < 0;  // something below zero ("-0" is not offered)
    case n_zero: return whole ? meets(n, 0, true, 0, true) : fits(0, 1);
    case n_int:
      for (int k = 0; k <= kMaxDigits - f.int_digits; ++k) {
        const long double p = pow10l_(k);
        if (fits(ld(f.len) * p, ld(f.len + 1) * p)) return true;
      }
      return false;
    case n_dot:
    case n_frac: {
      const long double scale = pow10l_(f.frac_digits);
      const long double a = ld(f.len) + ld(f.frac) / scale;
      return fits(a, a + 1 / scale);
    }
    default: return true;  // exponents only without bounds
  }
}

bool number_ends(const SchemaNode &n, const Frame &f) {
  if (f.phase != n_zero && f.phase != n_int && f.phase != n_frac && f.phase != n_exp) return false;
  if (f.phase == n_exp || (!n.has_lo && !n.has_hi)) return true;
  const long double v = (ld(f.len) + ld(f.frac) / pow10l_(f.frac_digits)) * (f.neg ? -1 : 1);
  return meets(n, v, true, v, true);
}

Step feed_number(const SchemaNode &n, Frame &f, char c) {
  const bool whole = n.kind == SchemaNode::integer, bounded = n.has_lo || n.has_hi;
  auto go = [&](uint8_t phase) {
    f.phase = phase;
    return number_feasible(n, f) ? Step::ok : Step::fail;
  };
  const auto end = [&] { return number_ends(n, f) ? Step::pass : Step::fail; };
  switch (f.phase) {
    case n_open:
      if (c == '-') return f.neg = true, go(n_sign);
      [[fallthrough]];
    case n_sign:
      if (c == '0') return f.int_digits = 1, go(n_zero);
      if (!digit(c)) return Step::fail;
      f.len = c - '0', f.int_digits = 1;
      return go(n_int);
    case n_zero:
    case n_int:
      if (digit(c)) {
        if (f.phase == n_zero || f.int_digits >= kMaxDigits) return Step::fail;
        f.len = f.len * 10 + (c - '0'), ++f.int_digits;
        return go(n_int);
      }
      if (c == '.' && !whole) return go(n_dot);
      if ((c == 'e' || c == 'E') && !whole && !bounded) return f.phase = n_exp_mark, Step::ok;
      return end();
    case n_dot:
      if (!digit(c)) return Step::fail;
      f.frac = c - '0', f.frac_digits = 1;
      return go(n_frac);
    case n_frac:
      if (digit(c)) {
        if (f.frac_digits >= kMaxDigits) return Step::fail;
        f.frac = f.frac * 10 + (c - '0'), ++f.frac_digits;
        return go(n_frac);
      }
      if ((c == 'e' || c == 'E') && !bounded) return f.phase = n_exp_mark, Step::ok;
      return end();
    case n_exp_mark:
      if (c == '+' || c == '-') return f.phase = n_exp_sign, Step::ok;
      [[fallthrough]];
    case n_exp_sign:
      if (!digit(c)) return Step::fail;
      f.at = 1;
      return f.phase = n_exp, Step::ok;
    case n_exp:
      if (digit(c)) return ++f.at <= kMaxExpDigits ? Step::ok : Step::fail;
      return end();
  }
  return Step::fail;
}

// A string with a pattern, one byte at a time: code points (UTF-8, escapes) go to the pattern
// whole; a partial one is taken only if some code point it may still become can come next.
Step feed_pattern(const SchemaNode &n, Frame &f, char c) {
  const Regex &re = *n.pattern;
  const auto u = static_cast<unsigned char>(c);
  auto whole = [&](uint32_t cp) { return re.step(f.re, cp) ? Step::ok : Step::fail; };
  auto partial = [&](uint32_t lo, uint32_t hi) { return re.can_take(f.re, lo, hi) ? Step::ok : Step::fail; };
  if (f.pending > 0) {  // a UTF-8 continuation byte
    if ((u & 0xC0) != 0x80) return Step::fail;
    f.cp = f.cp << 6 | (u & 0x3F);
    if (--f.pending == 0) return whole(f.cp);
    const int bits = 6 * f.pending;
    return partial(f.cp << bits, (f.cp << bits) | ((1u << bits) - 1));
  }
  if (f.esc == 1) {
    f.esc = 0;
    switch (c) {
      case '"': case '\\': case '/': return whole(u);
      case 'b': return whole('\b');
      case 'f': return whole('\f');
      case 'n': return whole('\n');
      case 'r': return whole('\r');
      case 't': return whole('\t');
      case 'u': f.esc = 5, f.cp = 0; return partial(0, 0xFFFF);
      default: return Step::fail;
    }
  }
  if (f.esc >= 2) {  // \u's hex digits
    if (!hex(c)) return Step::fail;
    f.cp = f.cp * 16 + uint32_t(digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
    if (--f.esc == 1) return f.esc = 0, whole(f.cp);
    const int bits = 4 * (f.esc - 1);
    return partial(f.cp << bits, (f.cp << bits) | ((1u << bits) - 1));
  }
  if (c == '\\') return f.esc = 1, partial(0, 0xFFFF);
  if (u < 0x20) return Step::fail;  // control characters must be escaped
  if (u < 0x80) return whole(u);
  if (u < 0xC2 || u > 0xF4) return Step::fail;  // no UTF-8 lead byte
  f.pending = u >= 0xF0 ? 3 : u >= 0xE0 ? 2 : 1;
  f.cp = u & (0x3F >> f.pending);
  const int bits = 6 * f.pending;
  return partial(f.cp << bits, std::min<uint32_t>((f.cp << bits) | ((1u << bits) - 1), 0x10FFFF));
}

Step feed_string(const SchemaNode &n, Frame &f, char c) {
  if (f.phase == s_open) {
    if (c != '"') return Step::fail;
    f.phase = s_body;
    return Step::ok;
  }
  if (f.esc == 0 && f.pending == 0 && c == '"') {
    if (f.len < n.min_n || (n.pattern && !n.pattern->can_end(f.re))) return Step::fail;
    return Step::done;
  }
  // A new character: not a UTF-8 continuation byte, not inside an escape (an escape counts once).
  const bool starts = f.esc == 0 && (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  if (starts && n.max_n >= 0 && f.len >= n.max_n) return Step::fail;
  if (n.pattern) {
    if (feed_pattern(n, f, c) == Step::fail) return Step::fail;
  } else if (!string_char(f.esc, c)) {
    return Step::fail;
  }
  if (starts) ++f.len;
  return Step::ok;
}

Step feed_literal(const SchemaNode &n, Frame &f, char c) {
  const auto text = [&n](int32_t k) -> const std::string & { return n.texts[size_t(k)]; };
  const int32_t k = advance(text, 0, int32_t(n.texts.size()), f.lo, f.at, c);
  if (k < 0) return text_whole(n.texts, f.lo, f.at) ? Step::pass : Step::fail;
  f.lo = k, ++f.at;
  return text_whole(n.texts, k, f.at) && !text_goes_on(n.texts, k, f.at) ? Step::done : Step::ok;
}

Step feed_object(const SchemaNode &n, Thread &t, Frame &f, char c) {
  switch (f.phase) {
    case o_open:
      if (c != '{') return Step::fail;
      return f.phase = o_first, Step::ok;
    case o_first:
    case o_key:
      if (blank(c)) return blank_ok(t, c) ? Step::ok : Step::fail;
      if (c == '}' && f.phase == o_first) return closable(n, f.next) ? Step::done : Step::fail;
      if (c != '"') return Step::fail;
      f.lo = f.next < window_end(n, f.next) ? f.next : -1;
      f.lo_all = n.props.empty() ? -1 : 0;
      f.at = 1;  // every key text opens with its quote
      f.esc = 0;
      f.free_key = n.extra >= 0;
      if (f.lo < 0 && !f.free_key) return Step::fail;
      return f.phase = o_in_key, Step::ok;
    case o_in_key: {
      const auto key = [&n](int32_t k) -> const std::string & { return n.props[size_t(k)].key; };
      const int32_t lo = advance(key, f.next, window_end(n, f.next), f.lo, f.at, c);
      const int32_t all = advance(key, 0, int32_t(n.props.size()), f.lo_all, f.at, c);
      if (lo >= 0 && key(lo).size() == size_t(f.at) + 1) {  // a listed key, whole
        f.child = n.props[size_t(lo)].node;
        f.next = lo + 1;
        return f.phase = o_colon, Step::ok;
      }
      if (f.free_key && f.esc == 0 && c == '"') {  // a key not listed ends: it must differ from every listed one
        if (all >= 0 && key(all).size() == size_t(f.at) + 1) return Step::fail;
        f.child = n.extra;
        return f.phase = o_colon, Step::ok;
      }
      const bool free_ok = f.free_key && string_char(f.esc, c);
      if (lo < 0 && !free_ok) return Step::fail;
      f.lo = lo, f.lo_all = all, f.free_key = free_ok, ++f.at;
      return Step::ok;
    }
    case o_colon:
      if (blank(c)) return blank_ok(t, c) ? Step::ok : Step::fail;
      if (c != ':') return Step::fail;
      return f.phase = o_value, Step::push;
    case o_after:
      if (blank(c)) return blank_ok(t, c) ? Step::ok : Step::fail;
      if (c == '}') return closable(n, f.next) ? Step::done : Step::fail;
      if (c != ',' || (f.next >= int32_t(n.props.size()) && n.extra < 0)) return Step::fail;
      return f.phase = o_key, Step::ok;
  }
  return Step::fail;
}

Step feed_array(const SchemaNode &n, Thread &t, Frame &f, char c) {
  switch (f.phase) {
    case a_open:
      if (c != '[') return Step::fail;
      return f.phase = a_first, Step::ok;
    case a_first:
    case a_after:
      if (blank(c)) return blank_ok(t, c) ? Step::ok : Step::fail;
      if (c == ']') return f.next >= n.min_n ? Step::done : Step::fail;
      if (f.phase == a_first) {
        if ((f.child = item_node(n, 0)) < 0 || n.max_n == 0) return Step::fail;
        return f.phase = a_value, Step::push_refeed;
      }
      if (c != ',' || (n.max_n >= 0 && f.next >= n.max_n) || (f.child = item_node(n, f.next)) < 0) return Step::fail;
      return f.phase = a_value, Step::push;
  }
  return Step::fail;
}

bool can_start(const SchemaNode &n, char c) {
  switch (n.kind) {
    case SchemaNode::object: return c == '{';
    case SchemaNode::array: return c == '[';
    case SchemaNode::string: return c == '"';
    case SchemaNode::number:
    case SchemaNode::integer: return c == '-' || digit(c);
    case SchemaNode::literal:
      return std::any_of(n.texts.begin(), n.texts.end(), [c](const std::string &t) { return !t.empty() && t[0] == c; });
    case SchemaNode::any_of: return false;
  }
  return false;
}

// The concrete nodes (not alternatives) a value of node `i` can be that begin with c.
void starts(const Schema &s, int32_t i, char c, std::vector<int32_t> &out, int depth = 0) {
  const SchemaNode &n = s.node(i);
  if (n.kind != SchemaNode::any_of) {
    if (can_start(n, c) && std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
    return;
  }
  if (depth > 32) return;  // a reference cycle with no content between
  for (const int32_t a : n.alts) starts(s, a, c, out, depth + 1);
}

Frame begin(const Schema &s, int32_t i) {
  Frame f;
  f.node = i;
  switch (s.node(i).kind) {
    case SchemaNode::object: f.kind = Frame::object; break;
    case SchemaNode::array: f.kind = Frame::array; break;
    case SchemaNode::string: f.kind = Frame::string; break;
    case SchemaNode::number:
    case SchemaNode::integer: f.kind = Frame::number; break;
    default: f.kind = Frame::literal, f.lo = 0; break;
  }
  return f;
}

Frame value_frame(int32_t node, bool blanks_first) {
  Frame f;
  f.kind = Frame::value;
  f.node = node;
  f.phase = blanks_first ? 0 : 1;
  return f;
}

// The value on top of the stack is whole: its container goes on.
void child_done(Thread &t) {
  if (t.stack.empty()) return;
  Frame &p = t.stack.back();
  if (p.kind == Frame::object) p.phase = o_after;
  if (p.kind == Frame::array) ++p.next, p.phase = a_after;
}

bool frame_can_end(const Schema &s, const Frame &f) {
  const SchemaNode &n = s.node(f.node);
  if (f.kind == Frame::number) return number_ends(n, f);
  if (f.kind == Frame::literal) return text_whole(n.texts, f.lo, f.at);
  return false;
}

}  // namespace

SchemaState::SchemaState(std::shared_ptr<const Schema> schema) : schema_(std::move(schema)) {
  Thread t;
  t.stack.push_back(value_frame(schema_->root(), /*blanks_first=*/false));
  threads_.push_back(std::move(t));
}

void SchemaState::step(Thread t, char c, std::vector<Thread> &out) const {
  const Schema &s = *schema_;
  if (!blank(c)) t.blanks = 0;  // a run of blanks ends (blanks inside strings are no run)
  for (;;) {
    if (t.stack.empty()) return;  // nothing follows the whole value
    Frame &f = t.stack.back();
    Step r = Step::fail;
    switch (f.kind) {
      case Frame::value: {
        if (blank(c)) {
          if (f.phase == 0 && blank_ok(t, c)) out.push_back(std::move(t));
          return;
        }
        std::vector<int32_t> kinds;
        starts(s, f.node, c, kinds);
        for (size_t k = 0; k < kinds.size(); ++k) {
          Thread u = k + 1 == kinds.size() ? std::move(t) : t;
          u.stack.back() = begin(s, kinds[k]);
          step(std::move(u), c, out);
        }
        return;
      }
      case Frame::object: r = feed_object(s.node(f.node), t, f, c); break;
      case Frame::array: r = feed_array(s.node(f.node), t, f, c); break;
      case Frame::string: r = feed_string(s.node(f.node), f, c); break;
      case Frame::number: r = feed_number(s.node(f.node), f, c); break;
      case Frame::literal: r = feed_literal(s.node(f.node), f, c); break;
    }
    switch (r) {
      case Step::fail: return;
      case Step::ok: out.push_back(std::move(t)); return;
      case Step::push:
      case Step::push_refeed: {
        if (t.stack.size() >= kMaxDepth) return;
        const int32_t child = f.child;
        t.stack.push_back(value_frame(child, /*blanks_first=*/true));
        if (r == Step::push) return out.push_back(std::move(t));
        continue;
      }
      case Step::done:
        t.stack.pop_back();
        child_done(t);
        out.push_back(std::move(t));
        return;
      case Step::pass:
        t.stack.pop_back();
        child_done(t);
        continue;
    }
  }
}

namespace {

// A thread's place, for finding threads that came to the same one (equal threads hash equal).
size_t place_hash(const Thread &t) {
  size_t h = t.stack.size() * 0x9E3779B97F4A7C15ull ^ t.blanks;
  for (const Frame &f : t.stack) {
    const uint64_t a = uint64_t(uint32_t(f.node)) << 32 | uint32_t(f.kind) << 24 | uint32_t(f.phase) << 16 | uint32_t(f.esc) << 8 | uint32_t(f.free_key);
    const uint64_t b = uint64_t(uint32_t(f.next)) << 32 ^ uint64_t(uint32_t(f.lo)) << 16 ^ uint64_t(uint32_t(f.at)) ^ uint64_t(f.len) * 31 ^ uint64_t(f.frac);
    h = (h ^ a) * 0x100000001B3ull;
    h = (h ^ b) * 0x100000001B3ull;
  }
  return h;
}

}  // namespace

bool SchemaState::feed(char c) {
  std::vector<Thread> out;
  out.reserve(threads_.size());
  for (const Thread &t : threads_) step(t, c, out);
  if (out.empty()) return false;
  if (out.size() == 1) {
    threads_ = std::move(out);
    return true;
  }
  // Alternatives that came to the same place are one (hashes first: a call of one of hundreds
  // of tools keeps hundreds of threads until the name tells them apart).
  std::vector<std::pair<size_t, size_t>> keyed;  // (hash, index into out)
  for (size_t i = 0; i < out.size(); ++i) keyed.emplace_back(place_hash(out[i]), i);
  std::sort(keyed.begin(), keyed.end());
  std::vector<Thread> unique;
  for (size_t i = 0; i < keyed.size() && unique.size() < kMaxThreads; ++i) {
    bool seen = false;
    for (size_t j = i; j-- > 0 && keyed[j].first == keyed[i].first && !seen;) seen = out[keyed[j].second] == out[keyed[i].second];
    if (!seen) unique.push_back(out[keyed[i].second]);
  }
  threads_ = std::move(unique);
  return true;
}

bool SchemaState::can_end() const {
  return std::any_of(threads_.begin(), threads_.end(), [&](const Thread &t) {
    return t.stack.empty() || (t.stack.size() == 1 && frame_can_end(*schema_, t.stack.back()));
  });
}

bool SchemaState::settled() const {
  return std::all_of(threads_.begin(), threads_.end(), [](const Thread &t) { return t.stack.empty(); });
}

bool SchemaState::in_plain_string() const {
  return std::all_of(threads_.begin(), threads_.end(), [&](const Thread &t) {
    if (t.stack.empty()) return false;
    const Frame &f = t.stack.back();
    const SchemaNode &n = schema_->node(f.node);
    if (f.kind == Frame::string) return f.phase == s_body && f.esc == 0 && !n.pattern && n.max_n < 0;
    return f.kind == Frame::object && f.phase == o_in_key && f.free_key && f.esc == 0 && n.props.empty();
  });
}

}  // namespace minfer::sampling
