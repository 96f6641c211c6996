// engine/config_validation: the one rule book. Every rule reports its field and a reason, the
// engine refuses exactly the blocking ones, and the advisory ones (which the Settings panel
// refuses) still build an engine.
#include <QtTest>

#include <algorithm>

#include "cpu/cpu_backend.h"
#include "engine/config_validation.h"
#include "engine/engine.h"
#include "test_support.h"

using namespace kvscope;

namespace {

ModelConfig model_config() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head_kv = 1;
  m.head_dim = 8;
  m.n_ctx_train = 256;
  return m;
}

bool has(const std::vector<ConfigProblem>& ps, const std::string& field, const std::string& text, bool advisory) {
  return std::any_of(ps.begin(), ps.end(), [&](const ConfigProblem& p) {
    return p.field == field && p.message.find(text) != std::string::npos && p.advisory == advisory;
  });
}

}  // namespace

class TestConfigValidation : public QObject {
  Q_OBJECT
 private slots:
  void default_config_is_clean() { QVERIFY(validate(EngineConfig{}, model_config()).empty()); }

  void every_rule_names_its_field() {
    const ModelConfig m = model_config();
    auto one = [&](auto edit) {
      EngineConfig c;
      edit(c);
      return validate(c, m);
    };
    QVERIFY(has(one([](EngineConfig& c) { c.block_size = 24; }), "block_size", "8, 16, 32, 64, 128", false));
    QVERIFY(has(one([](EngineConfig& c) { c.num_blocks = -3; }), "num_blocks", "positive", false));
    QVERIFY(has(one([](EngineConfig& c) { c.num_blocks = 1; }), "num_blocks", "1 block", true));
    QVERIFY(has(one([](EngineConfig& c) { c.kv_memory_bytes = 0; }), "kv_memory_bytes", "positive", false));
    QVERIFY(has(one([](EngineConfig& c) { c.window = -1; }), "window", "negative", false));
    QVERIFY(has(one([](EngineConfig& c) { c.window = 8; }), "window", "smaller than one block", true));
    QVERIFY(has(one([](EngineConfig& c) { c.sinks = 4; }), "sinks", "need a sliding window", false));
    QVERIFY(has(one([](EngineConfig& c) { c.window = 32, c.sinks = 32; }), "sinks", "fewer than the window", false));
    QVERIFY(has(one([](EngineConfig& c) { c.sched.max_running = 0; }), "max_running", "at least 1", false));
    QVERIFY(
        has(one([](EngineConfig& c) { c.sched.max_batched_tokens = 0; }), "max_batched_tokens", "at least 1", false));
    QVERIFY(
        has(one([](EngineConfig& c) { c.sched.max_model_len = 8; }), "max_model_len", "shorter than one block", true));
    QVERIFY(
        has(one([](EngineConfig& c) { c.no_kv_cache = c.contiguous_baseline = true; }), "no_kv_cache", "paged", false));
    QVERIFY(
        has(one([](EngineConfig& c) { c.contiguous_baseline = true, c.window = 32; }), "window", "baseline", false));
    QVERIFY(has(one([](EngineConfig& c) {
                  c.contiguous_baseline = true;
                  c.baseline_reserve.kind = BaselineReserveKind::Fixed;
                  c.baseline_reserve.fixed_slots = 0;
                }),
                "baseline_reserve", "at least 1 slot", false));
    QVERIFY(has(one([](EngineConfig& c) {
                  c.contiguous_baseline = true;
                  c.num_blocks = 4;
                  c.sched.max_model_len = 128;
                }),
                "baseline_reserve", "no request could ever start", true));
  }

  void all_problems_at_once() {
    EngineConfig c;
    c.block_size = 7;
    c.sinks = 2;
    c.sched.max_running = 0;
    const auto ps = validate(c, model_config());
    QCOMPARE(ps.size(), size_t(3));
    QCOMPARE(blocking_problems(ps).size(), size_t(3));
    const std::string all = describe_problems(ps);
    QVERIFY(all.find("block size 7") != std::string::npos && all.find("; ") != std::string::npos);
  }

  // The engine constructor refuses blocking problems with their reasons and accepts advisory ones.
  void engine_follows_the_rule_book() {
    const auto path = test::models_dir() / "stories260K.gguf";
    KVSCOPE_REQUIRE_FILE(path);
    std::shared_ptr<Model> model = Model::load(path.string());
    EngineConfig bad;
    bad.window = 32;
    bad.sinks = 40;
    try {
      Engine e(model, std::make_unique<CpuBackend>(model, 1), bad);
      QFAIL("the engine accepted sinks beyond the window");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(std::string(e.what()).find("fewer than the window") != std::string::npos, e.what());
    }
    EngineConfig advisory;
    advisory.block_size = 64;
    advisory.window = 32;  // smaller than one block: the engine runs it
    advisory.num_blocks = 8;
    QVERIFY(!validate(advisory, model->config).empty());
    Engine e(model, std::make_unique<CpuBackend>(model, 1), advisory);
    QCOMPARE(e.config().window, 32);
  }
};

QTEST_GUILESS_MAIN(TestConfigValidation)
#include "test_config_validation.moc"
