// Workload JSON: parsing with errors that point at the field, and a compact export.
#include "workload/workload.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace kvscope {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::runtime_error("workload: " + where + ": " + what);
}

// A short rendering of the offending value for error messages.
std::string show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + s;
}

// Reads the keys of one JSON object, remembering which it consumed so that leftovers
// (typos, fields from a newer format) can be reported instead of silently ignored.
class ObjectReader {
 public:
  ObjectReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {
    if (!obj_.is_object()) fail(where_, "expected an object, got " + show(obj_));
  }
  bool has(const std::string& key) {
    seen_.insert(key);
    return obj_.contains(key) && !obj_.at(key).is_null();
  }
  const json& at(const std::string& key) const { return obj_.at(key); }
  std::string field(const std::string& key) const { return where_ + ": " + key; }

  std::string str(const std::string& key, bool non_empty) {
    const json& v = obj_.at(key);
    if (!v.is_string()) fail(field(key), "expected a string, got " + show(v));
    std::string s = v.get<std::string>();
    if (non_empty && s.empty()) fail(field(key), "must not be empty");
    return s;
  }
  int64_t integer(const std::string& key, int64_t min, int64_t max) {
    const json& v = obj_.at(key);
    if (!v.is_number_integer()) fail(field(key), "expected an integer, got " + show(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max))
      fail(field(key), "must be <= " + std::to_string(max) + ", got " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x < min || x > max)
      fail(field(key), "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                           std::to_string(x));
    return x;
  }
  uint64_t unsigned_integer(const std::string& key) {
    const json& v = obj_.at(key);
    if (!v.is_number_unsigned()) fail(field(key), "expected an integer >= 0, got " + show(v));
    return v.get<uint64_t>();
  }
  float number(const std::string& key, double min, double max) {
    const json& v = obj_.at(key);
    if (!v.is_number()) fail(field(key), "expected a number, got " + show(v));
    const double x = v.get<double>();
    if (!(x >= min && x <= max))
      fail(field(key), "expected a number in [" + json(min).dump() + ", " + json(max).dump() + "], got " + v.dump());
    return static_cast<float>(x);
  }
  bool boolean(const std::string& key) {
    const json& v = obj_.at(key);
    if (!v.is_boolean()) fail(field(key), "expected true or false, got " + show(v));
    return v.get<bool>();
  }
  // Every key must have been asked for; '_'-prefixed keys are comments.
  void reject_unknown() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (!it.key().empty() && it.key()[0] == '_') continue;
      if (!seen_.count(it.key())) {
        std::string known;
        for (const std::string& k : seen_) known += (known.empty() ? "" : ", ") + k;
        fail(field(it.key()), "unknown field (known: " + known + "; prefix a key with '_' for a comment)");
      }
    }
  }

 private:
  const json& obj_;
  std::string where_;
  std::set<std::string> seen_;
};

constexpr int64_t kMaxI32 = std::numeric_limits<int32_t>::max();

SamplingParams parse_sampling(const json& j, const std::string& where) {
  ObjectReader r(j, where);
  SamplingParams s;
  if (r.has("temperature")) s.temperature = r.number("temperature", 0.0, 100.0);
  if (r.has("top_k")) s.top_k = static_cast<int32_t>(r.integer("top_k", 0, kMaxI32));
  if (r.has("top_p")) s.top_p = r.number("top_p", 0.0, 1.0);
  if (r.has("min_p")) s.min_p = r.number("min_p", 0.0, 1.0);
  if (r.has("repetition_penalty")) s.repetition_penalty = r.number("repetition_penalty", 1e-3, 100.0);
  if (r.has("repetition_last_n"))
    s.repetition_last_n = static_cast<int32_t>(r.integer("repetition_last_n", 0, kMaxI32));
  if (r.has("seed")) s.seed = r.unsigned_integer("seed");
  r.reject_unknown();
  return s;
}

WorkloadRequest parse_request(const json& j, size_t index) {
  std::string where = "requests[" + std::to_string(index) + "]";
  if (j.is_object() && j.contains("id") && j.at("id").is_string())
    where += " (id \"" + j.at("id").get<std::string>() + "\")";
  ObjectReader r(j, where);
  WorkloadRequest q;
  // A hand-written file may leave ids out; the index keeps them unique and stable.
  q.id = r.has("id") ? r.str("id", true) : "request-" + std::to_string(index);

  const bool has_text = r.has("prompt"), has_ids = r.has("prompt_ids");
  if (has_text == has_ids) fail(where, "needs exactly one of \"prompt\" (text) or \"prompt_ids\" (token ids)");
  if (has_text) q.prompt = r.str("prompt", true);
  if (has_ids) {
    const json& ids = r.at("prompt_ids");
    if (!ids.is_array() || ids.empty())
      fail(r.field("prompt_ids"), "expected a non-empty array of token ids, got " + show(ids));
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!ids[i].is_number_integer() || ids[i].get<int64_t>() < 0 || ids[i].get<int64_t>() > kMaxI32)
        fail(r.field("prompt_ids[" + std::to_string(i) + "]"), "expected a token id >= 0, got " + show(ids[i]));
      q.prompt_ids.push_back(ids[i].get<int32_t>());
    }
  }
  if (r.has("arrival_step")) q.arrival_step = r.integer("arrival_step", 0, std::numeric_limits<int64_t>::max());
  if (r.has("arrival_s")) q.arrival_s = r.number("arrival_s", 0.0, 86400.0 * 365);
  if (r.has("max_tokens")) q.max_new_tokens = static_cast<int32_t>(r.integer("max_tokens", 1, kMaxI32));
  if (r.has("ignore_eos")) q.ignore_eos = r.boolean("ignore_eos");
  if (r.has("n")) q.n = static_cast<int32_t>(r.integer("n", 1, 1024));
  if (r.has("sampling")) q.sampling = parse_sampling(r.at("sampling"), r.field("sampling"));
  const bool has_conv = r.has("conversation"), has_turn = r.has("turn");
  if (has_conv != has_turn) fail(where, "\"conversation\" and \"turn\" go together");
  if (has_conv) {
    q.conversation = r.str("conversation", true);
    q.turn = static_cast<int32_t>(r.integer("turn", 0, kMaxI32));
  }
  r.reject_unknown();
  return q;
}

// Shortest decimal that reads back as the same float, so 0.7f is written "0.7", not 0.699999988.
json float_json(float f) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, f);
  return json(std::stod(std::string(buf, res.ptr)));
}

}  // namespace

void validate_workload(const Workload& w) {
  std::set<std::string> ids;
  struct Conv {
    int32_t next_turn = 0;
    int64_t last_arrival = 0;
  };
  std::map<std::string, Conv> convs;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const WorkloadRequest& q = w.requests[i];
    const std::string where = "requests[" + std::to_string(i) + "] (id \"" + q.id + "\")";
    if (q.id.empty()) fail(where, "id: must not be empty");
    if (!ids.insert(q.id).second) fail(where, "id: duplicate id \"" + q.id + "\"");
    if (q.prompt.empty() == q.prompt_ids.empty()) fail(where, "needs exactly one of a text prompt or prompt ids");
    if (q.max_new_tokens < 1) fail(where, "max_tokens: must be >= 1, got " + std::to_string(q.max_new_tokens));
    if (q.arrival_step < 0) fail(where, "arrival_step: must be >= 0, got " + std::to_string(q.arrival_step));
    if (!(q.arrival_s >= 0))
      fail(where, "arrival_s: must be a number of seconds >= 0, got " + std::to_string(q.arrival_s));
    if (q.n < 1) fail(where, "n: must be >= 1, got " + std::to_string(q.n));
    if (q.conversation.empty()) {
      if (q.turn != 0) fail(where, "turn: set without a conversation");
      continue;
    }
    if (q.n != 1) fail(where, "n: a conversation turn cannot have parallel samples (which one would continue it?)");
    Conv& c = convs[q.conversation];
    if (q.turn != c.next_turn)
      fail(where, "turn: conversation \"" + q.conversation + "\" expects turn " + std::to_string(c.next_turn) +
                      " next (turns are 0, 1, 2... in file order), got " + std::to_string(q.turn));
    if (q.turn > 0 && q.arrival_step < c.last_arrival)
      fail(where, "arrival_step: turn " + std::to_string(q.turn) + " of conversation \"" + q.conversation +
                      "\" arrives before turn " + std::to_string(q.turn - 1));
    c.next_turn++;
    c.last_arrival = q.arrival_step;
  }
}

Workload parse_workload(const json& j) {
  ObjectReader r(j, "top level");
  Workload w;
  if (!r.has("name")) fail("top level", "missing \"name\"");
  w.name = r.str("name", true);
  if (r.has("description")) w.description = r.str("description", false);
  if (r.has("max_model_len")) w.max_model_len = static_cast<int32_t>(r.integer("max_model_len", 1, kMaxI32));
  if (!r.has("requests")) fail("top level", "missing \"requests\"");
  const json& reqs = r.at("requests");
  if (!reqs.is_array() || reqs.empty()) fail("requests", "expected a non-empty array, got " + show(reqs));
  r.reject_unknown();
  for (size_t i = 0; i < reqs.size(); ++i) w.requests.push_back(parse_request(reqs[i], i));
  validate_workload(w);
  return w;
}

Workload load_workload(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open workload file");
  try {
    return parse_workload(json::parse(in));
  } catch (const json::exception& e) {  // syntax errors carry a byte offset
    throw std::runtime_error(path.string() + ": invalid JSON: " + e.what());
  } catch (const std::runtime_error& e) { throw std::runtime_error(path.string() + ": " + e.what()); }
}

namespace {

// Built in reading order (name before requests, id and prompt first) for the files people open;
// to_json converts to the ordinary sorted json for callers that embed it elsewhere.
using ordered = nlohmann::ordered_json;

ordered sampling_ordered(const SamplingParams& s) {
  const SamplingParams d;
  ordered j = ordered::object();
  j["temperature"] = float_json(s.temperature);  // always written: the one field a reader looks for
  if (s.top_k != d.top_k) j["top_k"] = s.top_k;
  if (s.top_p != d.top_p) j["top_p"] = float_json(s.top_p);
  if (s.min_p != d.min_p) j["min_p"] = float_json(s.min_p);
  if (s.repetition_penalty != d.repetition_penalty) j["repetition_penalty"] = float_json(s.repetition_penalty);
  if (s.repetition_last_n != d.repetition_last_n) j["repetition_last_n"] = s.repetition_last_n;
  if (s.seed != d.seed) j["seed"] = s.seed;
  return j;
}

ordered workload_ordered(const Workload& w) {
  ordered j = ordered::object();
  j["name"] = w.name;
  if (!w.description.empty()) j["description"] = w.description;
  if (w.max_model_len) j["max_model_len"] = *w.max_model_len;
  ordered reqs = ordered::array();
  for (const WorkloadRequest& q : w.requests) {
    ordered r = ordered::object();
    r["id"] = q.id;
    if (q.has_ids())
      r["prompt_ids"] = q.prompt_ids;
    else
      r["prompt"] = q.prompt;
    r["arrival_step"] = q.arrival_step;
    if (q.arrival_s > 0) r["arrival_s"] = q.arrival_s;
    r["max_tokens"] = q.max_new_tokens;
    if (q.ignore_eos) r["ignore_eos"] = true;
    if (q.n != 1) r["n"] = q.n;
    if (q.sampling) r["sampling"] = sampling_ordered(*q.sampling);
    if (!q.conversation.empty()) {
      r["conversation"] = q.conversation;
      r["turn"] = q.turn;
    }
    reqs.push_back(std::move(r));
  }
  j["requests"] = std::move(reqs);
  return j;
}

}  // namespace

json to_json(const SamplingParams& s) { return json(sampling_ordered(s)); }
json to_json(const Workload& w) { return json(workload_ordered(w)); }

void save_workload(const std::filesystem::path& path, const Workload& w) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(path.string() + ": cannot write workload file");
  out << workload_ordered(w).dump(2) << '\n';
  if (!out) throw std::runtime_error(path.string() + ": write failed");
}

}  // namespace kvscope
