#include "chat/jinja/builtins.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>

#include "tokenizer/unicode.hpp"

namespace minfer::jinja {

std::vector<std::string> characters(const std::string &s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(tokenizer::utf8_len(uint8_t(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

namespace {

[[noreturn]] void fail(const std::string &what) { throw TemplateError(what); }

const std::string &need_string(const Value &v, const char *what) {
  if (!v.is_string()) fail(std::string(what) + " needs a string, not " + v.type_name());
  return v.as_string();
}

bool is_py_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// str.strip/lstrip/rstrip: whitespace, or the characters of chars.
std::string strip(const std::string &s, const Value &chars, bool left, bool right) {
  std::vector<std::string> set;
  const bool ws = chars.is_undefined() || chars.is_none();
  if (!ws) set = characters(need_string(chars, "strip()"));
  auto strippable = [&](const std::string &c) {
    if (ws) return c.size() == 1 && is_py_space(uint8_t(c[0]));
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  const auto cs = characters(s);
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && strippable(cs[b])) ++b;
  if (right)
    while (e > b && strippable(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

// ASCII case mapping (what chat templates need); other characters pass through.
std::string upper(std::string s) {
  for (char &c : s) c = char(std::toupper(uint8_t(c)));
  return s;
}
std::string lower(std::string s) {
  for (char &c : s) c = char(std::tolower(uint8_t(c)));
  return s;
}
std::string capitalize(const std::string &s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = char(std::toupper(uint8_t(out[0])));
  return out;
}
std::string title(const std::string &s) {
  std::string out = s;
  bool start = true;
  for (char &c : out) {
    if (std::isalpha(uint8_t(c))) {
      c = char(start ? std::toupper(uint8_t(c)) : std::tolower(uint8_t(c)));
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}

List split(const std::string &s, const Value &sep, int64_t maxsplit) {
  List out;
  if (sep.is_undefined() || sep.is_none()) {  // runs of whitespace, no empty pieces
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_py_space(uint8_t(s[i]))) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        std::string rest = s.substr(i);
        while (!rest.empty() && is_py_space(uint8_t(rest.back()))) rest.pop_back();
        out.emplace_back(rest);
        return out;
      }
      size_t j = i;
      while (j < s.size() && !is_py_space(uint8_t(s[j]))) ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string &d = need_string(sep, "split()");
  if (d.empty()) fail("empty separator");
  size_t start = 0;
  while (true) {
    const size_t hit = s.find(d, start);
    if (hit == std::string::npos || (maxsplit >= 0 && int64_t(out.size()) == maxsplit)) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, hit - start));
    start = hit + d.size();
  }
}

std::string replace(const std::string &s, const std::string &from, const std::string &to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters and at both ends
    const auto cs = characters(s);
    int64_t n = 0;
    for (const auto &c : cs) {
      if (count < 0 || n < count) out += to, ++n;
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (true) {
    const size_t hit = s.find(from, start);
    if (hit == std::string::npos || (count >= 0 && n >= count)) break;
    out.append(s, start, hit - start);
    out += to;
    start = hit + from.size();
    ++n;
  }
  return out + s.substr(start);
}

// "{} and {name}".format(...): positional (auto or numbered) and keyword fields, no specs.
std::string format(const std::string &fmt, const CallArgs &a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("format(): a '{' without its '}'");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    Value v;
    if (field.empty()) {
      v = auto_index < a.args.size() ? a.args[auto_index] : Value();
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return std::isdigit(uint8_t(d)); })) {
      const size_t k = std::stoul(field);
      if (k < a.args.size()) v = a.args[k];
    } else {
      for (const auto &[name, kv] : a.kwargs)
        if (name == field) v = kv;
    }
    if (v.is_undefined()) fail("format(): no value for field '{" + field + "}'");
    out += v.str();
    i = close;
  }
  return out;
}

int64_t length(const Value &v) {
  switch (v.kind()) {
    case Value::Kind::String: return int64_t(characters(v.as_string()).size());
    case Value::Kind::List: return int64_t(v.as_list().size());
    case Value::Kind::Dict: return int64_t(v.as_dict().size());
    case Value::Kind::Undefined: return 0;
    default: fail("object of type '" + v.type_name() + "' has no len()");
  }
}

List as_items(const Value &v) {
  switch (v.kind()) {
    case Value::Kind::List: return v.as_list();
    case Value::Kind::Dict: {
      List keys;
      for (const auto &kv : v.as_dict()) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      List out;
      for (auto &c : characters(v.as_string())) out.emplace_back(std::move(c));
      return out;
    }
    case Value::Kind::Undefined: return {};
    default: fail("'" + v.type_name() + "' object is not iterable");
  }
}

// obj.attribute, with dotted paths ("a.b") and integer parts, as Jinja's attribute filters read.
Value get_path(const Value &obj, const std::string &path) {
  Value cur = obj;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_dict()) {
      const Value *v = cur.find(part);
      cur = v ? *v : Value::undefined("'dict object' has no attribute '" + part + "'");
    } else if (cur.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(uint8_t(c)); })) {
      const size_t i = std::stoul(part);
      cur = i < cur.as_list().size() ? cur.as_list()[i] : Value();
    } else {
      return Value::undefined("'" + cur.type_name() + " object' has no attribute '" + part + "'");
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

CallArgs shift(const CallArgs &a, size_t n) {
  CallArgs out;
  out.args.assign(a.args.begin() + long(std::min(n, a.args.size())), a.args.end());
  out.kwargs = a.kwargs;
  return out;
}

List select(const Value &seq, const CallArgs &a, bool by_attr, bool keep_when) {
  List out;
  const std::string attr = by_attr ? need_string(a.get(0, "attribute"), "selectattr()") : "";
  const size_t test_at = by_attr ? 1 : 0;
  const bool has_test = a.args.size() > test_at;
  const std::string test = has_test ? need_string(a.args[test_at], "a test name") : "";
  const CallArgs test_args = shift(a, test_at + 1);
  for (const Value &x : as_items(seq)) {
    const Value v = by_attr ? get_path(x, attr) : x;
    const bool pass = has_test ? apply_test(test, v, test_args) : v.truthy();
    if (pass == keep_when) out.push_back(x);
  }
  return out;
}

Value sorted(const Value &seq, const CallArgs &a) {
  List l = as_items(seq);
  const bool reverse = a.get(0, "reverse", Value(false)).truthy();
  const bool case_sensitive = a.get(1, "case_sensitive", Value(false)).truthy();
  const Value attr = a.get(2, "attribute");
  auto key = [&](const Value &v) {
    Value k = attr.is_string() ? get_path(v, attr.as_string()) : v;
    if (!case_sensitive && k.is_string()) k = Value(lower(k.as_string()));
    return k;
  };
  std::stable_sort(l.begin(), l.end(), [&](const Value &x, const Value &y) {
    bool ok = true;
    const bool r = reverse ? less(key(y), key(x), ok) : less(key(x), key(y), ok);
    if (!ok) fail("'<' not supported between instances of '" + x.type_name() + "' and '" + y.type_name() + "'");
    return r;
  });
  return Value(std::move(l));
}

std::string indent(const std::string &s, const CallArgs &a) {
  const Value w = a.get(0, "width", Value(4));
  const std::string pad = w.is_string() ? w.as_string() : std::string(size_t(std::max<int64_t>(0, w.as_int())), ' ');
  const bool first = a.get(1, "first", Value(false)).truthy(), blank = a.get(2, "blank", Value(false)).truthy();
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start <= s.size()) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if ((!is_first || first) && (blank || !line.empty())) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    is_first = false;
  }
  return out;
}

Value to_int(const Value &v, const Value &fallback) {
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return Value(int64_t(v.as_float()));
  if (v.is_string()) {
    const std::string t = strip(v.as_string(), Value(), true, true);
    char *end = nullptr;
    const long long x = std::strtoll(t.c_str(), &end, 10);
    if (!t.empty() && !*end) return Value(int64_t(x));
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && !*end) return Value(int64_t(d));
  }
  return fallback;
}

using FilterFn = Value (*)(const Value &, const CallArgs &);

const std::map<std::string, FilterFn> &filters() {
  static const std::map<std::string, FilterFn> f = {
      {"trim", [](const Value &v, const CallArgs &a) { return Value(strip(v.str(), a.get(0, "chars"), true, true)); }},
      {"length", [](const Value &v, const CallArgs &) { return Value(length(v)); }},
      {"count", [](const Value &v, const CallArgs &) { return Value(length(v)); }},
      {"tojson",
       [](const Value &v, const CallArgs &a) {
         // transformers' filter: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
         const Value ind = a.get(1, "indent"), sep = a.get(2, "separators");
         if (!ind.is_undefined() && !ind.is_none() && !ind.is_int()) fail("tojson(indent=) takes a number of spaces");
         const int indent = ind.is_int() ? int(std::max<int64_t>(0, ind.as_int())) : -1;
         std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";  // json.dumps' defaults
         if (sep.is_list()) {
           if (sep.as_list().size() != 2) fail("tojson(separators=) takes a pair (item separator, key separator)");
           item_sep = need_string(sep.as_list()[0], "separators");
           key_sep = need_string(sep.as_list()[1], "separators");
         }
         return Value(to_json(v, a.get(0, "ensure_ascii", Value(false)).truthy(), indent, item_sep, key_sep,
                              a.get(3, "sort_keys", Value(false)).truthy()));
       }},
      {"join",
       [](const Value &v, const CallArgs &a) {
         const std::string sep = a.get(0, "d", Value("")).str();
         const Value attr = a.get(1, "attribute");
         std::string out;
         bool first = true;
         for (const Value &x : as_items(v)) {
           out += (first ? "" : sep) + (attr.is_string() ? get_path(x, attr.as_string()) : x).str();
           first = false;
         }
         return Value(out);
       }},
      {"map",
       [](const Value &v, const CallArgs &a) {
         List out;
         for (const auto &[k, kv] : a.kwargs)
           if (k == "attribute") {
             const Value dflt = a.get(1000, "default");
             for (const Value &x : as_items(v)) {
               Value r = get_path(x, need_string(kv, "map(attribute=)"));
               out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
             }
             return Value(std::move(out));
           }
         if (a.args.empty()) fail("map() needs a filter name or attribute=");
         const std::string name = need_string(a.args[0], "map()");
         const CallArgs rest = shift(a, 1);
         for (const Value &x : as_items(v)) out.push_back(apply_filter(name, x, rest));
         return Value(std::move(out));
       }},
      {"selectattr", [](const Value &v, const CallArgs &a) { return Value(select(v, a, true, true)); }},
      {"rejectattr", [](const Value &v, const CallArgs &a) { return Value(select(v, a, true, false)); }},
      {"select", [](const Value &v, const CallArgs &a) { return Value(select(v, a, false, true)); }},
      {"reject", [](const Value &v, const CallArgs &a) { return Value(select(v, a, false, false)); }},
      {"first",
       [](const Value &v, const CallArgs &) {
         const List l = as_items(v);
         return l.empty() ? Value::undefined("no first item of an empty sequence") : l.front();
       }},
      {"last",
       [](const Value &v, const CallArgs &) {
         const List l = as_items(v);
         return l.empty() ? Value::undefined("no last item of an empty sequence") : l.back();
       }},
      {"list", [](const Value &v, const CallArgs &) { return Value(as_items(v)); }},
      {"string", [](const Value &v, const CallArgs &) { return Value(v.str()); }},
      {"int", [](const Value &v, const CallArgs &a) { return to_int(v, a.get(0, "default", Value(0))); }},
      {"float",
       [](const Value &v, const CallArgs &a) {
         if (v.is_number() || v.is_bool()) return Value(v.as_float());
         if (v.is_string()) {
           char *end = nullptr;
           const double d = std::strtod(v.as_string().c_str(), &end);
           if (!v.as_string().empty() && !*end) return Value(d);
         }
         return a.get(0, "default", Value(0.0));
       }},
      {"abs",
       [](const Value &v, const CallArgs &) {
         if (v.is_float()) return Value(std::fabs(v.as_float()));
         if (v.is_int() || v.is_bool()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
         fail("bad operand type for abs(): '" + v.type_name() + "'");
       }},
      {"default",
       [](const Value &v, const CallArgs &a) {
         const bool boolean = a.get(1, "boolean", Value(false)).truthy();
         if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
         return v;
       }},
      {"upper", [](const Value &v, const CallArgs &) { return Value(upper(v.str())); }},
      {"lower", [](const Value &v, const CallArgs &) { return Value(lower(v.str())); }},
      {"capitalize", [](const Value &v, const CallArgs &) { return Value(capitalize(v.str())); }},
      {"title", [](const Value &v, const CallArgs &) { return Value(title(v.str())); }},
      {"replace",
       [](const Value &v, const CallArgs &a) {
         const Value count = a.get(2, "count");
         return Value(replace(v.str(), a.get(0, "old").str(), a.get(1, "new").str(), count.is_int() ? count.as_int() : -1));
       }},
      {"safe", [](const Value &v, const CallArgs &) { return v; }},
      {"unique",
       [](const Value &v, const CallArgs &a) {
         const Value attr = a.get(1, "attribute");
         List out;
         for (const Value &x : as_items(v)) {
           const Value key = attr.is_string() ? get_path(x, attr.as_string()) : x;
           if (std::none_of(out.begin(), out.end(), [&](const Value &y) {
                 return equal(attr.is_string() ? get_path(y, attr.as_string()) : y, key);
               }))
             out.push_back(x);
         }
         return Value(std::move(out));
       }},
      {"dictsort",
       [](const Value &v, const CallArgs &a) {
         if (!v.is_dict()) fail("dictsort needs a dict, not " + v.type_name());
         const bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
         const bool by_value = a.get(1, "by", Value("key")).str() == "value";
         const bool reverse = a.get(2, "reverse", Value(false)).truthy();
         List items;
         for (const auto &[k, x] : v.as_dict()) items.emplace_back(List{Value(k), x});
         std::stable_sort(items.begin(), items.end(), [&](const Value &p, const Value &q) {
           Value x = p.as_list()[by_value ? 1 : 0], y = q.as_list()[by_value ? 1 : 0];
           if (!case_sensitive && x.is_string()) x = Value(lower(x.as_string()));
           if (!case_sensitive && y.is_string()) y = Value(lower(y.as_string()));
           bool ok = true;
           return reverse ? less(y, x, ok) : less(x, y, ok);
         });
         return Value(std::move(items));
       }},
      {"items",
       [](const Value &v, const CallArgs &) {
         if (v.is_undefined()) return Value(List{});
         if (!v.is_dict()) fail("items needs a dict, not " + v.type_name());
         List items;
         for (const auto &[k, x] : v.as_dict()) items.emplace_back(List{Value(k), x});
         return Value(std::move(items));
       }},
      {"indent", [](const Value &v, const CallArgs &a) { return Value(indent(v.str(), a)); }},
      {"reverse",
       [](const Value &v, const CallArgs &) {
         if (v.is_string()) {
           auto cs = characters(v.as_string());
           std::string out;
           for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
           return Value(out);
         }
         List l = as_items(v);
         std::reverse(l.begin(), l.end());
         return Value(std::move(l));
       }},
      {"sort", [](const Value &v, const CallArgs &a) { return sorted(v, a); }},
      {"sum",
       [](const Value &v, const CallArgs &a) {
         const Value attr = a.get(0, "attribute");
         Value total = a.get(1, "start", Value(0));
         for (const Value &x : as_items(v)) {
           const Value y = attr.is_string() ? get_path(x, attr.as_string()) : x;
           total = total.is_float() || y.is_float() ? Value(total.as_float() + y.as_float()) : Value(total.as_int() + y.as_int());
         }
         return total;
       }},
      {"wordcount", [](const Value &v, const CallArgs &) { return Value(int64_t(split(v.str(), Value(), -1).size())); }},
      {"center",
       [](const Value &v, const CallArgs &a) {
         const std::string s = v.str();
         const int64_t w = a.get(0, "width", Value(80)).as_int(), n = int64_t(characters(s).size());
         if (w <= n) return Value(s);
         const int64_t left = (w - n) / 2;
         return Value(std::string(size_t(left), ' ') + s + std::string(size_t(w - n - left), ' '));
       }},
  };
  return f;
}

using TestFn = bool (*)(const Value &, const CallArgs &);

const std::map<std::string, TestFn> &tests() {
  static const std::map<std::string, TestFn> t = {
      {"defined", [](const Value &v, const CallArgs &) { return !v.is_undefined(); }},
      {"undefined", [](const Value &v, const CallArgs &) { return v.is_undefined(); }},
      {"none", [](const Value &v, const CallArgs &) { return v.is_none(); }},
      {"string", [](const Value &v, const CallArgs &) { return v.is_string(); }},
      {"mapping", [](const Value &v, const CallArgs &) { return v.is_dict(); }},
      {"iterable", [](const Value &v, const CallArgs &) { return v.is_list() || v.is_dict() || v.is_string(); }},
      {"sequence", [](const Value &v, const CallArgs &) { return v.is_list() || v.is_dict() || v.is_string(); }},
      {"number", [](const Value &v, const CallArgs &) { return v.is_number() || v.is_bool(); }},
      {"integer", [](const Value &v, const CallArgs &) { return v.is_int(); }},
      {"float", [](const Value &v, const CallArgs &) { return v.is_float(); }},
      {"boolean", [](const Value &v, const CallArgs &) { return v.is_bool(); }},
      {"true", [](const Value &v, const CallArgs &) { return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value &v, const CallArgs &) { return v.is_bool() && !v.as_bool(); }},
      {"callable", [](const Value &v, const CallArgs &) { return v.is_function(); }},
      {"odd", [](const Value &v, const CallArgs &) { return v.as_int() % 2 != 0; }},
      {"even", [](const Value &v, const CallArgs &) { return v.as_int() % 2 == 0; }},
      {"divisibleby",
       [](const Value &v, const CallArgs &a) {
         const int64_t d = a.get(0, "num", Value(1)).as_int();
         if (d == 0) fail("divisibleby 0");
         return v.as_int() % d == 0;
       }},
      {"eq", [](const Value &v, const CallArgs &a) { return equal(v, a.get(0, "other")); }},
      {"equalto", [](const Value &v, const CallArgs &a) { return equal(v, a.get(0, "other")); }},
      {"==", [](const Value &v, const CallArgs &a) { return equal(v, a.get(0, "other")); }},
      {"ne", [](const Value &v, const CallArgs &a) { return !equal(v, a.get(0, "other")); }},
      {"sameas", [](const Value &v, const CallArgs &a) { return equal(v, a.get(0, "other")); }},
      {"lt", [](const Value &v, const CallArgs &a) { bool ok; return less(v, a.get(0, "other"), ok); }},
      {"gt", [](const Value &v, const CallArgs &a) { bool ok; return less(a.get(0, "other"), v, ok); }},
      {"le", [](const Value &v, const CallArgs &a) { bool ok; return !less(a.get(0, "other"), v, ok); }},
      {"ge", [](const Value &v, const CallArgs &a) { bool ok; return !less(v, a.get(0, "other"), ok); }},
      {"in",
       [](const Value &v, const CallArgs &a) {
         const Value seq = a.get(0, "seq");
         if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
         if (seq.is_dict()) return v.is_string() && seq.find(v.as_string()) != nullptr;
         for (const Value &x : as_items(seq))
           if (equal(x, v)) return true;
         return false;
       }},
      {"lower", [](const Value &v, const CallArgs &) { return v.is_string() && lower(v.as_string()) == v.as_string(); }},
      {"upper", [](const Value &v, const CallArgs &) { return v.is_string() && upper(v.as_string()) == v.as_string(); }},
  };
  return t;
}

bool startswith(const std::string &s, const Value &prefix, bool ends) {
  auto one = [&](const std::string &p) {
    return p.size() <= s.size() && (ends ? s.compare(s.size() - p.size(), p.size(), p) == 0 : s.compare(0, p.size(), p) == 0);
  };
  if (prefix.is_list())
    return std::any_of(prefix.as_list().begin(), prefix.as_list().end(), [&](const Value &p) { return one(need_string(p, "startswith()")); });
  return one(need_string(prefix, ends ? "endswith()" : "startswith()"));
}

Value bound(const std::string &name, std::function<Value(CallArgs &)> f) { return Value::function(name, std::move(f)); }

}  // namespace

Value apply_filter(const std::string &name, const Value &value, const CallArgs &args) {
  const auto &f = filters();
  auto it = f.find(name == "d" ? "default" : name == "e" || name == "escape" ? "safe" : name);
  if (it == f.end()) fail("no filter named '" + name + "'");
  return it->second(value, args);
}

bool apply_test(const std::string &name, const Value &value, const CallArgs &args) {
  const auto &t = tests();
  auto it = t.find(name);
  if (it == t.end()) fail("no test named '" + name + "'");
  return it->second(value, args);
}

Value method(const Value &obj, const std::string &name) {
  if (obj.is_string()) {
    const std::string s = obj.as_string();
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return bound(name, [s, name](CallArgs &a) { return Value(strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip")); });
    if (name == "split")
      return bound(name, [s](CallArgs &a) {
        const Value m = a.get(1, "maxsplit", Value(-1));
        return Value(split(s, a.get(0, "sep"), m.as_int()));
      });
    if (name == "startswith" || name == "endswith")
      return bound(name, [s, name](CallArgs &a) { return Value(startswith(s, a.get(0, "prefix"), name == "endswith")); });
    if (name == "replace")
      return bound(name, [s](CallArgs &a) {
        const Value count = a.get(2, "count", Value(-1));
        return Value(replace(s, need_string(a.get(0, "old"), "replace()"), need_string(a.get(1, "new"), "replace()"), count.as_int()));
      });
    if (name == "upper") return bound(name, [s](CallArgs &) { return Value(upper(s)); });
    if (name == "lower") return bound(name, [s](CallArgs &) { return Value(lower(s)); });
    if (name == "title") return bound(name, [s](CallArgs &) { return Value(title(s)); });
    if (name == "capitalize") return bound(name, [s](CallArgs &) { return Value(capitalize(s)); });
    if (name == "format") return bound(name, [s](CallArgs &a) { return Value(format(s, a)); });
    if (name == "join")
      return bound(name, [s](CallArgs &a) {
        std::string out;
        bool first = true;
        for (const Value &x : as_items(a.get(0, "iterable"))) {
          out += (first ? "" : s) + need_string(x, "join()");
          first = false;
        }
        return Value(out);
      });
    if (name == "find" || name == "count")
      return bound(name, [s, name](CallArgs &a) {
        const std::string &sub = need_string(a.get(0, "sub"), name.c_str());
        if (name == "find") {
          const size_t p = s.find(sub);
          return Value(p == std::string::npos ? int64_t(-1) : int64_t(characters(s.substr(0, p)).size()));
        }
        if (sub.empty()) return Value(int64_t(characters(s).size()) + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value(n);
      });
    if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" || name == "islower" || name == "isupper")
      return bound(name, [s, name](CallArgs &) {
        if (s.empty()) return Value(false);
        if (name == "islower") return Value(lower(s) == s && upper(s) != s);
        if (name == "isupper") return Value(upper(s) == s && lower(s) != s);
        for (unsigned char c : s) {
          const bool ok = name == "isdigit" ? std::isdigit(c) : name == "isspace" ? is_py_space(c) : name == "isalpha" ? std::isalpha(c) : std::isalnum(c);
          if (!ok) return Value(false);
        }
        return Value(true);
      });
    return Value();
  }
  if (obj.is_dict() && !obj.is_namespace()) {
    const Value d = obj;
    if (name == "items")
      return bound(name, [d](CallArgs &) { return apply_filter("items", d, CallArgs{}); });
    if (name == "keys")
      return bound(name, [d](CallArgs &) {
        List l;
        for (const auto &kv : d.as_dict()) l.emplace_back(kv.first);
        return Value(std::move(l));
      });
    if (name == "values")
      return bound(name, [d](CallArgs &) {
        List l;
        for (const auto &kv : d.as_dict()) l.push_back(kv.second);
        return Value(std::move(l));
      });
    if (name == "get")
      return bound(name, [d](CallArgs &a) {
        const Value key = a.get(0, "key");
        const Value *v = key.is_string() ? d.find(key.as_string()) : nullptr;
        return v ? *v : a.get(1, "default", Value::none());
      });
  }
  if (obj.is_list()) {
    const Value l = obj;
    if (name == "index")
      return bound(name, [l](CallArgs &a) {
        const Value x = a.get(0, "value");
        for (size_t i = 0; i < l.as_list().size(); ++i)
          if (equal(l.as_list()[i], x)) return Value(int64_t(i));
        fail(x.repr() + " is not in list");
      });
    if (name == "count")
      return bound(name, [l](CallArgs &a) {
        const Value x = a.get(0, "value");
        return Value(int64_t(std::count_if(l.as_list().begin(), l.as_list().end(), [&](const Value &y) { return equal(x, y); })));
      });
  }
  static const char *mutating[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "setdefault", "popitem"};
  if (obj.is_list() || obj.is_dict())
    for (const char *m : mutating)
      if (name == m)
        return bound(name, [name, t = obj.type_name()](CallArgs &) -> Value {
          fail("the template calls " + t + "." + name + "(), which changes a value; chat templates run sandboxed, as in "
               "transformers, where that is refused");
        });
  return Value();
}

void add_globals(Dict &g, const RenderOptions &opts, std::vector<Value> *namespaces) {
  g.emplace_back("range", Value::function("range", [](CallArgs &a) {
                   int64_t start = 0, stop, stride = 1;
                   if (a.args.empty()) fail("range() needs at least one argument");
                   if (a.args.size() == 1) stop = a.args[0].as_int();
                   else start = a.args[0].as_int(), stop = a.args[1].as_int();
                   if (a.args.size() > 2) stride = a.args[2].as_int();
                   if (stride == 0) fail("range() step must not be zero");
                   if ((stop - start) / stride > 1'000'000) fail("range() of more than 1,000,000 numbers");
                   List out;
                   for (int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) out.emplace_back(i);
                   return Value(std::move(out));
                 }));
  g.emplace_back("namespace", Value::function("namespace", [namespaces](CallArgs &a) {
                   Dict attrs;
                   if (!a.args.empty() && a.args[0].is_dict()) attrs = a.args[0].as_dict();
                   for (const auto &[k, v] : a.kwargs) attrs.emplace_back(k, v);
                   Value ns = Value::namespace_object(std::move(attrs));
                   if (namespaces) namespaces->push_back(ns);
                   return ns;
                 }));
  g.emplace_back("dict", Value::function("dict", [](CallArgs &a) {
                   Dict d;
                   if (!a.args.empty() && a.args[0].is_dict()) d = a.args[0].as_dict();
                   for (const auto &[k, v] : a.kwargs) d.emplace_back(k, v);
                   return Value(std::move(d));
                 }));
  g.emplace_back("raise_exception", Value::function("raise_exception", [](CallArgs &a) -> Value {
                   throw TemplateError(a.get(0, "message", Value("raise_exception() was called")).str(), 0, 0, true);
                 }));
  std::tm now{};
  if (opts.now) {
    now = *opts.now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  g.emplace_back("strftime_now", Value::function("strftime_now", [now](CallArgs &a) {
                   const std::string fmt = need_string(a.get(0, "format"), "strftime_now()");
                   char buf[512];
                   const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &now);
                   if (n == 0 && !fmt.empty()) fail("strftime_now(): the format gives no text or too much");
                   return Value(std::string(buf, n));
                 }));
}

}  // namespace minfer::jinja
