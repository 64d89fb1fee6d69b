#include "train/run_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "model/parameters.h"
#include "train/metrics.h"
#include "train/options.h"

namespace gpt2 {
namespace {

std::string step_file(const std::string& out_dir, const char* prefix, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "%s_%08lld.bin", prefix, static_cast<long long>(step));
  return (std::filesystem::path(out_dir) / name).string();
}

// Step N of a file named <prefix>_<digits>.bin, or -1.
int64_t step_file_step(const std::string& name, const std::string& prefix) {
  const std::string suffix = ".bin";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), is_digit)) return -1;
  return std::stoll(digits);
}

int64_t model_file_step(const std::string& name) { return step_file_step(name, "model_"); }
int64_t state_file_step(const std::string& name) { return step_file_step(name, "state_"); }

// The names of out_dir's regular files.
std::vector<std::string> file_names(const std::string& out_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(out_dir, ec))
    if (entry.is_regular_file()) names.push_back(entry.path().filename().string());
  if (ec) GPT2_FAIL(out_dir, ": cannot list the folder: ", ec.message());
  return names;
}

// The pid of a temporary file's name "<name>.tmp.<pid>", or -1.
long temporary_file_pid(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return -1;
  const std::string digits = name.substr(at + 5);
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), is_digit))
    return -1;
  return std::stol(digits);
}

bool process_is_running(long pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

std::string model_checkpoint_path(const std::string& out_dir, int64_t step) {
  return step_file(out_dir, "model", step);
}
std::string training_state_path(const std::string& out_dir, int64_t step) {
  return step_file(out_dir, "state", step);
}
std::string metrics_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "metrics.jsonl").string();
}
std::string summary_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "summary.json").string();
}
std::string lock_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "gpt2-train.lock").string();
}

RunDirLock::RunDirLock(const std::string& out_dir) {
  const std::string path = lock_path(out_dir);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) GPT2_FAIL(path, ": cannot open the lock file: ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char text[32] = {};
    const ssize_t got = ::pread(fd_, text, sizeof text - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) GPT2_FAIL(path, ": cannot lock: ", std::strerror(err));
    const long pid = got > 0 ? std::strtol(text, nullptr, 10) : 0;
    GPT2_FAIL(out_dir, " is in use by another gpt2-train (",
              pid > 0 ? str_cat("pid ", pid) : std::string("pid unknown"), ", holding ", path,
              "): one run per --out; wait for it to finish or choose another --out");
  }
  const std::string pid = str_cat(static_cast<long>(::getpid()), "\n");
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock is held; only the pid shown to a second run is missing.
    std::fprintf(stderr, "gpt2-train: warning: %s: cannot record this run's pid: %s\n",
                 path.c_str(), std::strerror(errno));
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

std::vector<std::string> remove_stale_temporaries(const std::string& out_dir) {
  std::vector<std::string> removed;
  for (const std::string& name : file_names(out_dir)) {
    const long pid = temporary_file_pid(name);
    if (pid <= 0 || pid == static_cast<long>(::getpid()) || process_is_running(pid)) continue;
    const std::string path = (std::filesystem::path(out_dir) / name).string();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      GPT2_FAIL(path, ": cannot remove this stale temporary file: ", std::strerror(errno));
    removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::vector<int64_t> prune_checkpoints(const std::string& out_dir, int64_t step, int keep) {
  if (keep <= 0) return {};
  std::set<int64_t> models, states;
  for (const std::string& name : file_names(out_dir)) {
    if (const int64_t s = model_file_step(name); s > 0 && s <= step) models.insert(s);
    if (const int64_t s = state_file_step(name); s > 0 && s <= step) states.insert(s);
  }
  std::vector<int64_t> complete;  // newest first
  for (auto it = models.rbegin(); it != models.rend(); ++it)
    if (states.count(*it)) complete.push_back(*it);
  if (static_cast<int64_t>(complete.size()) <= keep) return {};
  const int64_t oldest_kept = complete[static_cast<size_t>(keep) - 1];
  std::set<int64_t> doomed;
  for (const int64_t s : models)
    if (s < oldest_kept) doomed.insert(s);
  for (const int64_t s : states)
    if (s < oldest_kept) doomed.insert(s);
  for (const int64_t s : doomed) {
    // The model first: a crash in between leaves a state without its model, which resume
    // ignores and the next prune removes.
    for (const std::string& path :
         {model_checkpoint_path(out_dir, s), training_state_path(out_dir, s)})
      if (::unlink(path.c_str()) != 0 && errno != ENOENT)
        GPT2_FAIL(path, ": cannot remove this old checkpoint file: ", std::strerror(errno));
  }
  return {doomed.begin(), doomed.end()};
}

ResumeSearch find_resume_point(const std::string& out_dir) {
  ResumeSearch search;
  std::error_code ec;
  if (!std::filesystem::is_directory(out_dir, ec)) return search;
  std::vector<int64_t> steps;
  for (const std::string& name : file_names(out_dir))
    if (const int64_t step = model_file_step(name); step > 0) steps.push_back(step);
  std::sort(steps.rbegin(), steps.rend());

  for (const int64_t step : steps) {
    ResumePoint point;
    point.step = step;
    point.model_path = model_checkpoint_path(out_dir, step);
    point.state_path = training_state_path(out_dir, step);
    const std::string model_name = std::filesystem::path(point.model_path).filename().string();
    if (!file_exists(point.state_path)) {
      search.notes.push_back(str_cat(point.model_path, " has no training state (",
                                     point.state_path, " is missing): skipped"));
      continue;
    }
    const auto reject = [&](const std::string& why) {
      search.notes.push_back(str_cat("checkpoint of step ", step, " skipped: ", why));
      ++search.rejected;
    };
    try {
      point.state = read_training_state(point.state_path);
    } catch (const Error& e) {
      reject(e.what());
      continue;
    }
    if (point.state.step != step) {
      reject(str_cat(point.state_path, " records step ", point.state.step, ", not ", step));
      continue;
    }
    if (point.state.model_file != model_name) {
      reject(str_cat(point.state_path, " belongs to the model file ", point.state.model_file,
                     ", not ", model_name));
      continue;
    }
    try {
      point.model = read_model_checkpoint(point.model_path);
    } catch (const Error& e) {
      reject(e.what());
      continue;
    }
    if (point.model.digest != point.state.model_digest) {
      reject(str_cat(point.model_path, " (", point.model.digest.bytes, " bytes, hash ",
                     point.model.digest.hash, ") is not the file ", point.state_path,
                     " was saved with (", point.state.model_digest.bytes, " bytes, hash ",
                     point.state.model_digest.hash,
                     "): it is corrupted or was written by another run"));
      continue;
    }
    search.point = std::move(point);
    return search;
  }
  return search;
}

void check_resume_compatible(const TrainConfig& config, const ResumePoint& point) {
  if (point.model.config != config.model_config) {
    GPT2_FAIL(point.model_path, ": cannot resume: the checkpoint's model is ",
              point.model.config.describe(), " but this run's --model ", config.model_name,
              " is ", config.model_config.describe());
  }
  const auto expect = [&](const char* what, int64_t saved, int64_t now) {
    if (saved != now)
      GPT2_FAIL(point.state_path, ": cannot resume: it was written with ", what, " ", saved,
                ", this run has ", what, " ", now);
  };
  // First, as the total batch's default follows it: the data order (windows dealt in groups
  // of B*world) and the AdamW state's sharding depend on the world size.
  if (point.state.world_size != config.world_size)
    GPT2_FAIL(point.state_path, ": cannot resume: it was written by a job of world size ",
              point.state.world_size, " and this job has world size ", config.world_size,
              ": the data order (windows dealt to ranks in groups of B*world) would not "
              "continue. Resume with ", point.state.world_size, " rank(s) (mpirun -np ",
              point.state.world_size, "), or start a new run from the model with --model ",
              point.model_path, " (AdamW moments, step and data position start afresh)");
  expect("--batch-size", point.state.batch_size, config.batch_size);
  expect("--seq-len", point.state.seq_len, config.seq_len);
  expect("--total-batch-size", point.state.total_batch_size, config.total_batch_size);
  expect("--seed", point.state.seed, static_cast<int64_t>(config.seed));
  const auto num_params = static_cast<int64_t>(ParameterLayout::for_config(config.model_config).total);
  expect("parameter count", point.state.num_parameters, num_params);
  GPT2_CHECK(static_cast<int64_t>(point.model.params.size()) == num_params);
  GPT2_CHECK(static_cast<int64_t>(point.state.adam_m.size()) == num_params &&
             static_cast<int64_t>(point.state.adam_v.size()) == num_params);
}

int truncate_metrics(const std::string& path, int64_t max_step) {
  if (!file_exists(path)) return 0;
  std::istringstream lines(read_file_text(path));
  std::string kept;
  int kept_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    const Json object = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!object.is_object()) continue;  // includes a line torn by a crash (a parse error)
    const auto step = object.find("step");
    if (step == object.end() || !step->is_number_integer() || step->get<int64_t>() > max_step)
      continue;
    kept += line + "\n";
    ++kept_lines;
  }
  AtomicFileWriter writer(path);
  writer.write(kept.data(), kept.size());
  writer.commit();
  return kept_lines;
}

}  // namespace gpt2
