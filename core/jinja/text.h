#pragma once
// Python's str operations that the filters and the string methods share.
#include <string>
#include <vector>

namespace kvscope::jinja {

bool is_py_space(char c);
// strip/lstrip/rstrip: whitespace, or the characters of chars when given.
std::string py_strip(const std::string& s, bool left, bool right, const std::string* chars = nullptr);
// str.split(sep, maxsplit): runs of whitespace when sep is null.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, long maxsplit);
std::vector<std::string> py_rsplit(const std::string& s, const std::string* sep, long maxsplit);
std::vector<std::string> py_splitlines(const std::string& s);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, long count);
std::string ascii_lower(std::string s);
std::string ascii_upper(std::string s);
std::string py_title(const std::string& s);       // str.title()
std::string py_capitalize(const std::string& s);  // str.capitalize()
std::string html_escape(const std::string& s);    // markupsafe.escape

}  // namespace kvscope::jinja
