#pragma once
// Walks the parsed template: statements write output, expressions evaluate to Values.
// Scopes follow jinja2: a for-loop iteration and a macro call get their own, `if` does not.
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include "jinja/ast.h"
#include "jinja/template.h"
#include "jinja/value.h"

namespace kvscope::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
  const Value* lookup(const std::string& name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options) : opt_(options) {}
  std::string render(const Body& body, const ScopePtr& globals);

  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, const ScopePtr& scope, std::string& out);
  Value eval(const Node& node, const ScopePtr& scope);

  // Limits, for the filters and methods that build strings and lists too.
  void check_string(size_t bytes) const;
  void check_list(size_t items) const;
  void count_iterations(int64_t n);
  void check_time();
  const RenderOptions& options() const { return opt_; }

  // A callable's result (macros, globals, methods): Error for what cannot be called.
  Value call(const Value& callee, Args& args);

 private:
  Flow exec_node(const Node& node, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Node& node, const ScopePtr& scope, std::string& out);
  void exec_set(const Node& node, const ScopePtr& scope);
  void define_macro(const Node& node, const ScopePtr& scope);
  void write(std::string& out, const std::string& text);

  Value eval_inner(const Node& node, const ScopePtr& scope);
  Value eval_call(const Node& node, const ScopePtr& scope);
  Value eval_filter(const Node& node, const ScopePtr& scope);
  Value eval_test(const Node& node, const ScopePtr& scope);
  Value eval_compare(const Node& node, const ScopePtr& scope);
  Value eval_collection(const Node& node, const ScopePtr& scope);
  Args eval_args(const Node& node, const ScopePtr& scope, size_t first_kid);

  struct Depth {
    Depth(Interpreter& in);
    ~Depth() { --in.depth_; }
    Interpreter& in;
  };

  const RenderOptions& opt_;
  int depth_ = 0;
  int64_t iterations_ = 0;
  int64_t written_ = 0;
  uint32_t ticks_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  const Node* filter_input_node_ = nullptr;
  Value filter_input_;
};

// Operators (operators.cpp).
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
Value get_attr(Interpreter& in, const Value& obj, const std::string& name);
Value get_item(Interpreter& in, const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Filters, tests and globals: nullptr for an unknown name.
using FilterFn = Value (*)(Interpreter&, const Value&, Args&);
using TestFn = bool (*)(Interpreter&, const Value&, Args&);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
// The bound method `obj.name` for str and dict, or Undefined.
Value find_method(Interpreter& in, const Value& obj, const std::string& name);
void add_globals(Interpreter& in, Scope& scope);

}  // namespace kvscope::jinja
