#include "jinja/template.h"

#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/parser.h"

namespace kvscope::jinja {

std::string render(const std::string& source, const nlohmann::ordered_json& variables, const RenderOptions& options) {
  const Body body = parse(source);
  Interpreter interp(options);
  auto globals = std::make_shared<Scope>();
  add_globals(interp, *globals);
  auto context = std::make_shared<Scope>(Scope{globals, {}});
  if (!variables.is_object() && !variables.is_null()) throw Error("template variables must be a JSON object");
  if (variables.is_object())
    for (const auto& [k, v] : variables.items()) context->vars[k] = from_json(v);
  return interp.render(body, context);
}

}  // namespace kvscope::jinja
