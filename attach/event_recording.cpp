#include "attach/event_recording.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

namespace kvscope::attach {
namespace {

using nlohmann::json;

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::array<int8_t, 256> decode_table() {
  std::array<int8_t, 256> t{};
  t.fill(-1);
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}

// Reads one line of at most `max` bytes (the newline not counted) without ever holding more:
// a hostile file of one endless line must not be read into memory.
class LineReader {
 public:
  LineReader(std::istream& in, size_t max) : in_(in), max_(max) {}
  // false at the end of the file; `terminated` says whether the line ended with a newline.
  bool next(std::string& line, bool& terminated, size_t number) {
    line.clear();
    terminated = false;
    while (true) {
      if (pos_ == len_ && !refill()) return !line.empty();
      const char* start = buf_.data() + pos_;
      const void* nl = std::memchr(start, '\n', len_ - pos_);
      const size_t take = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : len_ - pos_;
      if (line.size() + take > max_)
        throw RecordingError(number, "longer than " + std::to_string(max_) + " bytes (the limit)");
      line.append(start, take);
      pos_ += take + (nl ? 1 : 0);
      bytes_ += take + (nl ? 1 : 0);
      if (nl) return terminated = true;
    }
  }
  uint64_t bytes() const { return bytes_; }

 private:
  bool refill() {
    in_.read(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    len_ = static_cast<size_t>(in_.gcount());
    pos_ = 0;
    return len_ > 0;
  }
  std::istream& in_;
  size_t max_;
  std::vector<char> buf_ = std::vector<char>(size_t(1) << 20);
  size_t pos_ = 0, len_ = 0;
  uint64_t bytes_ = 0;
};

// The deepest nesting of arrays and objects outside strings: checked before parsing, so a line
// of a million '[' costs a scan, not a parser's stack.
int nesting(const std::string& s) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

json parse_line(const std::string& s, size_t line, const RecordingLimits& lim) {
  if (nesting(s) > lim.max_depth) throw RecordingError(line, "nested deeper than the format allows");
  try {
    return json::parse(s);
  } catch (const json::parse_error& e) {
    std::string why = e.what();
    if (const size_t k = why.find("] "); k != std::string::npos) why = why.substr(k + 2);
    throw RecordingError(line, "not JSON: " + why);
  }
}

const json& field(const json& o, const char* key, size_t line) {
  const auto it = o.find(key);
  if (it == o.end()) throw RecordingError(line, std::string("no \"") + key + "\"");
  return *it;
}

int64_t int_field(const json& o, const char* key, size_t line, int64_t lo, int64_t hi) {
  const json& v = field(o, key, line);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) ||
      (!v.is_number_unsigned() && (v.get<int64_t>() < lo || v.get<int64_t>() > hi)))
    throw RecordingError(
        line, std::string("\"") + key + "\" is not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return v.get<int64_t>();
}

std::string string_field(const json& o, const char* key, size_t line) {
  const json& v = field(o, key, line);
  if (!v.is_string()) throw RecordingError(line, std::string("\"") + key + "\" is not a string");
  return v.get<std::string>();
}

std::string bytes_of(const json& v, size_t line, const char* what) {
  if (!v.is_string()) throw RecordingError(line, std::string(what) + " is not a base64 string");
  auto b = base64_decode(v.get_ref<const std::string&>());
  if (!b) throw RecordingError(line, std::string(what) + " is not valid base64");
  return std::move(*b);
}

void read_header(const json& h, Recording& r, const RecordingLimits& lim) {
  if (!h.is_object() || !h.contains("kvscope_attach_recording"))
    throw RecordingError(1, "not a kvscope attach recording (no header line)");
  const int64_t version = int_field(h, "kvscope_attach_recording", 1, 0, std::numeric_limits<int32_t>::max());
  if (version != kRecordingVersion)
    throw RecordingError(1, "format version " + std::to_string(version) + "; this kvscope reads version " +
                                std::to_string(kRecordingVersion));
  const json& started = field(h, "started", 1);
  if (!started.is_number() || !std::isfinite(started.get<double>()) || started.get<double>() < 0)
    throw RecordingError(1, "\"started\" is not a time in Unix seconds");
  r.started = started.get<double>();
  const json& inst = field(h, "instances", 1);
  if (!inst.is_array() || inst.empty() || inst.size() > lim.max_instances)
    throw RecordingError(1, "\"instances\" is not a list of 1.." + std::to_string(lim.max_instances) + " instances");
  for (const json& o : inst) {
    if (!o.is_object()) throw RecordingError(1, "an instance is not an object");
    r.instances.push_back({string_field(o, "endpoint", 1), string_field(o, "replay", 1), string_field(o, "topic", 1),
                           static_cast<int>(int_field(o, "dp_rank", 1, 0, 1 << 20)),
                           static_cast<int>(int_field(o, "source", 1, 0, 1 << 20))});
  }
}

void read_replay(const json& rp, RecordedLine& l) {
  if (!rp.is_object()) throw RecordingError(l.line, "\"replay\" is not an object");
  l.from = int_field(rp, "from", l.line, 0, std::numeric_limits<int64_t>::max());
  const json& got = field(rp, "got", l.line);
  if (!got.is_array()) throw RecordingError(l.line, "\"got\" is not a list");
  for (const json& b : got) {
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() ||
        (b[0].is_number_unsigned() && b[0].get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())))
      throw RecordingError(l.line, "a replayed batch is not [sequence number, payload]");
    l.got.emplace_back(b[0].get<int64_t>(), bytes_of(b[1], l.line, "a replayed payload"));
  }
}

RecordedLine read_entry(const json& e, size_t line, const Recording& r, const RecordingLimits& lim) {
  if (!e.is_object()) throw RecordingError(line, "not a JSON object");
  RecordedLine l;
  l.line = line;
  const json& t = field(e, "t", line);
  if (!t.is_number() || !std::isfinite(t.get<double>())) throw RecordingError(line, "\"t\" is not a number");
  l.t = t.get<double>();
  const double prev = r.lines.empty() ? r.started : r.lines.back().t;
  if (l.t < prev) throw RecordingError(line, "time goes back, from " + json(prev).dump() + " to " + json(l.t).dump());
  if (l.t - r.started > lim.max_span_s)
    throw RecordingError(line, "more than " + json(lim.max_span_s).dump() + " s after the recording started");
  l.instance = static_cast<uint32_t>(int_field(e, "i", line, 0, std::numeric_limits<uint32_t>::max()));
  if (l.instance >= r.instances.size())
    throw RecordingError(line, "instance " + std::to_string(l.instance) + " is not in the header (" +
                                   std::to_string(r.instances.size()) + " instances)");
  const bool msg = e.contains("msg"), rp = e.contains("replay");
  if (msg == rp) throw RecordingError(line, "one of \"msg\" (a message) and \"replay\" (a replay answer) expected");
  if (rp) {
    l.kind = RecordedLine::Kind::Replay;
    read_replay(e["replay"], l);
    return l;
  }
  const json& frames = e["msg"];
  if (!frames.is_array() || frames.size() > lim.max_frames)
    throw RecordingError(line, "\"msg\" is not a list of at most " + std::to_string(lim.max_frames) + " frames");
  for (const json& f : frames) l.frames.push_back(bytes_of(f, line, "a frame"));
  return l;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (const size_t rest = bytes.size() - i) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[v >> 18], out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  static const std::array<int8_t, 256> table = decode_table();
  if (text.size() % 4) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const int8_t d = k >= 4 - pad ? 0 : table[static_cast<unsigned char>(text[i + k])];
      if (d < 0) return std::nullopt;
      v = v << 6 | static_cast<uint32_t>(d);
    }
    // Bits below the last byte must be zero: one byte string has one spelling.
    if ((pad == 1 && (v & 0xff)) || (pad == 2 && (v & 0xffff))) return std::nullopt;
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

EventRecorder::EventRecorder(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw std::runtime_error("cannot create the recording " + path);
  std::setvbuf(f_, nullptr, _IOFBF, size_t(1) << 20);
}

EventRecorder::~EventRecorder() {
  if (f_) std::fclose(f_);
}

void EventRecorder::write_line(const std::string& line) {
  // One fwrite per line: a buffer that fills writes whole lines' bytes in order, so a kill can
  // only cut the last line short.
  std::string l = line + '\n';
  if (std::fwrite(l.data(), 1, l.size(), f_) != l.size()) failed_ = true;
  ++lines_;
}

void EventRecorder::begin(const std::vector<InstanceSpec>& instances, double started) {
  json inst = json::array();
  for (const InstanceSpec& s : instances)
    inst.push_back({{"endpoint", s.endpoint},
                    {"replay", s.replay},
                    {"topic", s.topic},
                    {"dp_rank", s.dp_rank},
                    {"source", s.source}});
  last_t_ = started;
  // Endpoints and topics are the user's text: replace invalid UTF-8 rather than throw.
  write_line(json{{"kvscope_attach_recording", kRecordingVersion}, {"started", started}, {"instances", inst}}.dump(
      -1, ' ', false, json::error_handler_t::replace));
  flush();
}

void EventRecorder::message(size_t instance, const std::vector<std::string>& frames, double t) {
  last_t_ = std::max(last_t_, t);
  json f = json::array();
  // A message of more frames than a reader accepts is a bad frame either way; keep the count
  // readable (only InstanceStream's error text, which names the count, differs in playback).
  const size_t n = std::min(frames.size(), RecordingLimits{}.max_frames);
  for (size_t k = 0; k < n; ++k) f.push_back(base64_encode(frames[k]));
  write_line(json{{"t", last_t_}, {"i", instance}, {"msg", std::move(f)}}.dump());
}

void EventRecorder::replay(size_t instance, int64_t from, const ReplayBatches& got, double t) {
  last_t_ = std::max(last_t_, t);
  json g = json::array();
  for (const auto& b : got) g.push_back({b.first, base64_encode(b.second)});
  write_line(json{{"t", last_t_}, {"i", instance}, {"replay", {{"from", from}, {"got", std::move(g)}}}}.dump());
}

void EventRecorder::flush() {
  if (std::fflush(f_) != 0 || failed_) throw std::runtime_error("cannot write the recording " + path_);
}

Recording read_recording(std::istream& in, const RecordingLimits& lim, const RecordingProgress& progress) {
  Recording r;
  LineReader reader(in, lim.max_line_bytes);
  std::string s;
  bool terminated = false;
  uint64_t next_report = 0;
  for (size_t n = 1; reader.next(s, terminated, n); ++n) {
    if (reader.bytes() > lim.max_file_bytes)
      throw RecordingError(n, "the file is larger than " + std::to_string(lim.max_file_bytes) + " bytes (the limit)");
    if (progress && reader.bytes() >= next_report) {
      if (!progress(reader.bytes())) throw RecordingError(n, "cancelled");
      next_report = reader.bytes() + (uint64_t(1) << 20);
    }
    try {
      if (n == 1) {
        read_header(parse_line(s, n, lim), r, lim);
      } else {
        r.lines.push_back(read_entry(parse_line(s, n, lim), n, r, lim));
      }
    } catch (const RecordingError&) {
      // A last line without its newline is what a killed attach leaves: skip it, say so.
      if (terminated || n == 1) throw;
      r.cut_off = true;
    }
  }
  if (r.instances.empty()) throw RecordingError(1, "empty file: no header line");
  return r;
}

Recording read_recording_file(const std::string& path, const RecordingLimits& limits,
                              const RecordingProgress& progress) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw RecordingError(0, "cannot open " + path);
  return read_recording(f, limits, progress);
}

}  // namespace kvscope::attach
