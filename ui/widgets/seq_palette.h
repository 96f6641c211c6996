#pragma once
// Stable, distinguishable colours for sequences: a sequence keeps its colour for its whole life
// (colour = f(id), not f(position in a list)), and neighbouring ids get far-apart hues. Used by
// the block map, the chat tabs, the prefix tree and the compare view so one request looks the
// same everywhere.
#include <QColor>

#include "kv/kv_types.h"

namespace kvscope::ui {

QColor seq_color(SeqId id);
// Category colours, adjusted for a light or a dark window background.
struct MapColors {
  QColor free, freeBorder, cached, cachedHatch, sharedRing, sink, dropped, text, highlightRing;
};
MapColors map_colors(bool dark);
bool is_dark(const QColor& window);

}  // namespace kvscope::ui
