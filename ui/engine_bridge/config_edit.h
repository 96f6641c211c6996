#pragma once
// A typed change to the engine settings: what a lesson, the command line or Compare's side B
// changes, each field set or left alone. It is handed to the Settings panel's one apply path
// (SettingsPanel::applyEdit, then its validation and Apply), never as text to parse again.
#include <QString>
#include <optional>

#include "engine_bridge/backend_choice.h"
#include "kv/baseline_reserve.h"
#include "kv/kv_dtype.h"

namespace kvscope::ui {

struct EngineConfigEdit {
  std::optional<int> blockSize;  // tokens per block
  std::optional<int> kvBlocks;   // pool size in blocks
  std::optional<KvDtype> kvDtype;
  std::optional<int> window, sinks;  // 0 = full attention / no sinks
  std::optional<QString> evict;      // a `--evict` spec; empty = off
  std::optional<bool> prefixCaching;
  std::optional<bool> baseline;  // the contiguous allocator
  std::optional<BaselineReserve> baselineReserve;
  std::optional<BackendChoice> backend;
  std::optional<int> threads;  // CPU backend threads, >= 1
};

// Reads one command-line style override into *edit: block-size, kv-blocks, kv-dtype (the
// engine's parser, aliases included; a name it does not know leaves the dtype alone), window,
// sinks, evict (a `--evict` spec or "off"), prefix-caching (on/off), baseline (on/off),
// baseline-reserve (max-model-len, request or N), backend (auto/cpu/cuda), threads (N >= 1).
// False for an unknown key or a value it cannot read (*edit is then unchanged).
bool parse_config_override(const QString& key, const QString& value, EngineConfigEdit* edit);

}  // namespace kvscope::ui
