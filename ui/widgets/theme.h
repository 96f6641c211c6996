#pragma once
// Light and dark palettes on the Fusion style, so screenshots look the same on every platform
// and the block map's colours were chosen against a known background; and the look the panels
// share (plot colours, scrolling panels), written once.
#include <QString>
#include <functional>

class QCustomPlot;
class QPalette;
class QScrollArea;
class QWidget;

namespace kvscope::ui {

// "light", "dark" or "system" (the platform's own palette and style).
void apply_theme(const QString& name);

// Colours a plot from `pal`: background, every axis of every axis rect (line, ticks, labels),
// a faint dotted grid and the legend (its background `legendAlpha` opaque). Queues a replot.
void style_plot(QCustomPlot* plot, const QPalette& pal, int legendAlpha = 210);

// Calls `restyle` whenever `widget`'s palette changes (a theme switch reaches every widget
// that way), so a panel that paints with palette colours of its own (a plot) follows the theme
// without the window knowing about it.
void restyle_on_palette_change(QWidget* widget, std::function<void()> restyle);

// A frameless scroll area around `content` that resizes it to its width; with wrapWidth the
// content also wraps to the area's width (no horizontal scroll bar).
QScrollArea* scroll_area(QWidget* content, bool wrapWidth = false);
// Makes `panel` one scroll_area around `content`, edge to edge: a panel in a short dock scrolls
// instead of making the whole window taller.
QScrollArea* fill_with_scroll_area(QWidget* panel, QWidget* content, bool wrapWidth = false);

}  // namespace kvscope::ui
