#pragma once
// Python's str.format ({}, {0}, {name}; no format specs) and printf-style formatting
// (str % args and the format filter: %s %r %d %i %f %e %g and %%).
#include <string>

#include "jinja/value.h"

namespace kvscope::jinja {

std::string py_format(const std::string& fmt, const Args& args);
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace kvscope::jinja
