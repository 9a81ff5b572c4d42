// The schema compiler (json_schema.hpp): a JSON Schema document to the automaton's nodes.
#include "sampling/json_schema.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/error.hpp"

namespace minfer::sampling {

using ojson = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxNodes = 20000;  // a schema's compiled size
constexpr int kMaxSchemaDepth = 64;  // schemas nested within one another

// The formats a string is held to (RFC 3339's date, time and date-time, RFC 4122's uuid;
// Pydantic's EmailStr, IPv4Address and AnyUrl: email in its common dot-atom form, dotted-quad
// ipv4, uri as scheme ":" and no blanks), as patterns; other formats are annotations (JSON
// Schema's default): any string.
const char *format_pattern(const std::string &format) {
  if (format == "date") return "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$";
  if (format == "time") return "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";
  if (format == "date-time")
    return "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?"
           "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";
  if (format == "uuid") return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  if (format == "email") return "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$";
  if (format == "ipv4") return "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$";
  if (format == "uri") return "^[A-Za-z][A-Za-z0-9+.-]*:[^\\s\"\\\\<>]+$";
  return nullptr;
}

// Keywords that restrict values in ways this automaton does not follow.
constexpr const char *kUnsupported[] = {"patternProperties", "not", "if", "then", "else", "dependentSchemas",
                                        "dependentRequired", "contains", "minContains", "maxContains",
                                        "propertyNames",
                                        "unevaluatedProperties", "unevaluatedItems"};

}  // namespace

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

  // Whether every value of node i is a string, number, boolean or null (following alternatives
  // and references; a node being built counts as no scalar).
  bool scalar(int32_t i, int depth = 0) const {
    if (depth > 32 || i < 0 || size_t(i) >= nodes_.size()) return false;
    const SchemaNode &n = nodes_[size_t(i)];
    switch (n.kind) {
      case SchemaNode::string:
      case SchemaNode::number:
      case SchemaNode::integer: return true;
      case SchemaNode::literal:
        return std::all_of(n.texts.begin(), n.texts.end(), [](const std::string &t) { return !t.empty() && t[0] != '{' && t[0] != '['; });
      case SchemaNode::any_of:
        return !n.alts.empty() && std::all_of(n.alts.begin(), n.alts.end(), [&](int32_t a) { return scalar(a, depth + 1); });
      default: return false;
    }
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
            v = std::all_of(n.props.begin(), n.props.end(), [&](const SchemaNode::Property &p) { return !p.required || ok[size_t(p.node)]; }) &&
                (n.min_n == 0 || (n.extra >= 0 && ok[size_t(n.extra)]) ||
                 std::count_if(n.props.begin(), n.props.end(), [&](const SchemaNode::Property &p) { return ok[size_t(p.node)] != 0; }) >= n.min_n);
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
    if (const auto m = s.find("multipleOf"); m != s.end()) {
      if (!m->is_number() || m->get<double>() <= 0) fail(path, "'multipleOf' must be a number above 0");
      const double v = m->get<double>();
      // A whole number: the value is written as an integer (a number too, then) whose digits so
      // far leave room for a multiple within the bounds. A decimal step (0.01, 0.25, 2.5: at most
      // six places): at most that many fraction digits, the value in those units a multiple.
      // Others (1/3) are refused in strict schemas, left to the model in tool parameters.
      int32_t scale = 0;
      while (scale <= 6 && std::fabs(v * std::pow(10.0, scale) - std::round(v * std::pow(10.0, scale))) > 1e-9 * std::pow(10.0, scale)) ++scale;
      if (v == std::floor(v) && v <= 1e15) {
        if (n.kind == SchemaNode::number) {  // whole values, bounds to whole ones
          n.kind = SchemaNode::integer;
          if (n.has_lo) n.lo = n.lo_excl ? std::floor(n.lo) + 1 : std::ceil(n.lo), n.lo_excl = false;
          if (n.has_hi) n.hi = n.hi_excl ? std::ceil(n.hi) - 1 : std::floor(n.hi), n.hi_excl = false;
        }
        n.multiple = int64_t(v);
        if (n.has_lo && n.has_hi && std::ceil(n.lo / v) * v > n.hi)
          fail(path, "no multiple of " + m->dump() + " lies within its minimum and maximum");
      } else if (scale <= 6 && v * std::pow(10.0, scale) <= 1e15) {
        n.multiple = int64_t(std::llround(v * std::pow(10.0, scale)));
        n.scale = scale;
        if (n.has_lo && n.has_hi && std::ceil(n.lo / v - 1e-9) * v > n.hi + 1e-9 * std::fabs(v))
          fail(path, "no multiple of " + m->dump() + " lies within its minimum and maximum");
      } else if (strict_) {
        fail(path, "'multipleOf' is supported by a whole number or a decimal step of up to six places, not " + m->dump() + "; leave it out");
      }
    }
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
      if (const auto u = s.find("uniqueItems"); u != s.end() && *u == true) {
        // Items compared as written, so only scalars (strings, numbers, enum values): objects
        // and arrays could be equal with their keys or blanks written otherwise.
        bool scalars = true;
        for (const int32_t i : n.prefix) scalars = scalars && scalar(i);
        if (n.items >= 0) scalars = scalars && scalar(n.items);
        if (scalars) n.unique = true;
        else if (strict_) fail(path, "'uniqueItems' is supported for items that are strings, numbers, booleans or enum values; leave it out");
      }
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
      n.min_n = std::max<int64_t>(0, count(s, "minProperties", path));
      n.max_n = count(s, "maxProperties", path);
      const int64_t n_required = std::count_if(n.props.begin(), n.props.end(), [](const SchemaNode::Property &p) { return p.required; });
      if (n.max_n >= 0 && (n.max_n < n.min_n || n.max_n < n_required))
        fail(path, "no object fits: 'maxProperties' is below 'minProperties' or the required keys");
      if (n.extra < 0 && int64_t(n.props.size()) < n.min_n) fail(path, "no object fits: 'minProperties' is above the keys it may have");
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

}  // namespace minfer::sampling
