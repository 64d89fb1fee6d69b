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
#include <random>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json.h"
#include "model/model.h"
#include "model/parameters.h"
#include "train/loss_plot.h"
#include "train/metrics.h"
#include "train/options.h"

namespace gpt2 {
namespace {

// The names of out_dir's regular files.
std::vector<std::string> file_names(const std::string& out_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(out_dir, ec))
    if (entry.is_regular_file()) names.push_back(entry.path().filename().string());
  if (ec) GPT2_FAIL(out_dir, ": cannot list the folder: ", ec.message());
  return names;
}

// The pid of a temporary file's name "<run file>.tmp.<pid>", or -1 (for any other name).
long temporary_file_pid(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0 || !is_run_file_name(name.substr(0, at))) return -1;
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

std::string metrics_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "metrics.jsonl").string();
}
std::string summary_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "summary.json").string();
}
std::string lock_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "gpt2-train.lock").string();
}
bool is_run_file_name(const std::string& name) {
  for (const char* fixed : {"metrics.jsonl", "summary.json", "run.json", "gpt2-train.lock",
                            "config.json", "loss.svg"})
    if (name == fixed) return true;
  return model_checkpoint_step(name) >= 0 || training_state_step(name) >= 0;
}

uint64_t new_run_id() {
  std::random_device entropy;  // the system's source (/dev/urandom or the CPU's)
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{entropy()} << 32) ^ entropy();
  return id;
}

std::string format_run_id(uint64_t run_id) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(run_id));
  return text;
}

void write_run_record(const std::string& out_dir, uint64_t run_id, const TrainConfig& config) {
  Json record = Json::object();
  record["run_id"] = format_run_id(run_id);
  record["model"] = config.model_name;
  record["model_config"] = config.model.config.describe();
  record["train_data"] = config.train_data.pattern;
  record["val_data"] = config.val_data.pattern;
  record["device"] = to_string(config.device);
  record["precision"] = to_string(config.model.precision);
  record["world_size"] = config.world_size;
  record["context_parallel"] = config.context_parallel;
  record["batch_size"] = config.model.batch_size;
  record["seq_len"] = config.model.seq_len;
  record["total_batch_size"] = config.total_batch_size;
  record["steps"] = config.steps;
  record["lr"] = json_float(config.lr_schedule.max_lr);
  record["warmup_steps"] = config.lr_schedule.warmup_steps;
  record["lr_schedule"] = to_string(config.lr_schedule.kind);
  record["final_lr_frac"] = json_float(config.lr_schedule.final_lr_frac);
  record["weight_decay"] = json_float(config.weight_decay);
  record["grad_clip"] = json_float(config.grad_clip);
  record["on_nonfinite"] = to_string(config.on_nonfinite);
  record["seed"] = config.seed;
  const std::string text = dump_json(record) + "\n";
  write_text_file(run_record_path(out_dir), text);
}

std::optional<uint64_t> read_run_record_id(const std::string& out_dir) {
  const std::string path = run_record_path(out_dir);
  if (!file_exists(path)) return std::nullopt;
  constexpr size_t kMaxRunRecordBytes = size_t{1} << 20;
  const Json record = parse_json(read_file_text(path, kMaxRunRecordBytes), path);
  const auto id = record.is_object() ? record.find("run_id") : record.end();
  const std::string text = id != record.end() && id->is_string() ? id->get<std::string>() : "";
  const bool hex = text.size() == 16 && text.find_first_not_of("0123456789abcdef") ==
                                            std::string::npos;
  if (!hex) GPT2_FAIL(path, ": field 'run_id' is not 16 hex digits");
  return std::stoull(text, nullptr, 16);
}

int remove_checkpoint_files(const std::string& out_dir) {
  int removed = 0;
  for (const std::string& name : file_names(out_dir)) {
    if (model_checkpoint_step(name) < 0 && training_state_step(name) < 0) continue;
    const std::string path = (std::filesystem::path(out_dir) / name).string();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      GPT2_FAIL(path, ": cannot remove this checkpoint file of the earlier run: ",
                std::strerror(errno));
    ++removed;
  }
  return removed;
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
    if (const int64_t s = model_checkpoint_step(name); s > 0 && s <= step) models.insert(s);
    if (const int64_t s = training_state_step(name); s > 0 && s <= step) states.insert(s);
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

ResumeSearch find_resume_point(const std::string& out_dir, std::optional<uint64_t> run_id) {
  ResumeSearch search;
  std::error_code ec;
  if (!std::filesystem::is_directory(out_dir, ec)) return search;
  std::vector<int64_t> steps;
  for (const std::string& name : file_names(out_dir))
    if (const int64_t step = model_checkpoint_step(name); step > 0) steps.push_back(step);
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
    if (run_id && point.state.run_id != 0 && point.state.run_id != *run_id) {
      // Not this run's: never continued, and not a reason to refuse (that run left the folder).
      search.notes.push_back(str_cat("checkpoint of step ", step, " skipped: ", point.state_path,
                                     " belongs to run ", format_run_id(point.state.run_id),
                                     ", not to run ", format_run_id(*run_id), ", which last used ",
                                     out_dir, " (", run_record_path(out_dir), ")"));
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

TrainingSettings training_settings(const TrainConfig& config) {
  TrainingSettings settings;
  settings.steps = config.steps;
  settings.max_lr = config.lr_schedule.max_lr;
  settings.warmup_steps = config.lr_schedule.warmup_steps;
  settings.lr_schedule = static_cast<int64_t>(config.lr_schedule.kind);
  settings.final_lr_frac = config.lr_schedule.final_lr_frac;
  settings.weight_decay = config.weight_decay;
  settings.grad_clip = config.grad_clip;
  settings.on_nonfinite = static_cast<int64_t>(config.on_nonfinite);
  settings.max_skipped_in_a_row = kMaxConsecutiveSkippedSteps;
  return settings;
}

namespace {

// The way on when a checkpoint cannot continue this command's run.
std::string new_run_hint(const ResumePoint& point) {
  return str_cat("start a new run from the model in another --out (--model ", point.model_path,
                 "; AdamW moments, step and data position start afresh)");
}

// The settings of a version 3 state against this run's: what the learning rate of a step to
// come, the update or the end of the run depends on must not change.
void check_same_settings(const TrainConfig& config, const ResumePoint& point) {
  if (!point.state.settings) return;  // version 2: not recorded
  const TrainingSettings& saved = *point.state.settings;
  const TrainingSettings now = training_settings(config);
  const auto refuse = [&](const char* option, const std::string& saved_value,
                          const std::string& now_value, const char* why) {
    GPT2_FAIL(point.state_path, ": cannot resume: the run has ", option, " ", saved_value,
              ", this command ", option, " ", now_value, " (", why, "); resume with ", option,
              " ", saved_value, ", or ", new_run_hint(point));
  };
  const auto check_float = [&](const char* option, float a, float b, const char* why) {
    if (std::memcmp(&a, &b, sizeof a) != 0) refuse(option, str_cat(a), str_cat(b), why);
  };
  const auto check_int = [&](const char* option, int64_t a, int64_t b, const char* why) {
    if (a != b) refuse(option, str_cat(a), str_cat(b), why);
  };
  const auto schedule_name = [](int64_t kind) {
    return std::string(to_string(static_cast<LrScheduleKind>(kind)));
  };
  const auto policy_name = [](int64_t policy) {
    return std::string(to_string(static_cast<NonFinitePolicy>(policy)));
  };
  const char* schedule = "the learning rate of the steps to come depends on it";
  if (saved.lr_schedule != now.lr_schedule)
    refuse("--lr-schedule", schedule_name(saved.lr_schedule), schedule_name(now.lr_schedule),
           schedule);
  check_float("--lr", saved.max_lr, now.max_lr, schedule);
  check_int("--warmup-steps", saved.warmup_steps, now.warmup_steps, schedule);
  // A constant schedule's rate depends on neither: such a run may be lengthened or shortened.
  if (saved.lr_schedule != static_cast<int64_t>(LrScheduleKind::kConstant)) {
    check_int("--steps", saved.steps, now.steps,
              "the decay of the learning rate spans them; a --lr-schedule constant run may "
              "change them");
    check_float("--final-lr-frac", saved.final_lr_frac, now.final_lr_frac, schedule);
  }
  check_float("--weight-decay", saved.weight_decay, now.weight_decay, "the update depends on it");
  check_float("--grad-clip", saved.grad_clip, now.grad_clip, "the update depends on it");
  if (saved.on_nonfinite != now.on_nonfinite)
    refuse("--on-nonfinite", policy_name(saved.on_nonfinite), policy_name(now.on_nonfinite),
           "it decides when the run stops");
  if (saved.max_skipped_in_a_row != now.max_skipped_in_a_row)
    GPT2_FAIL(point.state_path, ": cannot resume: the run stops after ", saved.max_skipped_in_a_row,
              " skipped updates in a row, this gpt2-train after ", now.max_skipped_in_a_row);
}

}  // namespace

void check_resume_compatible(const TrainConfig& config, const ResumePoint& point) {
  if (point.model.config != config.model.config) {
    GPT2_FAIL(point.model_path, ": cannot resume: the checkpoint's model is ",
              point.model.config.describe(), " but this run's --model ", config.model_name,
              " is ", config.model.config.describe());
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
              point.state.world_size, "), or ", new_run_hint(point));
  if (point.state.context_parallel != config.context_parallel)
    GPT2_FAIL(point.state_path, ": cannot resume: it was written with --context-parallel ",
              point.state.context_parallel, " and this run has --context-parallel ",
              config.context_parallel, ": the ranks would hold other positions of each "
              "sequence and the replicas other windows. Resume with --context-parallel ",
              point.state.context_parallel, ", or ", new_run_hint(point));
  expect("--batch-size", point.state.batch_size, config.model.batch_size);
  expect("--seq-len", point.state.seq_len, config.model.seq_len);
  expect("--total-batch-size", point.state.total_batch_size, config.total_batch_size);
  expect("--seed", point.state.seed, static_cast<int64_t>(config.seed));
  const auto num_params =
      static_cast<int64_t>(ParameterLayout::for_config(config.model.config).total);
  expect("parameter count", point.state.num_parameters, num_params);
  GPT2_CHECK(static_cast<int64_t>(point.model.params.size()) == num_params);
  GPT2_CHECK(static_cast<int64_t>(point.state.adam_m.size()) == num_params &&
             static_cast<int64_t>(point.state.adam_v.size()) == num_params);
  check_same_settings(config, point);
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
  write_text_file(path, kept);
  return kept_lines;
}

namespace {

// A checkpoint is only written when every value in it is finite: a NaN in a saved file would
// poison every run that resumes from it.
void check_finite(const std::vector<float>& values, const char* what, const ModelConfig& config,
                  int step) {
  const auto bad = std::find_if(values.begin(), values.end(),
                                [](float v) { return !std::isfinite(v); });
  if (bad == values.end()) return;
  const auto index = static_cast<size_t>(bad - values.begin());
  const ParameterLayout layout = ParameterLayout::for_config(config);
  int tensor = kNumParamTensors - 1;
  while (tensor > 0 && layout.offsets[tensor] > index) --tensor;
  GPT2_FAIL("step ", step, ": not writing a checkpoint: the ", what, " ",
            ParameterLayout::name(tensor), "[", index - layout.offsets[tensor], "] is ",
            printable(*bad), "; the previous checkpoint is kept");
}

// Rank 0: the pair of step `step` (state completed with its model file's name and hash), then
// the pruning of older pairs.
void write_checkpoint_pair(const TrainConfig& config, int step, const std::vector<float>& params,
                           TrainingState& state) {
  check_finite(params, "parameter", config.model.config, step);
  check_finite(state.adam_m, "AdamW m of", config.model.config, step);
  check_finite(state.adam_v, "AdamW v of", config.model.config, step);
  const std::string model_path = model_checkpoint_path(config.out_dir, step);
  state.model_digest = write_model_checkpoint(model_path, config.model.config, params.data());
  state.model_file = std::filesystem::path(model_path).filename().string();
  const std::string state_path = training_state_path(config.out_dir, step);
  write_training_state(state_path, state);
  std::printf("checkpoint: %s, %s\n", model_path.c_str(), state_path.c_str());
  for (const int64_t old_step : prune_checkpoints(config.out_dir, step, config.keep_checkpoints))
    std::printf("checkpoint: removed the files of step %lld (--keep-checkpoints %d)\n",
                static_cast<long long>(old_step), config.keep_checkpoints);
}

}  // namespace

// Collective (the optimizer state of a ZeRO-1 run is gathered from every rank): every rank
// calls it, rank 0 writes the pair. The ranks leave it together, so that the next step's time
// in collectives is not rank 0's write, waited for by the others.
void write_checkpoint(const TrainConfig& config, Model& model, int step,
                      const DataLoader& train_loader, const Rng& sample_rng,
                      const RunStanding& standing, Communicator& comm) {
  const size_t num_params = ParameterLayout::for_config(config.model.config).total;
  std::vector<float> params(num_params);
  model.get_parameters(params.data());

  TrainingState state;
  state.step = step;
  state.num_parameters = static_cast<int64_t>(num_params);
  state.batch_size = config.model.batch_size;
  state.seq_len = config.model.seq_len;
  state.total_batch_size = config.total_batch_size;
  state.seed = static_cast<int64_t>(config.seed);
  state.world_size = config.world_size;
  state.context_parallel = config.context_parallel;
  state.loader = train_loader.position();
  state.sample_rng = sample_rng.state();
  state.run_id = standing.run_id;
  state.skipped_in_a_row = standing.skipped_in_a_row;
  state.skipped_total = standing.skipped_total;
  state.settings = training_settings(config);
  state.adam_m.resize(num_params);
  state.adam_v.resize(num_params);
  model.get_optimizer_state(state.adam_m.data(), state.adam_v.data());
  state.precision_state = model.precision_state();
  if (config.rank == 0) write_checkpoint_pair(config, step, params, state);
  if (config.world_size > 1) comm.barrier();
}

// The resume point is the newest verified pair of the run that last used --out (run.json): a
// pair of another run is never continued. A new run refuses an --out holding checkpoints, whose
// steps its own would interleave with, unless --overwrite; they are removed in claim_out_dir.
RunStart find_run_start(const TrainConfig& config) {
  RunStart start;
  std::error_code ec;
  const bool out_exists = std::filesystem::is_directory(config.out_dir, ec);
  if (config.resume) {
    const std::optional<uint64_t> last_run =
        out_exists ? read_run_record_id(config.out_dir) : std::nullopt;
    ResumeSearch search = find_resume_point(config.out_dir, last_run);
    for (const std::string& note : search.notes) std::printf("resume: %s\n", note.c_str());
    start.resume_point = std::move(search.point);
    if (!start.resume_point && search.rejected > 0) {
      // Starting over would overwrite metrics.jsonl and, step by step, the checkpoints that
      // failed to verify: that is for the user to decide.
      GPT2_FAIL("--resume: none of the ", search.rejected, " checkpoint(s) in ", config.out_dir,
                " verifies (reasons above); not starting over on top of them. Move or delete "
                "them to start from scratch, or use another --out");
    }
    if (start.resume_point) {
      check_resume_compatible(config, *start.resume_point);
      // A version 2 state has no run id: the run continued from it gets one now.
      const uint64_t saved = start.resume_point->state.run_id;
      start.run_id = saved != 0 ? saved : new_run_id();
      return start;
    }
    std::printf("resume: no complete checkpoint%s in %s; starting from scratch\n",
                last_run ? str_cat(" of run ", format_run_id(*last_run)).c_str() : "",
                config.out_dir.c_str());
  }
  start.run_id = new_run_id();
  const std::vector<std::string> states = training_state_files(config.out_dir);
  if (states.empty()) return start;
  if (!config.overwrite) {
    GPT2_FAIL("--out ", config.out_dir, " holds the checkpoints of an earlier run (",
              states.size() == 1 ? states.front()
                                 : str_cat(states.size(), " training states, ", states.front(),
                                           " to ", states.back()),
              "): a new run there would mix its checkpoints with them. --resume continues "
              "that run; --overwrite removes them and starts a new one; or choose another --out");
  }
  start.remove_earlier_checkpoints = true;
  return start;
}

// Rank 0, once the input is checked and --out exists and is locked: --out becomes this run's.
// run.json names it and config.json records its resolved options (rewritten by a resume); a new
// run removes an earlier run's summary and loss plot (and, --overwrite, checkpoints).
void claim_out_dir(const TrainConfig& config, const RunStart& start, const RunDataFiles& files) {
  if (start.remove_earlier_checkpoints) {
    const int removed = remove_checkpoint_files(config.out_dir);
    std::printf("out: removed the %d checkpoint file(s) of the earlier run (--overwrite)\n",
                removed);
  }
  write_run_record(config.out_dir, start.run_id, config);
  write_config_record(config, start.run_id,
                      start.resume_point ? std::optional<int64_t>(start.resume_point->step)
                                         : std::nullopt,
                      files);
  if (!start.resume_point) {
    for (const std::string& earlier : {summary_path(config.out_dir),
                                       loss_plot_path(config.out_dir)})
      if (::unlink(earlier.c_str()) != 0 && errno != ENOENT)
        GPT2_FAIL(earlier, ": cannot remove the earlier run's file: ", std::strerror(errno));
  }
}

}  // namespace gpt2
