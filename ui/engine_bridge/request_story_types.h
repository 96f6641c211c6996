#pragma once
// A request's story as the window shows it: the core's timeline sentences (engine/
// request_story_text.h) with token text from the model's vocabulary, copied off the engine
// thread so the story view never touches the engine.
#include <QList>
#include <QMetaType>
#include <QString>

namespace kvscope::ui {

struct StoryTextLine {
  quint64 step = 0;
  QString kind;  // arrival, wait, admission, lookup, miss, blocks, copy, preemption, window, finish, reasoning
  QString text;
};

struct StoryText {
  qint64 id = -1;
  bool found = false;  // false: not in the engine's bounded history (or no engine)
  QString label;
  QString missReason;  // the first admission's miss reason name ("evicted", ...), "" if none
  QList<StoryTextLine> lines;
};

}  // namespace kvscope::ui

Q_DECLARE_METATYPE(kvscope::ui::StoryText)
