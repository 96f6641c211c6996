// GGUF reader/writer: real files, synthetic files, writer round trips, and one test per kind of
// hostile input. Hostile files are built with GgufWriter::to_bytes() plus byte patches, or by
// hand with ByteBuilder, and parsed with GgufFile::from_bytes; each must throw GgufError with a
// message that names the problem.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include "gguf/gguf_file.h"
#include "gguf/gguf_inspect.h"
#include "gguf/gguf_writer.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Little-endian hand assembly of (possibly broken) GGUF files.
struct ByteBuilder {
  std::vector<uint8_t> b;
  template <typename T>
  ByteBuilder& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  ByteBuilder& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuilder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  ByteBuilder& pad(size_t alignment = 32) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
};

// Parses bytes that must be refused; returns the message (empty + test failure if accepted).
std::string refusal(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile::from_bytes(bytes.data(), bytes.size(), "hostile");
  } catch (const GgufError& e) { return e.what(); } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return {};
}

#define EXPECT_REFUSED(bytes, word)                                                                                 \
  do {                                                                                                              \
    const std::string msg_ = refusal(bytes);                                                                        \
    QVERIFY2(!msg_.empty(), "hostile input was accepted");                                                          \
    QVERIFY2(msg_.find("WRONG EXCEPTION") == std::string::npos, msg_.c_str());                                      \
    QVERIFY2(msg_.find(word) != std::string::npos, ("message lacks '" + std::string(word) + "': " + msg_).c_str()); \
    QVERIFY2(msg_.find("byte offset") != std::string::npos, ("message lacks the offset: " + msg_).c_str());         \
  } while (0)

// A small valid file: two f32 tensors, a few keys.
GgufWriter small_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.add_tensor("a.weight", {32, 2}, GgmlType::F32, std::vector<float>(64, 1.0f));
  w.add_tensor("b.weight", {32}, GgmlType::F32, std::vector<float>(32, 2.0f));
  return w;
}

// Byte position of the first occurrence of `needle` (a name in the header).
size_t find_bytes(const std::vector<uint8_t>& hay, const std::string& needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end());
  return it == hay.end() ? std::string::npos : static_cast<size_t>(it - hay.begin());
}

// Tensor info layout after the name: n_dims u32, ne[n_dims] i64, type u32, offset u64.
size_t tensor_info_field(const std::vector<uint8_t>& bytes, const std::string& name, int n_dims, const char* field) {
  const size_t name_at = find_bytes(bytes, name);
  size_t p = name_at + name.size();
  if (std::string(field) == "n_dims") return p;
  p += 4;
  if (std::string(field) == "ne") return p;
  p += 8 * n_dims;
  if (std::string(field) == "type") return p;
  return p + 4;  // offset
}

template <typename T>
void patch(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

}  // namespace

class TestGguf : public QObject {
  Q_OBJECT

 private slots:
  void stories260k_metadata() {
    const auto path = test::models_dir() / "stories260K.gguf";
    KVSCOPE_REQUIRE_FILE(path);
    const auto f = GgufFile::open(path.string());
    QCOMPARE(f->version(), 3u);
    QCOMPARE(f->alignment(), uint64_t{32});
    QCOMPARE(f->get_string("general.architecture").value(), std::string("llama"));
    QCOMPARE(f->get_int("llama.block_count").value(), int64_t{5});
    QCOMPARE(f->get_int("llama.embedding_length").value(), int64_t{64});
    QCOMPARE(f->get_int("llama.attention.head_count").value(), int64_t{8});
    QCOMPARE(f->get_int("llama.attention.head_count_kv").value(), int64_t{4});
    QCOMPARE(f->get_float("llama.attention.layer_norm_rms_epsilon").value(), double(1e-5f));
    // The legacy misspelled key is just another key.
    QCOMPARE(f->get_int("tokenizer.ggml.seperator_token_id").value(), int64_t{4294967295});
    const auto tokens = f->find("tokenizer.ggml.tokens")->as_string_array();
    QCOMPARE(tokens.size(), size_t{512});
    QCOMPARE(tokens[1], std::string("<s>"));
    QCOMPARE(f->find("tokenizer.ggml.scores")->as_float_array().size(), size_t{512});
    QVERIFY(!f->get_int("no.such.key").has_value());
    QVERIFY_THROWS_EXCEPTION(GgufError, f->get_int("general.architecture"));

    QCOMPARE(f->tensors().size(), size_t{48});
    for (const auto& t : f->tensors()) {
      QCOMPARE(t.type(), GgmlType::F32);
      QCOMPARE(t.offset % 32, uint64_t{0});
    }
    const auto* q = f->find_tensor("blk.0.attn_q.weight");
    QVERIFY(q);
    QCOMPARE(q->ne, (std::vector<int64_t>{64, 64}));
    const TensorView v = f->view(*q);
    QCOMPARE(v.rows(), int64_t{64});
    QCOMPARE(v.row_bytes(), size_t{256});
    const auto raw = read_all(path);
    QVERIFY(std::memcmp(v.data, raw.data() + f->data_offset() + q->offset, q->nbytes) == 0);
    // The last tensor ends exactly at the end of the file.
    uint64_t end = 0;
    for (const auto& t : f->tensors()) end = std::max(end, f->data_offset() + t.offset + t.nbytes);
    QCOMPARE(end, f->file_size());
  }

  void synthetic_files_types() {
    // Per README: which types each synthetic llama holds (1-D norms stay f32 everywhere).
    struct Case {
      const char* file;
      std::map<std::string, int> counts;
    };
    const Case cases[] = {
        {"synth-llama-f32.gguf", {{"f32", 21}}},
        {"synth-llama-f16.gguf", {{"f16", 16}, {"f32", 5}}},
        {"synth-llama-bf16.gguf", {{"bf16", 16}, {"f32", 5}}},
        {"synth-llama-q8_0.gguf", {{"q8_0", 16}, {"f32", 5}}},
        {"synth-llama-q4_0.gguf", {{"q4_0", 15}, {"q6_K", 1}, {"f32", 5}}},
        {"synth-llama-q4_k_m.gguf", {{"q4_K", 13}, {"q6_K", 3}, {"f32", 5}}},
        {"synth-llama-q6_k.gguf", {{"q6_K", 16}, {"f32", 5}}},
    };
    for (const auto& c : cases) {
      const auto path = test::models_dir() / "synthetic" / c.file;
      KVSCOPE_REQUIRE_FILE(path);
      const auto f = GgufFile::open(path.string());
      QCOMPARE(f->version(), 3u);
      QCOMPARE(f->alignment(), uint64_t{32});
      QCOMPARE(f->get_int("llama.embedding_length").value(), int64_t{256});
      std::map<std::string, int> counts;
      for (const auto& t : f->tensors()) {
        ++counts[ggml_type_name(t.raw_type)];
        if (t.ne.size() == 1) QCOMPARE(t.type(), GgmlType::F32);
        f->view(t);  // every type here is supported
      }
      QVERIFY2(counts == c.counts, c.file);
    }
    const auto q40 = GgufFile::open((test::models_dir() / "synthetic" / "synth-llama-q4_0.gguf").string());
    QCOMPARE(q40->find_tensor("output.weight")->type(), GgmlType::Q6_K);
    for (const char* arch : {"qwen2", "qwen3", "gemma3"}) {
      const auto f =
          GgufFile::open((test::models_dir() / "synthetic" / (std::string("synth-") + arch + "-f32.gguf")).string());
      QCOMPARE(f->get_string("general.architecture").value(), std::string(arch));
      for (const auto& t : f->tensors()) QCOMPARE(t.type(), GgmlType::F32);
    }
  }

  void v1_file_refused() {
    const auto path = test::models_dir() / "tinyllamas-stories-260k-f32.gguf";
    KVSCOPE_REQUIRE_FILE(path);
    try {
      GgufFile::open(path.string());
      QFAIL("v1 file was accepted");
    } catch (const GgufError& e) {
      QVERIFY2(std::string(e.what()).find("v1 is not supported") != std::string::npos, e.what());
    }
  }

  void writer_round_trip_all_value_types() {
    GgufWriter w(64);
    auto scalar = [](GgufValueType t) {
      GgufValue v;
      v.type = t;
      return v;
    };
    GgufValue v;
    v = scalar(GgufValueType::UINT8);
    v.u = 200;
    w.set("t.u8", v);
    v = scalar(GgufValueType::INT8);
    v.i = -100;
    w.set("t.i8", v);
    v = scalar(GgufValueType::UINT16);
    v.u = 60000;
    w.set("t.u16", v);
    v = scalar(GgufValueType::INT16);
    v.i = -30000;
    w.set("t.i16", v);
    w.set_u32("t.u32", 4000000000u);
    w.set_i32("t.i32", -2000000000);
    w.set_u64("t.u64", 18000000000000000000ull);
    v = scalar(GgufValueType::INT64);
    v.i = -9000000000000000000ll;
    w.set("t.i64", v);
    w.set_f32("t.f32", 0.1f);
    v = scalar(GgufValueType::FLOAT64);
    v.f = 0.1;
    w.set("t.f64", v);
    w.set_bool("t.bool", true);
    w.set_string("t.str", std::string("h\xC3\xA9llo\0x", 8));
    w.set_string_array("t.strs", {"a", "", "ccc"});
    w.set_f32_array("t.f32s", {1.5f, -2.0f});
    w.set_i32_array("t.i32s", std::vector<int32_t>(40, 7));
    GgufValue nested;
    nested.type = GgufValueType::ARRAY;
    nested.elem_type = GgufValueType::ARRAY;
    GgufValue inner;
    inner.type = GgufValueType::ARRAY;
    inner.elem_type = GgufValueType::UINT8;
    inner.arr = {scalar(GgufValueType::UINT8)};
    nested.arr = {inner, inner};
    w.set("t.nested", nested);
    w.set_u32("t.u32", 5);  // replaces
    w.add_tensor("x", {32}, GgmlType::F32, std::vector<float>(32, 1.0f));

    const auto bytes = w.to_bytes();
    const auto f = GgufFile::from_bytes(bytes.data(), bytes.size());
    QCOMPARE(f->alignment(), uint64_t{64});
    QCOMPARE(f->get_int("general.alignment").value(), int64_t{64});
    QCOMPARE(f->data_offset() % 64, uint64_t{0});
    QCOMPARE(f->find("t.u8")->u, uint64_t{200});
    QCOMPARE(f->find("t.u8")->type, GgufValueType::UINT8);
    QCOMPARE(f->get_int("t.i8").value(), int64_t{-100});
    QCOMPARE(f->get_int("t.u16").value(), int64_t{60000});
    QCOMPARE(f->get_int("t.i16").value(), int64_t{-30000});
    QCOMPARE(f->get_int("t.u32").value(), int64_t{5});
    QCOMPARE(f->get_int("t.i32").value(), int64_t{-2000000000});
    QCOMPARE(f->find("t.u64")->u, uint64_t{18000000000000000000ull});
    QVERIFY_THROWS_EXCEPTION(GgufError, f->get_int("t.u64"));  // does not fit int64
    QCOMPARE(f->get_int("t.i64").value(), int64_t{-9000000000000000000ll});
    QCOMPARE(f->get_float("t.f32").value(), double(0.1f));
    QCOMPARE(f->get_float("t.f64").value(), 0.1);
    QCOMPARE(f->get_bool("t.bool").value(), true);
    QCOMPARE(f->get_string("t.str").value(), std::string("h\xC3\xA9llo\0x", 8));
    QCOMPARE(f->find("t.strs")->as_string_array(), (std::vector<std::string>{"a", "", "ccc"}));
    QCOMPARE(f->find("t.f32s")->as_float_array(), (std::vector<float>{1.5f, -2.0f}));
    QCOMPARE(f->find("t.i32s")->as_int_array(), std::vector<int64_t>(40, 7));
    QCOMPARE(f->find("t.nested")->arr.size(), size_t{2});
    QCOMPARE(f->find("t.nested")->arr[1].elem_type, GgufValueType::UINT8);
    QCOMPARE(f->metadata().size(), size_t{17});  // 16 set (one replaced) + general.alignment

    // The inspector sees the same facts.
    const auto j = gguf_summary_json(*f);
    QCOMPARE(j["alignment"].get<int>(), 64);
    QCOMPARE(j["metadata"]["t.i32s"]["count"].get<int>(), 40);
    QCOMPARE(j["metadata"]["t.i32s"]["head"].size(), size_t{8});
    QCOMPARE(j["metadata"]["t.strs"].size(), size_t{3});
    QCOMPARE(j["n_params"].get<int>(), 32);
    QCOMPARE(j["type_counts"]["f32"].get<int>(), 1);
    QVERIFY(!j.dump().empty());
    QVERIFY(gguf_summary_text(*f).find("t.strs") != std::string::npos);
  }

  void writer_round_trip_all_dtypes() {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 0.5f);
    std::vector<float> data(512 * 3);
    for (auto& x : data) x = dist(rng);
    const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                              GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K};
    GgufWriter w;
    for (GgmlType t : types) w.add_tensor("t." + ggml_type_name(uint32_t(t)), {512, 3}, t, data);
    const auto path = test::tmp_dir() / "dtypes_round_trip.gguf";
    w.write(path.string());
    const auto f = GgufFile::open(path.string());
    QCOMPARE(f->tensors().size(), std::size(types));
    for (GgmlType t : types) {
      const auto* info = f->find_tensor("t." + ggml_type_name(uint32_t(t)));
      QVERIFY(info);
      QCOMPARE(info->type(), t);
      QCOMPARE(info->nbytes, uint64_t(ggml_row_bytes(t, 512) * 3));
      const TensorView v = f->view(*info);
      QCOMPARE(v.rows(), int64_t{3});
      // Bytes on disk are exactly what quantize_row produced.
      std::vector<uint8_t> expect(info->nbytes);
      quantize_row(t, data.data(), expect.data(), 512 * 3);
      QVERIFY(std::memcmp(v.data, expect.data(), expect.size()) == 0);
      std::vector<float> back(512 * 3);
      dequantize_row(t, v.data, back.data(), 512 * 3);
      double err = 0, ref = 0;
      for (size_t i = 0; i < back.size(); ++i) {
        err += (back[i] - data[i]) * double(back[i] - data[i]);
        ref += double(data[i]) * data[i];
      }
      QVERIFY2(std::sqrt(err / ref) < 0.1, qPrintable(QString::fromStdString(ggml_type_name(uint32_t(t)))));
      if (t == GgmlType::F32) QCOMPARE(err, 0.0);
    }
  }

  void json_summary_of_stories() {
    const auto f = GgufFile::open((test::models_dir() / "stories260K.gguf").string());
    const auto j = gguf_summary_json(*f);
    QCOMPARE(j["version"].get<int>(), 3);
    QCOMPARE(j["n_tensors"].get<int>(), 48);
    QCOMPARE(j["type_counts"]["f32"].get<int>(), 48);
    QCOMPARE(j["metadata"]["tokenizer.ggml.tokens"]["count"].get<int>(), 512);
    QCOMPARE(j["metadata"]["tokenizer.ggml.tokens"]["type"].get<std::string>(), std::string("string"));
    QCOMPARE(j["metadata"]["llama.block_count"].get<int>(), 5);
    QCOMPARE(j["tensor_bytes"].get<uint64_t>(), f->file_size() - f->data_offset());
    QVERIFY(j["n_params"].get<int64_t>() > 250000);
  }

  // ---- hostile inputs -------------------------------------------------------------------

  void hostile_wrong_magic() {
    auto b = small_writer().to_bytes();
    b[0] = 'X';
    EXPECT_REFUSED(b, "magic");
    EXPECT_REFUSED((std::vector<uint8_t>{'G', 'G'}), "too small");
  }

  void hostile_v1() {
    auto b = small_writer().to_bytes();
    patch<uint32_t>(b, 4, 1);
    EXPECT_REFUSED(b, "v1 is not supported");
    patch<uint32_t>(b, 4, 7);
    EXPECT_REFUSED(b, "version 7");
  }

  void hostile_truncated_header() {
    ByteBuilder h;
    h.header(0, 0);
    for (size_t cut = 4; cut < h.b.size(); ++cut)
      EXPECT_REFUSED(std::vector<uint8_t>(h.b.begin(), h.b.begin() + cut), "truncated");
  }

  void hostile_truncated_metadata() {
    const auto b = small_writer().to_bytes();
    const size_t key_at = find_bytes(b, "llama.block_count");
    EXPECT_REFUSED(std::vector<uint8_t>(b.begin(), b.begin() + key_at + 5), "truncated");
    EXPECT_REFUSED(std::vector<uint8_t>(b.begin(), b.begin() + key_at + 17 + 2), "truncated");  // inside the value type
  }

  void hostile_truncated_tensor_data() {
    const auto b = small_writer().to_bytes();  // b.weight (128 bytes) is the last tensor
    EXPECT_REFUSED(std::vector<uint8_t>(b.begin(), b.end() - 1), "past the end");
    EXPECT_REFUSED(std::vector<uint8_t>(b.begin(), b.end() - 100), "b.weight");
  }

  void hostile_tensor_offset_past_eof() {
    auto b = small_writer().to_bytes();
    patch<uint64_t>(b, tensor_info_field(b, "b.weight", 1, "offset"), uint64_t{1} << 40);
    EXPECT_REFUSED(b, "past the end");
    patch<uint64_t>(b, tensor_info_field(b, "b.weight", 1, "offset"), ~uint64_t{31});  // offset + size wraps
    EXPECT_REFUSED(b, "b.weight");
  }

  void hostile_overlapping_tensors() {
    auto b = small_writer().to_bytes();
    patch<uint64_t>(b, tensor_info_field(b, "b.weight", 1, "offset"), 224);  // a.weight spans [0, 256)
    EXPECT_REFUSED(b, "overlap");
  }

  void hostile_dimension_product_overflow() {
    auto b = small_writer().to_bytes();
    const size_t ne = tensor_info_field(b, "a.weight", 2, "ne");
    patch<int64_t>(b, ne, int64_t{1} << 32);
    patch<int64_t>(b, ne + 8, int64_t{1} << 32);
    EXPECT_REFUSED(b, "overflows int64");
    patch<int64_t>(b, ne, -32);
    EXPECT_REFUSED(b, "must be positive");
    patch<int64_t>(b, ne, 0);
    EXPECT_REFUSED(b, "must be positive");
  }

  void hostile_string_length_2_pow_63() {
    auto b = small_writer().to_bytes();
    const size_t key_at = find_bytes(b, "general.architecture");
    patch<uint64_t>(b, key_at - 8, uint64_t{1} << 63);  // the key's own length
    EXPECT_REFUSED(b, "string length 9223372036854775808");
    b = small_writer().to_bytes();
    const size_t val_at = find_bytes(b, "llama") - 8;  // "llama" value follows its length
    patch<uint64_t>(b, val_at, ~uint64_t{0});
    EXPECT_REFUSED(b, "general.architecture");
  }

  void hostile_huge_array_count() {
    GgufWriter w = small_writer();
    w.set_i32_array("big", {1, 2, 3});
    auto b = w.to_bytes();
    const size_t count_at = find_bytes(b, "big") + 3 + 4 /*value type*/ + 4 /*elem type*/;
    patch<uint64_t>(b, count_at, uint64_t{1} << 61);
    EXPECT_REFUSED(b, "array count");
    patch<uint64_t>(b, count_at, 1000);  // still larger than what is left
    EXPECT_REFUSED(b, "array count");
    // Header counts that cannot fit are refused before anything is allocated.
    auto c = small_writer().to_bytes();
    patch<uint64_t>(c, 16, ~uint64_t{0});
    EXPECT_REFUSED(c, "metadata count");
    patch<uint64_t>(c, 16, 2);
    patch<uint64_t>(c, 8, uint64_t{1} << 60);
    EXPECT_REFUSED(c, "tensor count");
  }

  void hostile_unknown_value_type() {
    auto b = small_writer().to_bytes();
    const size_t type_at = find_bytes(b, "llama.block_count") + 17;
    patch<uint32_t>(b, type_at, 13);
    EXPECT_REFUSED(b, "unknown value type 13");
    // ... and inside an array.
    GgufWriter w;
    w.set_f32_array("arr", {1.0f});
    auto a = w.to_bytes();
    patch<uint32_t>(a, find_bytes(a, "arr") + 3 + 4, 99);
    EXPECT_REFUSED(a, "unknown array element value type 99");
  }

  void hostile_unknown_tensor_type() {
    GgufWriter w;
    w.add_raw_tensor("blk.0.attn_q.weight", {256, 2}, static_cast<uint32_t>(GgmlType::IQ2_XXS),
                     std::vector<uint8_t>(2 * 66, 0));
    w.add_raw_tensor("mystery", {7}, 77, std::vector<uint8_t>(16, 0));
    w.add_tensor("ok", {32}, GgmlType::F32, std::vector<float>(32, 0.0f));
    const auto b = w.to_bytes();
    const auto f = GgufFile::from_bytes(b.data(), b.size());  // parses fine
    QCOMPARE(f->tensors().size(), size_t{3});
    const auto* iq = f->find_tensor("blk.0.attn_q.weight");
    QCOMPARE(iq->raw_type, 16u);
    QCOMPARE(iq->nbytes, uint64_t{132});
    try {
      f->view(*iq);
      QFAIL("view of iq2_xxs did not throw");
    } catch (const GgufError& e) {
      QCOMPARE(std::string(e.what()),
               std::string("tensor 'blk.0.attn_q.weight' has type iq2_xxs, which kvscope does not support"));
    }
    try {
      f->view(*f->find_tensor("mystery"));
      QFAIL("view of type 77 did not throw");
    } catch (const GgufError& e) {
      QVERIFY2(std::string(e.what()).find("unknown type 77") != std::string::npos, e.what());
    }
    f->view(*f->find_tensor("ok"));
    // A known block type still has its shape checked.
    GgufWriter bad;
    bad.add_raw_tensor("q", {100}, static_cast<uint32_t>(GgmlType::Q4_K), std::vector<uint8_t>(144, 0));
    EXPECT_REFUSED(bad.to_bytes(), "not a multiple of the block size 256");
  }

  void hostile_misaligned_tensor_offset() {
    auto b = small_writer().to_bytes();
    patch<uint64_t>(b, tensor_info_field(b, "b.weight", 1, "offset"), 260);
    EXPECT_REFUSED(b, "not a multiple of the alignment 32");
  }

  void hostile_bad_alignment_value() {
    for (uint32_t a : {0u, 3u, 48u}) {
      GgufWriter w = small_writer();
      w.set_u32("general.alignment", a);  // an explicit key is written as given
      EXPECT_REFUSED(w.to_bytes(), "general.alignment");
    }
    GgufWriter s = small_writer();
    s.set_string("general.alignment", "32");
    EXPECT_REFUSED(s.to_bytes(), "must be an integer");
  }

  void hostile_too_many_dims() {
    auto b = small_writer().to_bytes();
    patch<uint32_t>(b, tensor_info_field(b, "a.weight", 2, "n_dims"), 5);
    EXPECT_REFUSED(b, "n_dims 5");
    patch<uint32_t>(b, tensor_info_field(b, "a.weight", 2, "n_dims"), 0xFFFFFFFFu);
    EXPECT_REFUSED(b, "n_dims");
  }

  void hostile_duplicate_tensor_name() {
    GgufWriter w;
    w.add_tensor("same", {32}, GgmlType::F32, std::vector<float>(32, 0.0f));
    w.add_tensor("same", {32}, GgmlType::F32, std::vector<float>(32, 0.0f));
    EXPECT_REFUSED(w.to_bytes(), "duplicate tensor name 'same'");
  }

  void hostile_duplicate_key() {
    ByteBuilder h;
    h.header(0, 2);
    h.str("k").put<uint32_t>(4).put<uint32_t>(1);
    h.str("k").put<uint32_t>(4).put<uint32_t>(2);
    EXPECT_REFUSED(h.b, "duplicate metadata key 'k'");
  }

  void hostile_deeply_nested_arrays() {
    ByteBuilder h;
    h.header(0, 1);
    h.str("deep").put<uint32_t>(9);
    for (int i = 0; i < 100; ++i) h.put<uint32_t>(9).put<uint64_t>(1);
    EXPECT_REFUSED(h.b, "nested");
  }

  void hostile_data_section_past_eof() {
    // A header whose tensor infos end right at EOF: the padded data section would start past it.
    ByteBuilder h;
    h.header(1, 0).str("t").put<uint32_t>(1).put<int64_t>(1).put<uint32_t>(0).put<uint64_t>(0);
    EXPECT_REFUSED(h.b, "past the end");
  }

  void empty_and_tensorless_files_parse() {
    ByteBuilder h;
    h.header(0, 0);
    const auto f = GgufFile::from_bytes(h.b.data(), h.b.size());
    QVERIFY(f->tensors().empty());
    QVERIFY(f->metadata().empty());
    const auto vocab = test::models_dir() / "vocab" / "ggml-vocab-gpt-2.gguf";
    KVSCOPE_REQUIRE_FILE(vocab);
    const auto v = GgufFile::open(vocab.string());
    QVERIFY(v->tensors().empty());
    QVERIFY(v->find("tokenizer.ggml.merges")->as_string_array().size() > 40000);
    QVERIFY_THROWS_EXCEPTION(GgufError, GgufFile::open((test::tmp_dir() / "does-not-exist.gguf").string()));
  }

  // Every prefix of a real file's header + metadata must be refused cleanly (GgufError, no crash,
  // no huge allocation). Byte by byte for the first 4 KiB, then every 61 bytes.
  void truncation_at_every_boundary() {
    const auto bytes = read_all(test::models_dir() / "stories260K.gguf");
    QVERIFY(bytes.size() > 20000);
    const auto full = GgufFile::from_bytes(bytes.data(), bytes.size());
    const size_t header_end = full->data_offset();
    int checked = 0;
    for (size_t cut = 0; cut < header_end + 64; cut += (cut < 4096 ? 1 : 61)) {
      try {
        GgufFile::from_bytes(bytes.data(), cut);
        QFAIL(qPrintable(QString("prefix of %1 bytes was accepted").arg(cut)));
      } catch (const GgufError&) { ++checked; }
    }
    // A file cut anywhere in its tensor data is refused too.
    for (size_t cut : {header_end + 1000, bytes.size() / 2, bytes.size() - 1}) {
      QVERIFY_THROWS_EXCEPTION(GgufError, GgufFile::from_bytes(bytes.data(), cut));
      ++checked;
    }
    qInfo("%d truncated prefixes refused", checked);
  }

  // Random single-byte corruptions of the header region: never a crash, only GgufError or success.
  void random_header_corruption() {
    const auto orig = read_all(test::models_dir() / "stories260K.gguf");
    const size_t header_end = GgufFile::from_bytes(orig.data(), orig.size())->data_offset();
    std::mt19937 rng(123);
    int refused = 0;
    for (int i = 0; i < 3000; ++i) {
      auto b = orig;
      for (int k = 0; k < 3; ++k) b[rng() % header_end] = static_cast<uint8_t>(rng());
      try {
        GgufFile::from_bytes(b.data(), b.size());
      } catch (const GgufError&) { ++refused; }
    }
    qInfo("%d of 3000 corrupted headers refused", refused);
  }
};

QTEST_APPLESS_MAIN(TestGguf)
#include "test_gguf.moc"
