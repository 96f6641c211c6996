#include "shell/story_wiring.h"

#include <QListWidget>
#include <QTableWidget>

#include "panels/block_map_panel.h"
#include "panels/chat_panel.h"
#include "panels/request_story_panel.h"
#include "panels/workload_panel.h"
#include "widgets/block_map_widget.h"

namespace kvscope::ui {

void connect_story_sources(RequestStoryPanel* story, BlockMapPanel* map, WorkloadPanel* workload, ChatPanel* chat) {
  QObject::connect(map->map(), &BlockMapWidget::blockClicked, story, [story](int, qint64 owner) {
    if (owner >= 0) story->showRequest(owner);
  });
  // A row of the block map's sequence list carries its sequence id, as the table's first column does.
  QObject::connect(map->sequenceList(), &QListWidget::itemClicked, story,
                   [story](QListWidgetItem* it) { story->showRequest(it->data(Qt::UserRole).toLongLong()); });
  QObject::connect(story, &RequestStoryPanel::jumpRequested, map,
                   [map](const SnapshotPtr& s) { map->showSnapshot(s, nullptr); });
  if (workload)
    QObject::connect(workload->requestsTable(), &QTableWidget::cellClicked, story, [story, workload](int row, int) {
      if (const QTableWidgetItem* it = workload->requestsTable()->item(row, 0))
        story->showRequest(it->data(Qt::UserRole).toLongLong());
    });
  if (chat) QObject::connect(chat, &ChatPanel::storyRequested, story, &RequestStoryPanel::showRequest);
}

}  // namespace kvscope::ui
