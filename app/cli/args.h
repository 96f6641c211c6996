#pragma once
// Tiny "--key value" / "--flag" parser for the CLI subcommands; unknown options are errors.
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvscope::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  // `flags` take no value; every other --name takes one.
  Args(int argc, char** argv, int first, const std::set<std::string>& options, const std::set<std::string>& flags);
  bool has(const std::string& name) const { return values_.count(name) || flags_.count(name); }
  std::string str(const std::string& name, const std::string& def = "") const;
  int64_t i64(const std::string& name, int64_t def) const;
  double f64(const std::string& name, double def) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Every value of an option given more than once (--endpoint A --endpoint B), in order;
  // str() gives the last.
  std::vector<std::string> all(const std::string& name) const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> repeated_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

}  // namespace kvscope::cli
