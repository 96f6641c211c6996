#pragma once
// Python strings count, index and slice characters, not bytes: the UTF-8 character splits.
#include <string>
#include <vector>

namespace kvscope::jinja {

// The string's characters, each as its UTF-8 bytes (a broken byte stands alone).
std::vector<std::string> utf8_chars(const std::string& s);
size_t utf8_length(const std::string& s);
void append_utf8(std::string& out, uint32_t cp);

}  // namespace kvscope::jinja
