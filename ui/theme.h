#pragma once
// Light and dark palettes on the Fusion style, so screenshots look the same on every platform
// and the block map's colours were chosen against a known background.
#include <QString>

namespace kvscope::ui {

// "light", "dark" or "system" (the platform's own palette and style).
void apply_theme(const QString& name);

}  // namespace kvscope::ui
