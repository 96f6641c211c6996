#pragma once
// An error a client caused (or a refusal), carried to the HTTP layer, which answers it in
// OpenAI's shape: {"error": {"message", "type", "param", "code"}} with `status`.
#include <stdexcept>
#include <string>

namespace kvscope::serve {

struct ApiError : std::runtime_error {
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", ...
  std::string param;  // the offending field, "" when none
  ApiError(int status_, std::string message, std::string param_ = "", std::string type_ = "")
      : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)) {
    if (type.empty()) type = default_type(status);
  }
  static std::string default_type(int status) {
    switch (status) {
      case 401:
        return "authentication_error";
      case 404:
        return "not_found_error";
      case 413:
        return "request_too_large";
      case 429:
        return "rate_limit_error";
      case 503:
        return "server_overloaded";
      default:
        return status >= 500 ? "internal_server_error" : "invalid_request_error";
    }
  }
};

}  // namespace kvscope::serve
