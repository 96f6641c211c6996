#include "engine_bridge/config_edit.h"

namespace kvscope::ui {

namespace {

bool read_int(const QString& value, std::optional<int>* out) {
  bool ok = false;
  const int n = value.trimmed().toInt(&ok);
  if (!ok) return false;
  *out = n;
  return true;
}

}  // namespace

bool parse_config_override(const QString& key, const QString& value, EngineConfigEdit* edit) {
  if (key == QLatin1String("block-size")) return read_int(value, &edit->blockSize);
  if (key == QLatin1String("kv-blocks")) return read_int(value, &edit->kvBlocks);
  if (key == QLatin1String("window")) return read_int(value, &edit->window);
  if (key == QLatin1String("sinks")) return read_int(value, &edit->sinks);
  if (key == QLatin1String("kv-dtype")) {
    // Through the engine's parser, so aliases such as "fp8" select their dtype.
    if (const auto d = parse_kv_dtype(value.trimmed().toLower().toStdString())) edit->kvDtype = *d;
    return true;
  }
  if (key == QLatin1String("evict")) {  // "off" as the empty field shows it; a bad spec shows its note
    edit->evict = value.trimmed() == QLatin1String("off") ? QString() : value.trimmed();
    return true;
  }
  if (key == QLatin1String("prefix-caching")) {
    edit->prefixCaching = value != QLatin1String("off");
    return true;
  }
  if (key == QLatin1String("baseline")) {
    edit->baseline = value == QLatin1String("on");
    return true;
  }
  if (key == QLatin1String("baseline-reserve")) {
    const auto r = parse_baseline_reserve(value.trimmed().toStdString());
    if (!r) return false;
    edit->baselineReserve = *r;
    return true;
  }
  if (key == QLatin1String("threads")) {
    std::optional<int> n;
    if (!read_int(value, &n) || *n < 1) return false;
    edit->threads = n;
    return true;
  }
  if (key == QLatin1String("backend")) {
    const auto c = parse_backend_choice(value);
    if (!c) return false;
    edit->backend = *c;
    return true;
  }
  return false;
}

}  // namespace kvscope::ui
