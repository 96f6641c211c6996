#include "run/trace_reader.h"

#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

namespace kvscope {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& why) { throw std::invalid_argument(why); }

// An integer field: JSON integers, or floats with an integral value (some exporters write 12.0).
int64_t int_field(const json& o, const char* key, bool required, int64_t def) {
  const auto it = o.find(key);
  if (it == o.end()) {
    if (required) bad(std::string("no \"") + key + "\"");
    return def;
  }
  if (it->is_number_integer()) {
    if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      bad(std::string("\"") + key + "\" is too large");
    return it->get<int64_t>();
  }
  if (it->is_number_float()) {
    const double v = it->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) return static_cast<int64_t>(v);
  }
  bad(std::string("\"") + key + "\" is not an integer");
}

// Lengths become int32 token counts in the KV manager; 2^30 keeps every product in range.
int32_t length_field(const json& o, const char* key) {
  const int64_t v = int_field(o, key, true, 0);
  if (v < 0) bad(std::string("\"") + key + "\" is negative (" + std::to_string(v) + ")");
  if (v > (int64_t{1} << 30)) bad(std::string("\"") + key + "\" is too large (" + std::to_string(v) + ")");
  return static_cast<int32_t>(v);
}

std::vector<int64_t> hash_ids_field(const json& o) {
  const auto it = o.find("hash_ids");
  if (it == o.end()) bad("no \"hash_ids\"");
  if (!it->is_array()) bad("\"hash_ids\" is not an array");
  std::vector<int64_t> ids;
  ids.reserve(it->size());
  for (const json& v : *it) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      bad("\"hash_ids\" holds something that is not an integer id");
    ids.push_back(v.get<int64_t>());
  }
  return ids;
}

}  // namespace

TraceFormat parse_trace_format(const std::string& name) {
  if (name == "mooncake") return TraceFormat::Mooncake;
  if (name == "kvscope") return TraceFormat::Kvscope;
  throw std::invalid_argument("unknown trace format '" + name + "' (mooncake or kvscope)");
}

TraceError::TraceError(int64_t line_no, const std::string& why_text)
    : std::runtime_error("line " + std::to_string(line_no) + ": " + why_text), line(line_no), why(why_text) {}

TraceRequest parse_trace_line(std::string_view text, TraceFormat format) {
  const json o = json::parse(text.begin(), text.end(), nullptr, false);
  if (o.is_discarded()) bad("not valid JSON");
  if (!o.is_object()) bad("not a JSON object");
  const bool kv = format == TraceFormat::Kvscope;
  TraceRequest r;
  r.timestamp_ms = int_field(o, kv ? "timestamp_ms" : "timestamp", true, 0);
  if (r.timestamp_ms < 0) bad("negative timestamp (" + std::to_string(r.timestamp_ms) + ")");
  r.input_length = length_field(o, "input_length");
  r.output_length = length_field(o, "output_length");
  r.hash_ids = hash_ids_field(o);
  if (kv) {
    const int64_t bs = int_field(o, "block_size", true, 0);
    if (bs <= 0 || bs > (1 << 20)) bad("\"block_size\" must be in 1..1048576 (" + std::to_string(bs) + ")");
    r.block_size = static_cast<int32_t>(bs);
    if (const auto s = o.find("session_id"); s != o.end()) {
      if (!s->is_string()) bad("\"session_id\" is not a string");
      r.session_id = s->get<std::string>();
    }
  }
  // Each id stands for block_size prompt tokens (the last one possibly fewer): a longer chain
  // names tokens the prompt does not have.
  const int64_t max_ids = (static_cast<int64_t>(r.input_length) + r.block_size - 1) / r.block_size;
  if (static_cast<int64_t>(r.hash_ids.size()) > max_ids)
    bad(std::to_string(r.hash_ids.size()) + " hash ids, but " + std::to_string(r.input_length) +
        " tokens in blocks of " + std::to_string(r.block_size) + " allow at most " + std::to_string(max_ids));
  return r;
}

TraceReader::TraceReader(std::istream& in, TraceReaderOptions options) : in_(in), opt_(options) {
  if (opt_.max_line_bytes <= 0 || opt_.max_line_bytes > (int64_t{1} << 30))
    throw std::invalid_argument("max line bytes must be in 1..2^30");
  buf_.resize(static_cast<size_t>(opt_.max_line_bytes) + 1);
}

// istream::getline stops at the buffer's end with failbit set, so an endless line (a binary
// file, a missing newline in a pipe) costs max_line_bytes of memory, not all of it.
TraceReader::Line TraceReader::read_line() {
  in_.getline(buf_.data(), static_cast<std::streamsize>(buf_.size()));
  const std::streamsize got = in_.gcount();
  if (got == 0 && in_.eof()) return Line::End;
  ++line_;
  if (in_.fail() && !in_.eof()) {
    in_.clear();
    in_.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    return Line::TooLong;
  }
  size_t n = static_cast<size_t>(got) - (in_.eof() ? 0 : 1);  // the newline was counted, not stored
  if (n > 0 && buf_[n - 1] == '\r') --n;
  text_ = std::string_view(buf_.data(), n);
  return Line::Ok;
}

bool TraceReader::reject(const std::string& why) {
  if (!opt_.skip_bad) throw TraceError(line_, why);
  ++skipped_;
  if (skipped_errors_.size() < 10) skipped_errors_.push_back("line " + std::to_string(line_) + ": " + why);
  return true;
}

void TraceReader::check_order(const TraceRequest& r) const {
  // Replay runs requests in file order; a timestamp going back means a shuffled or spliced file.
  if (r.timestamp_ms < last_timestamp_)
    bad("timestamp " + std::to_string(r.timestamp_ms) + " is before the previous request's (" +
        std::to_string(last_timestamp_) + ")");
}

bool TraceReader::next(TraceRequest& out) {
  for (;;) {
    const Line l = read_line();
    if (l == Line::End) return false;
    if (l == Line::TooLong) {
      reject("longer than " + std::to_string(opt_.max_line_bytes) + " bytes");
      continue;
    }
    if (text_.find_first_not_of(" \t") == std::string_view::npos) continue;
    try {
      TraceRequest r = parse_trace_line(text_, opt_.format);
      check_order(r);
      r.line = line_;
      last_timestamp_ = r.timestamp_ms;
      out = std::move(r);
      return true;
    } catch (const std::invalid_argument& e) { reject(e.what()); }
  }
}

std::vector<TraceRequest> read_trace(std::istream& in, const TraceReaderOptions& options, int64_t* skipped,
                                     std::vector<std::string>* skipped_errors) {
  TraceReader reader(in, options);
  std::vector<TraceRequest> out;
  TraceRequest r;
  while (reader.next(r)) out.push_back(std::move(r));
  if (skipped) *skipped = reader.skipped_lines();
  if (skipped_errors) *skipped_errors = reader.skipped_errors();
  return out;
}

}  // namespace kvscope
