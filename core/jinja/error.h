#pragma once
// The one error a template can raise: syntax, undefined use, a type mismatch, a sandbox refusal,
// a limit, or the template's own raise_exception(). Rendering stops at the first.
#include <stdexcept>
#include <initializer_list>
#include <string>
#include <string_view>

namespace kvscope::jinja {

// Joins message parts (appending, which also keeps GCC 12's -Wrestrict false positive on
// "literal" + std::string&& quiet).
inline std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (auto p : parts) out += p;
  return out;
}

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kvscope::jinja
