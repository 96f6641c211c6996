#include "cli/args.h"

namespace kvscope::cli {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& options, const std::set<std::string>& flags) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    // A few llama.cpp-style short options.
    if (a == "-n")
      a = "--n-predict";
    else if (a == "-m")
      a = "--model";
    else if (a == "-p")
      a = "--prompt";
    else if (a == "-t")
      a = "--threads";
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flags.count(name)) {
      if (inline_value) throw UsageError("--" + name + " takes no value");
      flags_.insert(name);
    } else if (options.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError("--" + name + " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
      repeated_[name].push_back(value);
    } else {
      throw UsageError("unknown option --" + name);
    }
  }
}

std::string Args::str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = repeated_.find(name);
  return it == repeated_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::i64(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) { throw UsageError("--" + name + " expects an integer, got '" + it->second + "'"); }
}

double Args::f64(const std::string& name, double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) { throw UsageError("--" + name + " expects a number, got '" + it->second + "'"); }
}

}  // namespace kvscope::cli
