#pragma once
// Tokens to the template's node tree (jinja2's grammar and operator precedence).
#include <string>

#include "jinja/ast.h"

namespace kvscope::jinja {

Body parse(const std::string& source);

}  // namespace kvscope::jinja
