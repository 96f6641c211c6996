// GGUF v2/v3 reader. The file is untrusted input: every read goes through ByteReader, which
// checks the remaining length first and copies with memcpy (no unaligned pointer casts), and
// every count is checked against the bytes that could possibly hold it before anything is
// allocated for it. Layout reference: ggml/docs/gguf.md.
#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <unordered_set>

namespace kvscope {

// Named (not anonymous) so GgufFile's private parse steps can take a ByteReader.
namespace gguf_detail {

constexpr int kMaxDims = 4;        // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;  // nested arrays are legal GGUF but never deep in practice
// A parsed array element costs ~90 bytes of GgufValue; cap the total so that a small hostile
// file cannot make us allocate gigabytes. Real vocabularies stay well below a million entries.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;

std::string offset_str(uint64_t off) { return " (at byte offset " + std::to_string(off) + ")"; }

// Smallest encoded size of a value of type t, so that counts can be checked before reading.
uint64_t min_encoded_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
      return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32:
      return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
      return 8;
    case GgufValueType::STRING:
      return 8;  // length prefix
    case GgufValueType::ARRAY:
      return 12;  // element type + count
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::FLOAT64); }

class ByteReader {
 public:
  using Fetch = std::function<const uint8_t*(uint64_t end, uint64_t* avail)>;
  ByteReader(const Fetch& fetch, uint64_t size, const std::string& label) : fetch_(fetch), size_(size), label_(label) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what, uint64_t at) const {
    throw GgufError("gguf '" + label_ + "': " + what + offset_str(at));
  }

  // Checks that n more bytes exist in the file, then makes them readable at base_ + pos_.
  void need(uint64_t n, const std::string& what) {
    if (n > remaining())
      fail("truncated file: " + what + " needs " + std::to_string(n) + " bytes but only " +
               std::to_string(remaining()) + " remain",
           pos_);
    if (pos_ + n > avail_) base_ = fetch_(pos_ + n, &avail_);
  }

  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>(what + " length");
    if (len > remaining())
      fail(what + ": string length " + std::to_string(len) + " exceeds the " + std::to_string(remaining()) +
               " bytes left in the file (truncated or corrupt)",
           at);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  const Fetch& fetch_;
  const uint8_t* base_ = nullptr;
  uint64_t avail_ = 0;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& label_;
};

// pread() of exactly n bytes at off, across short reads and EINTR. A read that ends early means
// the file got shorter than it was when it was opened: another process truncated or rewrote it.
void pread_exact(int fd, uint8_t* dst, uint64_t n, uint64_t off, const std::string& path, uint64_t size_at_open) {
  uint64_t done = 0;
  while (done < n) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd, dst + done, chunk, static_cast<off_t>(off + done));
    if (got < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw GgufError("gguf '" + path + "': read failed at byte " + std::to_string(off + done) + ": " +
                      std::strerror(err));
    }
    if (got == 0)
      throw GgufError("gguf '" + path + "': the file shrank while it was being read: it had " +
                      std::to_string(size_at_open) + " bytes when opened, now it ends at byte " +
                      std::to_string(off + done) + " (truncated or rewritten in place by another process?)");
    done += static_cast<uint64_t>(got);
  }
}

class MetadataParser {
 public:
  explicit MetadataParser(ByteReader& r) : r_(r) {}

  GgufValue read_value(GgufValueType type, const std::string& key, int depth) {
    GgufValue v;
    v.type = type;
    const std::string what = "value of key '" + key + "'";
    switch (type) {
      case GgufValueType::UINT8:
        v.u = r_.read<uint8_t>(what);
        break;
      case GgufValueType::INT8:
        v.i = r_.read<int8_t>(what);
        break;
      case GgufValueType::UINT16:
        v.u = r_.read<uint16_t>(what);
        break;
      case GgufValueType::INT16:
        v.i = r_.read<int16_t>(what);
        break;
      case GgufValueType::UINT32:
        v.u = r_.read<uint32_t>(what);
        break;
      case GgufValueType::INT32:
        v.i = r_.read<int32_t>(what);
        break;
      case GgufValueType::UINT64:
        v.u = r_.read<uint64_t>(what);
        break;
      case GgufValueType::INT64:
        v.i = r_.read<int64_t>(what);
        break;
      case GgufValueType::FLOAT32:
        v.f = r_.read<float>(what);
        break;
      case GgufValueType::FLOAT64:
        v.f = r_.read<double>(what);
        break;
      case GgufValueType::BOOL:
        v.u = r_.read<uint8_t>(what) != 0 ? 1 : 0;
        break;
      case GgufValueType::STRING:
        v.s = r_.read_string(what);
        break;
      case GgufValueType::ARRAY:
        read_array(v, key, depth);
        break;
    }
    return v;
  }

 private:
  void read_array(GgufValue& v, const std::string& key, int depth) {
    const uint64_t at = r_.pos();
    if (depth >= kMaxArrayDepth)
      r_.fail("key '" + key + "': arrays nested deeper than " + std::to_string(kMaxArrayDepth), at);
    const uint32_t et = r_.read<uint32_t>("array element type of key '" + key + "'");
    if (!valid_value_type(et)) r_.fail("key '" + key + "': unknown array element value type " + std::to_string(et), at);
    v.elem_type = static_cast<GgufValueType>(et);
    const uint64_t count_at = r_.pos();
    const uint64_t count = r_.read<uint64_t>("array count of key '" + key + "'");
    if (count > r_.remaining() / min_encoded_size(v.elem_type))
      r_.fail("key '" + key + "': array count " + std::to_string(count) + " cannot fit in the " +
                  std::to_string(r_.remaining()) + " bytes left in the file",
              count_at);
    total_elements_ += count;
    if (total_elements_ > kMaxArrayElements)
      r_.fail("key '" + key + "': more than " + std::to_string(kMaxArrayElements) +
                  " array elements in the metadata (refusing to allocate for them)",
              count_at);
    v.arr.reserve(static_cast<size_t>(count));
    for (uint64_t k = 0; k < count; ++k) v.arr.push_back(read_value(v.elem_type, key, depth + 1));
  }

  ByteReader& r_;
  uint64_t total_elements_ = 0;
};

// a * b, or nullopt when the product does not fit.
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}
std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace gguf_detail

using namespace gguf_detail;

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // the parser proved this product fits in int64
  return n;
}

int64_t TensorView::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < info->ne.size(); ++i) r *= info->ne[i];
  return r;
}

namespace {

// The header (metadata + tensor infos) is read in chunks that double, so a file with a large
// vocabulary costs a few reads and a small one a single 64 KiB read.
constexpr uint64_t kFirstHeaderRead = 64 * 1024;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) {
    const int err = errno;
    throw GgufError("gguf '" + path + "': cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(f->fd_, &st) != 0) {
    const int err = errno;
    throw GgufError("gguf '" + path + "': cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) throw GgufError("gguf '" + path + "': not a regular file");
  if (st.st_size == 0) throw GgufError("gguf '" + path + "': empty file, not GGUF");
  f->size_ = static_cast<uint64_t>(st.st_size);
  // (The destructor closes the descriptor when anything below throws.)
  std::vector<uint8_t> head;
  const ByteFetch fetch = [&](uint64_t end, uint64_t* avail) {
    const uint64_t old = head.size();
    const uint64_t want = std::min(f->size_, std::max({end, 2 * old, kFirstHeaderRead}));
    head.resize(static_cast<size_t>(want));
    pread_exact(f->fd_, head.data() + old, want - old, old, path, f->size_);
    *avail = want;
    return head.data();
  };
  f->parse(fetch);
  return f;
}

std::shared_ptr<GgufFile> GgufFile::from_bytes(const uint8_t* data, size_t size, std::string label) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(label);
  f->owned_.assign(data, data + size);
  f->size_ = size;
  const ByteFetch fetch = [&](uint64_t, uint64_t* avail) {
    *avail = f->size_;
    return f->owned_.data();
  };
  f->parse(fetch);
  f->data_ = f->owned_.data() + f->data_offset_;
  f->data_bytes_ = f->size_ - f->data_offset_;
  return f;
}

GgufFile::~GgufFile() {
  close_fd(fd_);
  if (data_map_) ::munmap(data_map_, static_cast<size_t>(data_map_bytes_));
}

void GgufFile::load_tensor_data() const {
  if (data_) return;  // from_bytes: already in memory
  std::call_once(data_once_, [this] { read_tensor_data(); });
}

uint64_t GgufFile::resident_bytes() const {
  if (!owned_.empty()) return owned_.size();
  return data_map_ ? data_map_bytes_ : 0;
}

// Copies [data_offset_, end of the last tensor) into an anonymous private mapping, then makes
// it read-only (a stray write faults instead of corrupting weights) and closes the file. If
// this throws, call_once lets the next view() try again (and most likely fail the same way).
void GgufFile::read_tensor_data() const {
  uint64_t end = 0;
  for (const auto& t : tensors_) end = std::max(end, t.offset + t.nbytes);  // validated <= size_ - data_offset_
  if (end == 0) {
    close_fd(fd_);
    return;
  }
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t map_bytes = (end + page - 1) / page * page;
  // MAP_POPULATE: the pages are faulted in by one call instead of one fault per 4 KiB page as
  // pread fills them (about a third less CPU for a 236 MiB model). No MADV_HUGEPAGE: with the
  // common defrag=madvise setting it can stall the load in direct compaction for a second.
  void* m = ::mmap(nullptr, static_cast<size_t>(map_bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (m == MAP_FAILED) {
    const int err = errno;
    throw GgufError("gguf '" + path_ + "': cannot allocate " + std::to_string(map_bytes >> 20) +
                    " MiB for the tensor data: " + std::strerror(err));
  }
  try {
    pread_exact(fd_, static_cast<uint8_t*>(m), end, data_offset_, path_, size_);
  } catch (...) {
    ::munmap(m, static_cast<size_t>(map_bytes));
    throw;
  }
  ::mprotect(m, static_cast<size_t>(map_bytes), PROT_READ);
  data_map_ = m;
  data_map_bytes_ = map_bytes;
  data_bytes_ = end;
  close_fd(fd_);
}

// One linear pass over the format, section by section; each step fails with the byte offset.
void GgufFile::parse(const ByteFetch& fetch) {
  ByteReader r(fetch, size_, path_);
  uint64_t n_tensors = 0, n_kv = 0;
  parse_header(r, n_tensors, n_kv);
  parse_metadata(r, n_kv);
  const std::vector<uint64_t> info_at = parse_tensor_infos(r, n_tensors);
  check_data_section(r, info_at);
}

void GgufFile::parse_header(ByteReader& r, uint64_t& n_tensors, uint64_t& n_kv) {
  if (size_ < 4) r.fail("file too small to be GGUF (" + std::to_string(size_) + " bytes)", 0);
  uint8_t magic[4];
  for (uint8_t& m : magic) m = r.read<uint8_t>("magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    r.fail(std::string("bad magic: expected 'GGUF' (47 47 55 46), found ") + hex, 0);
  }
  const uint64_t version_at = r.pos();
  version_ = r.read<uint32_t>("version");
  if (version_ == 1)
    r.fail("GGUF v1 is not supported (kvscope reads v2 and v3; re-convert the model with a current llama.cpp)",
           version_at);
  if (version_ == 0x02000000u || version_ == 0x03000000u) r.fail("big-endian GGUF is not supported", version_at);
  if (version_ != 2 && version_ != 3) r.fail("unsupported GGUF version " + std::to_string(version_), version_at);

  const uint64_t counts_at = r.pos();
  n_tensors = r.read<uint64_t>("tensor count");
  n_kv = r.read<uint64_t>("metadata count");
  // Smallest records: a key-value is 8 (key length) + 4 (type) + 1 byte; a tensor info is
  // 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
  if (n_kv > r.remaining() / 13)
    r.fail("metadata count " + std::to_string(n_kv) + " cannot fit in the file", counts_at + 8);
  if (n_tensors > r.remaining() / 24)
    r.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the file", counts_at);
}

void GgufFile::parse_metadata(ByteReader& r, uint64_t n_kv) {
  MetadataParser mp(r);
  std::unordered_set<std::string> keys;
  uint64_t alignment_at = 0;
  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const uint64_t at = r.pos();
    GgufKV kv;
    kv.key = r.read_string("metadata key #" + std::to_string(k));
    if (kv.key == "general.alignment") alignment_at = at;
    if (!keys.insert(kv.key).second) r.fail("duplicate metadata key '" + kv.key + "'", at);
    const uint64_t type_at = r.pos();
    const uint32_t type = r.read<uint32_t>("value type of key '" + kv.key + "'");
    if (!valid_value_type(type)) r.fail("key '" + kv.key + "' has unknown value type " + std::to_string(type), type_at);
    kv.value = mp.read_value(static_cast<GgufValueType>(type), kv.key, 0);
    kv_.push_back(std::move(kv));
  }

  alignment_ = 32;
  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer())
      r.fail("general.alignment must be an integer, found " + std::string(gguf_value_type_name(a->type)), alignment_at);
    const int64_t v = a->as_int();
    if (v <= 0 || (v & (v - 1)) != 0)
      r.fail("general.alignment " + std::to_string(v) + " is not a nonzero power of two", alignment_at);
    alignment_ = static_cast<uint64_t>(v);
  }
}

std::vector<uint64_t> GgufFile::parse_tensor_infos(ByteReader& r, uint64_t n_tensors) {
  std::vector<uint64_t> info_at;
  std::unordered_set<std::string> names;
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const uint64_t at = r.pos();
    GgufTensorInfo t;
    t.name = r.read_string("tensor #" + std::to_string(k) + " name");
    if (!names.insert(t.name).second) r.fail("duplicate tensor name '" + t.name + "'", at);
    const std::string tn = "tensor '" + t.name + "'";
    const uint64_t dims_at = r.pos();
    const uint32_t n_dims = r.read<uint32_t>(tn + " n_dims");
    if (n_dims > kMaxDims)
      r.fail(tn + " has n_dims " + std::to_string(n_dims) + " (at most " + std::to_string(kMaxDims) + ")", dims_at);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne_at = r.pos();
      const int64_t ne = r.read<int64_t>(tn + " dimension");
      if (ne <= 0)
        r.fail(tn + " dimension " + std::to_string(d) + " is " + std::to_string(ne) + " (must be positive)", ne_at);
      const auto prod = checked_mul(n_elems, static_cast<uint64_t>(ne));
      if (!prod || *prod > static_cast<uint64_t>(INT64_MAX))
        r.fail(tn + ": the product of its dimensions overflows int64", ne_at);
      n_elems = *prod;
      t.ne.push_back(ne);
    }
    const uint64_t type_at = r.pos();
    t.raw_type = r.read<uint32_t>(tn + " type");
    const uint64_t off_at = r.pos();
    t.offset = r.read<uint64_t>(tn + " offset");

    const GgmlTypeInfo ti = ggml_type_info(t.raw_type);
    if (ti.block_elems > 0) {
      const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
      if (ne0 % ti.block_elems != 0)
        r.fail(tn + ": ne[0] = " + std::to_string(ne0) + " is not a multiple of the block size " +
                   std::to_string(ti.block_elems) + " of type " + ti.name,
               type_at);
      const auto nbytes = checked_mul(n_elems / static_cast<uint64_t>(ti.block_elems), ti.block_bytes);
      if (!nbytes) r.fail(tn + ": byte size overflows", type_at);
      t.nbytes = *nbytes;
    }
    // Unknown types keep nbytes = 0: we cannot size them, so view() refuses them instead.
    if (t.offset % alignment_ != 0)
      r.fail(tn + " data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                 std::to_string(alignment_),
             off_at);
    info_at.push_back(at);
    tensors_.push_back(std::move(t));
  }
  return info_at;
}

void GgufFile::check_data_section(ByteReader& r, const std::vector<uint64_t>& info_at) {
  const auto padded = checked_add(r.pos(), alignment_ - 1);
  if (!padded) r.fail("data section offset overflows", r.pos());
  data_offset_ = *padded / alignment_ * alignment_;
  if (data_offset_ > size_) {
    if (!tensors_.empty())
      r.fail("data section would start at byte " + std::to_string(data_offset_) + ", past the end of the file (" +
                 std::to_string(size_) + " bytes)",
             r.pos());
    data_offset_ = size_;  // a tensor-less (vocab-only) file may omit the final padding
  }
  const uint64_t data_size = size_ - data_offset_;
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const auto& t = tensors_[k];
    const auto end = checked_add(t.offset, t.nbytes);
    if (!end || *end > data_size)
      r.fail("tensor '" + t.name + "' data [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
                 ") relative to the data section at " + std::to_string(data_offset_) +
                 " extends past the end of the file (" + std::to_string(size_) + " bytes)",
             info_at[k]);
  }
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = tensors_[order[k - 1]];
    const auto& cur = tensors_[order[k]];
    if (prev.offset + prev.nbytes > cur.offset)
      r.fail("tensors '" + prev.name + "' and '" + cur.name + "' overlap (data offsets " + std::to_string(prev.offset) +
                 " + " + std::to_string(prev.nbytes) + " > " + std::to_string(cur.offset) + ")",
             info_at[order[k]]);
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& kv : kv_)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return v->as_int();
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return v->as_float();
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return v->as_bool();
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return v->as_string();
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

TensorView GgufFile::view(const GgufTensorInfo& t) const {
  const std::less<const GgufTensorInfo*> before;  // total order, unlike < on unrelated pointers
  if (tensors_.empty() || before(&t, tensors_.data()) || !before(&t, tensors_.data() + tensors_.size()))
    throw GgufError("gguf '" + path_ + "': tensor '" + t.name + "' does not belong to this file");
  if (!ggml_type_info(t.raw_type).supported)
    throw GgufError("tensor '" + t.name + "' has type " + ggml_type_name(t.raw_type) +
                    ", which kvscope does not support");
  load_tensor_data();
  const uint8_t* data = data_map_ ? static_cast<const uint8_t*>(data_map_) : data_;
  return TensorView{&t, data + t.offset};
}

}  // namespace kvscope
