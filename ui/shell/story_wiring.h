#pragma once
// The window's wiring between panels: the places a request can be clicked lead to its story.
namespace kvscope::ui {

class BlockMapPanel;
class ChatPanel;
class RequestStoryPanel;
class WorkloadPanel;

// Wires the places a request can be clicked (block map cells and its sequence list, requests
// table, chat) to the story view, and its jumps to the block map.
void connect_story_sources(RequestStoryPanel* story, BlockMapPanel* map, WorkloadPanel* workload, ChatPanel* chat);

}  // namespace kvscope::ui
