// The filters over sequences and mappings: first/last/join/map/select.../sort/unique/...
#include <algorithm>
#include <cctype>

#include "jinja/error.h"
#include "jinja/filters_impl.h"
#include "jinja/text.h"
#include "jinja/utf8.h"

namespace kvscope::jinja {

namespace {

const std::string kDot = ".";

// jinja2's make_attrgetter: "a.b.0" looks up item by item (digits index lists).
Value attribute_of(Interpreter& in, const Value& item, const std::string& path) {
  Value cur = item;
  for (const auto& part : py_split(path, &kDot, -1)) {
    const bool digits = !part.empty() && part.size() < 18 && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    cur = get_item(in, require_defined(cur), digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
  }
  return cur;
}

Value sort_key(const Value& v, bool case_sensitive) {
  return v.is_string() && !case_sensitive ? Value(ascii_lower(v.str())) : v;
}

// select/reject/selectattr/rejectattr: args after the attribute are a test name and its args.
Value select_impl(Interpreter& in, const Value& seq, Args& a, bool by_attr, bool keep) {
  size_t next = 0;
  std::string attr;
  if (by_attr) attr = to_str(a.get(next++, "attribute"));
  TestFn test = nullptr;
  Args test_args;
  if (a.positional.size() > next) {
    const std::string name = to_str(a.positional[next]);
    test = find_test(name);
    if (!test) throw Error("no test named '" + name + "'");
    test_args.positional.assign(a.positional.begin() + static_cast<long>(next) + 1, a.positional.end());
  }
  List out;
  if (!truthy(seq)) return Value::seq({}, SeqKind::Generator);  // jinja2 checks `if seq:` first
  for (const auto& item : iterate(seq)) {
    const Value subject = by_attr ? attribute_of(in, item, attr) : item;
    const bool ok = test ? test(in, subject, test_args) : truthy(subject);
    if (ok == keep) out.push_back(item);
  }
  return Value::seq(std::move(out), SeqKind::Generator);
}

List pairs_of(const Value& v) {
  List out;
  for (const auto& [k, val] : v.entries()) out.push_back(Value::list({k, val}, true));
  return out;
}

Value min_max(Interpreter& in, const Value& v, Args& a, bool want_max) {
  const bool cs = truthy(a.get(0, "case_sensitive", Value(false)));
  const Value attr = a.get(1, "attribute", Value(None{}));
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t i) {
    return sort_key(attr.is_string() ? attribute_of(in, items[i], attr.str()) : items[i], cs);
  };
  for (size_t i = 1; i < items.size(); ++i)
    if (want_max ? less(key(best), key(i)) : less(key(i), key(best))) best = i;
  return items[best];
}

}  // namespace

Value f_first(Interpreter&, const Value& v, Args&) {
  const List items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter&, const Value& v, Args&) {
  if (v.is_list() && v.seq_kind() == SeqKind::Generator) throw Error("'generator' object is not reversible");
  const List items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(Interpreter& in, const Value& v, Args& a) {
  const std::string sep = to_str(a.get(0, "d", Value("")));
  const Value attr = a.get(1, "attribute", Value(None{}));
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attr.is_none() ? item : attribute_of(in, item, to_str(attr)));
    in.check_string(out.size());
  }
  return Value(out);
}

Value f_list(Interpreter&, const Value& v, Args&) { return Value::list(iterate(v)); }

Value f_items(Interpreter&, const Value& v, Args&) {
  if (v.is_undefined()) return Value::seq({}, SeqKind::Generator);
  if (!v.is_dict() || v.dict_box().is_namespace) throw Error("Can only get item pairs from a mapping.");
  return Value::seq(pairs_of(v), SeqKind::Generator);
}

Value f_dictsort(Interpreter&, const Value& v, Args& a) {
  if (!v.is_dict()) throw Error("dictsort: a mapping is required");
  const bool cs = truthy(a.get(0, "case_sensitive", Value(false)));
  const size_t pos = to_str(a.get(1, "by", Value("key"))) == "value" ? 1 : 0;
  const bool reverse = truthy(a.get(2, "reverse", Value(false)));
  List items = pairs_of(v);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.items()[pos], cs), ky = sort_key(y.items()[pos], cs);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value::list(std::move(items));
}

Value f_map(Interpreter& in, const Value& v, Args& a) {
  List out;
  if (!truthy(v)) return Value::seq({}, SeqKind::Generator);  // jinja2 checks `if value:` first
  for (const auto& [k, attr] : a.keyword) {
    if (k != "attribute") continue;
    const Value fallback = a.get(99, "default");
    for (const auto& item : iterate(v)) {
      Value x = attribute_of(in, item, to_str(attr));
      out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
    }
    return Value::seq(std::move(out), SeqKind::Generator);
  }
  if (a.positional.empty()) throw Error("map requires a filter name or attribute=");
  const std::string name = to_str(a.positional[0]);
  const FilterFn f = find_filter(name);
  if (!f) throw Error("no filter named '" + name + "'");
  Args rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const auto& item : iterate(v)) out.push_back(f(in, item, rest));
  return Value::seq(std::move(out), SeqKind::Generator);
}

Value f_select(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, true, false); }

// jinja2 returns reversed(value): an iterator, except for what cannot be reversed in place
// (a generator), which it turns into a reversed list.
Value f_reverse(Interpreter&, const Value& v, Args&) {
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.is_list() && v.seq_kind() == SeqKind::Generator) return Value::list(std::move(items));
  if (!v.is_string()) return Value::seq(std::move(items), SeqKind::Generator);
  std::string out;
  for (const auto& c : items) out += c.str();
  return Value(out);
}

Value f_sort(Interpreter& in, const Value& v, Args& a) {
  const bool reverse = truthy(a.get(0, "reverse", Value(false)));
  const bool cs = truthy(a.get(1, "case_sensitive", Value(false)));
  const Value attr = a.get(2, "attribute", Value(None{}));
  List items = iterate(v);
  auto key = [&](const Value& x) { return sort_key(attr.is_string() ? attribute_of(in, x, attr.str()) : x, cs); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less(key(y), key(x)) : less(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_unique(Interpreter& in, const Value& v, Args& a) {
  const bool cs = truthy(a.get(0, "case_sensitive", Value(false)));
  const Value attr = a.get(1, "attribute", Value(None{}));
  List out, seen;
  for (const auto& item : iterate(v)) {
    const Value k = sort_key(attr.is_string() ? attribute_of(in, item, attr.str()) : item, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::seq(std::move(out), SeqKind::Generator);
}

Value f_sum(Interpreter& in, const Value& v, Args& a) {
  const Value attr = a.get(0, "attribute", Value(None{}));
  Value total = a.get(1, "start", Value(int64_t{0}));
  for (const auto& item : iterate(v))
    total = binary_op(in, "+", total, attr.is_string() ? attribute_of(in, item, attr.str()) : item);
  return total;
}

Value f_min(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, true); }

Value f_batch(Interpreter&, const Value& v, Args& a) {
  const int64_t n = require_defined(a.get(0, "linecount")).as_int();
  if (n <= 0) throw Error("batch: linecount must be positive");
  const Value fill = a.get(1, "fill_with", Value(None{}));
  List out, cur;
  for (const auto& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    while (!fill.is_none() && static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::seq(std::move(out), SeqKind::Generator);
}

}  // namespace kvscope::jinja
