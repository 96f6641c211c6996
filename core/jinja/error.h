#pragma once
// The one error a template can raise: syntax, undefined use, a type mismatch, a sandbox refusal,
// a limit, or the template's own raise_exception(). Rendering stops at the first.
#include <stdexcept>
#include <string>

namespace kvscope::jinja {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kvscope::jinja
