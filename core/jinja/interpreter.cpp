#include "jinja/interpreter.h"

#include "jinja/error.h"

namespace kvscope::jinja {

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::Depth::Depth(Interpreter& interp) : in(interp) {
  if (++in.depth_ > in.opt_.max_depth)
    throw Error("template recursion too deep (limit " + std::to_string(in.opt_.max_depth) + ")");
}

void Interpreter::check_string(size_t bytes) const {
  if (static_cast<int64_t>(bytes) > opt_.max_output_bytes)
    throw Error("template output too large (limit " + std::to_string(opt_.max_output_bytes) + " bytes)");
}

void Interpreter::check_list(size_t items) const {
  if (static_cast<int64_t>(items) > opt_.max_output_bytes / 8) throw Error("template list too large");
}

void Interpreter::check_time() {
  const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start_;
  if (spent.count() > opt_.max_seconds)
    throw Error("template took longer than " + std::to_string(static_cast<int>(opt_.max_seconds)) + " s");
}

void Interpreter::count_iterations(int64_t n) {
  if ((++ticks_ & 255) == 0) check_time();
  iterations_ += n;
  if (iterations_ > opt_.max_loop_iterations)
    throw Error("template loop limit reached (" + std::to_string(opt_.max_loop_iterations) + " iterations)");
}

void Interpreter::write(std::string& out, const std::string& text) {
  written_ += static_cast<int64_t>(text.size());
  check_string(static_cast<size_t>(written_));
  check_string(out.size() + text.size());
  out += text;
}

std::string Interpreter::render(const Body& body, const ScopePtr& globals) {
  std::string out;
  const Flow flow = exec(body, globals, out);
  if (flow != Flow::Normal) throw Error("break or continue outside a loop");
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const ScopePtr& scope, std::string& out) {
  Depth depth(*this);
  for (const auto& node : body) {
    const Flow flow = exec_node(*node, scope, out);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_node(const Node& node, const ScopePtr& scope, std::string& out) {
  switch (node.kind) {
    case NodeKind::Text:
      write(out, node.value.str());
      return Flow::Normal;
    case NodeKind::Output:
      write(out, to_str(eval(*node.kids[0], scope)));
      return Flow::Normal;
    case NodeKind::If:
      return exec(truthy(eval(*node.kids[0], scope)) ? node.body : node.else_body, scope, out);
    case NodeKind::For:
      return exec_for(node, scope, out);
    case NodeKind::Set:
      exec_set(node, scope);
      return Flow::Normal;
    case NodeKind::SetBlock: {
      std::string text;
      exec(node.body, std::make_shared<Scope>(Scope{scope, {}}), text);
      scope->vars[node.names[0]] = Value(text);
      return Flow::Normal;
    }
    case NodeKind::Macro:
      define_macro(node, scope);
      return Flow::Normal;
    case NodeKind::FilterBlock: {
      std::string text;
      exec(node.body, std::make_shared<Scope>(Scope{scope, {}}), text);
      filter_input_node_ = node.kids[1].get();
      filter_input_ = Value(text);
      write(out, to_str(eval(*node.kids[0], scope)));
      return Flow::Normal;
    }
    case NodeKind::Scope:
      return exec(node.body, std::make_shared<Scope>(Scope{scope, {}}), out);
    case NodeKind::Break:
      return Flow::Break;
    case NodeKind::Continue:
      return Flow::Continue;
    default:
      throw Error("internal: not a statement");
  }
}

namespace {

void bind_targets(Scope& scope, const std::vector<std::string>& names, const Value& item) {
  if (names.size() == 1) {
    scope.vars[names[0]] = item;
    return;
  }
  const List parts = iterate(require_defined(item));
  if (parts.size() != names.size())
    throw Error("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(names.size()));
  for (size_t k = 0; k < names.size(); ++k) scope.vars[names[k]] = parts[k];
}

Value loop_object(const List& items, size_t i) {
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  Dict d = {{"index", k + 1},     {"index0", k}, {"revindex", n - k},   {"revindex0", n - k - 1}, {"first", k == 0},
            {"last", k == n - 1}, {"length", n}, {"depth", int64_t{1}}, {"depth0", int64_t{0}}};
  d.emplace_back("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  d.emplace_back("nextitem", i + 1 < items.size() ? items[i + 1] : Value::undefined("there is no next item"));
  d.emplace_back("cycle", Value::function("cycle", [k](Args& args) {
                   if (args.positional.empty()) throw Error("no items for cycling given");
                   return args.positional[static_cast<size_t>(k) % args.positional.size()];
                 }));
  return Value::dict(std::move(d));
}

}  // namespace

Interpreter::Flow Interpreter::exec_for(const Node& node, const ScopePtr& scope, std::string& out) {
  List items = iterate(eval(*node.kids[0], scope));
  if (node.kids[1]) {
    List kept;
    for (const auto& item : items) {
      count_iterations(1);
      auto s = std::make_shared<Scope>(Scope{scope, {}});
      bind_targets(*s, node.names, item);
      if (truthy(eval(*node.kids[1], s))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    count_iterations(1);
    auto s = std::make_shared<Scope>(Scope{scope, {}});
    s->vars["loop"] = loop_object(items, i);
    bind_targets(*s, node.names, items[i]);
    if (exec(node.body, s, out) == Flow::Break) break;
  }
  if (items.empty() && !node.else_body.empty()) exec(node.else_body, std::make_shared<Scope>(Scope{scope, {}}), out);
  return Flow::Normal;
}

void Interpreter::exec_set(const Node& node, const ScopePtr& scope) {
  const Value value = eval(*node.kids[0], scope);
  if (!node.name.empty()) {
    const Value* ns = scope->lookup(node.names[0]);
    if (!ns || !ns->is_dict() || !ns->dict_box().is_namespace)
      throw Error("cannot assign attribute on non-namespace object");
    auto& entries = ns->dict_box().items;
    for (auto& [k, v] : entries)
      if (k.is_string() && k.str() == node.name) {
        v = value;
        return;
      }
    entries.emplace_back(Value(node.name), value);
    return;
  }
  bind_targets(*scope, node.names, value);
}

void Interpreter::define_macro(const Node& node, const ScopePtr& scope) {
  std::weak_ptr<Scope> home = scope;
  const Node* def = &node;
  scope->vars[node.name] = Value::function(node.name, [this, home, def](Args& args) {
    auto parent = home.lock();
    if (!parent) throw Error("macro '" + def->name + "' called outside its scope");
    if (args.positional.size() > def->names.size())
      throw Error("macro '" + def->name + "' takes not more than " + std::to_string(def->names.size()) +
                  " argument(s)");
    auto s = std::make_shared<Scope>(Scope{parent, {}});
    for (const auto& [key, v] : args.keyword) {
      bool known = false;
      for (const auto& p : def->names) known = known || p == key;
      if (!known) throw Error("macro '" + def->name + "' takes no keyword argument '" + key + "'");
    }
    for (size_t i = 0; i < def->names.size(); ++i) {
      const auto& p = def->names[i];
      if (args.has(i, p)) {
        s->vars[p] = args.get(i, p);
        continue;
      }
      s->vars[p] = Value::undefined("'" + p + "' is undefined");
      for (const auto& [name, expr] : def->kwargs)
        if (name == p) s->vars[p] = eval(*expr, s);
    }
    std::string text;
    exec(def->body, s, text);
    return Value(text);
  });
}

Value Interpreter::call(const Value& callee, Args& args) {
  require_defined(callee);
  if (!callee.is_function()) throw Error("'" + callee.type_name() + "' object is not callable");
  Depth depth(*this);
  return callee.fn().fn(args);
}

}  // namespace kvscope::jinja
