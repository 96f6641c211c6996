#pragma once
// A guided lesson is data, not code: a preset of engine settings (Settings panel override keys,
// applied through the panel so its validation refuses what it refuses everywhere), a scenario
// for the engine to replay one Step at a time, a few short plain-language steps, and the panel
// (and optionally one widget in it) the learner should look at. The ten lessons of the
// Lessons panel live in lesson_table.cpp; LessonsPanel applies them.
#include <QList>
#include <QPair>
#include <QString>
#include <QStringList>
#include <optional>

#include "engine_bridge/config_edit.h"

namespace kvscope::ui {

// (key, value) as the command line writes them (parse_config_override's keys): read once, into
// one typed EngineConfigEdit, when the lesson is applied.
using LessonSettings = QList<QPair<QString, QString>>;

struct Lesson {
  int number = 0;
  QString title;
  // Settings on top of lesson_base_settings(); the loaded model stays (no lesson needs another).
  LessonSettings settings;
  QString scenario;      // workload key (workload_source.h) replayed paused; "" = none
  QStringList steps;     // short paragraphs, shown together
  QString lookAt;        // dock objectName ("fragDock"...) or "blockMap" for the central map
  QString lookAtWidget;  // objectName of a widget inside it to highlight instead ("" = the panel)
  // The Compare panel's configuration B, preset but not started (its KV dtype, window and
  // sinks), and its quality run: the quality cost of the lesson's setting is one Run away.
  EngineConfigEdit compareB;
  std::optional<bool> compareQuality;
  bool runNoCacheComparison = false;  // start the No-KV-cache panel's two runs
  bool runLatentComparison = false;   // start the Latent KV panel's two runs
  bool runHybridComparison = false;   // start the Hybrid state panel's two runs
};

// What every lesson starts from, so a lesson never inherits the previous one's settings.
const LessonSettings& lesson_base_settings();
// The lessons 1..10, in order.
const QList<Lesson>& builtin_lessons();
// Lesson `number` (1-based), or null.
const Lesson* find_lesson(int number);

}  // namespace kvscope::ui
