// A shared library that is not a minfer plugin: it exports no entry symbol.
extern "C" __attribute__((visibility("default"))) int some_other_library_function() { return 42; }
