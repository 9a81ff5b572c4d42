// core/chat/jinja/builtins.hpp — Jinja's filters, tests, globals and the Python methods
// templates call on strings, lists and dicts (sandboxed: none of them mutates a value).
#pragma once

#include <string>

#include "chat/jinja/template.hpp"
#include "chat/jinja/value.hpp"

namespace minfer::jinja {

// `value | name(args)`. Throws TemplateError (no place: the caller adds it).
Value apply_filter(const std::string &name, const Value &value, const CallArgs &args);
// `value is name(args)`.
bool apply_test(const std::string &name, const Value &value, const CallArgs &args);
// obj.name as a bound method, or Undefined when obj has no such method.
Value method(const Value &obj, const std::string &name);
// range, namespace, dict, raise_exception, strftime_now (at opts.now). Each namespace()
// made is also added to *namespaces, for the render to empty when it ends.
void add_globals(Dict &globals, const RenderOptions &opts, std::vector<Value> *namespaces);

// The characters of a UTF-8 string (for iteration, indexing, length, slicing).
std::vector<std::string> characters(const std::string &s);

}  // namespace minfer::jinja
