#include "widgets/seq_palette.h"

#include <array>

namespace kvscope::ui {

QColor seq_color(SeqId id) {
  // Tableau-20-like set reordered so that consecutive ids alternate hue families; 20 colours
  // before any repeats, which is more than a person can track in one block map anyway.
  static const std::array<QRgb, 20> kColors = {0x4e79a7, 0xf28e2b, 0x59a14f, 0xe15759, 0xb07aa1, 0x76b7b2, 0xedc948,
                                               0xff9da7, 0x9c755f, 0x6b6ecf, 0x2f6b9a, 0xd4a6c8, 0x86bcb6, 0xb6992d,
                                               0x8cd17d, 0xd37295, 0xa0cbe8, 0xffbe7d, 0x499894, 0xbab0ac};
  const size_t i = static_cast<size_t>((id < 0 ? 0 : id - 1) % static_cast<SeqId>(kColors.size()));
  return QColor(kColors[i]);
}

bool is_dark(const QColor& window) { return window.lightness() < 128; }

MapColors map_colors(bool dark) {
  MapColors c;
  if (dark) {
    c.free = QColor(0x2b, 0x2f, 0x36);
    c.freeBorder = QColor(0x3a, 0x3f, 0x48);
    c.cached = QColor(0x4a, 0x55, 0x62);
    c.cachedHatch = QColor(0x9a, 0xa8, 0xb8);
    c.sharedRing = QColor(0xff, 0xff, 0xff);
    c.sink = QColor(0xff, 0xd8, 0x4d);
    c.dropped = QColor(0xff, 0x6b, 0x6b);
    c.text = QColor(0xff, 0xff, 0xff);
    c.highlightRing = QColor(0xff, 0xff, 0xff);
  } else {
    c.free = QColor(0xee, 0xf0, 0xf3);
    c.freeBorder = QColor(0xd5, 0xd9, 0xdf);
    c.cached = QColor(0xd2, 0xd9, 0xe2);
    c.cachedHatch = QColor(0x6f, 0x7d, 0x8c);
    c.sharedRing = QColor(0x1b, 0x1f, 0x24);
    c.sink = QColor(0x1b, 0x1f, 0x24);
    c.dropped = QColor(0xc6, 0x28, 0x28);
    c.text = QColor(0x10, 0x10, 0x10);
    c.highlightRing = QColor(0x1b, 0x1f, 0x24);
  }
  return c;
}

}  // namespace kvscope::ui
