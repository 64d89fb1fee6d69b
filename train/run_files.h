/**
 * @file run_files.h
 * @brief The files of a run in --out: checkpoint names, finding where to resume, metrics cut.
 *
 * A checkpoint at step N is a pair written in this order: OUT/model_%08d.bin (llm.c fp32)
 * then OUT/state_%08d.bin (optimizer moments, loader position, sampling RNG, and the name, size
 * and hash of the model file it belongs to). Each write is atomic, so a crash between the two
 * leaves a model without its state. find_resume_point() takes the highest N whose pair
 * verifies: both files present and reading cleanly (the state's own hash), the state naming
 * this model file and step, and the model file hashing to what the state recorded. Every newer
 * candidate it passes over is described, with the reason, in `notes`; `rejected` counts those
 * that were present but did not verify (corrupt or mixed pairs), as opposed to incomplete ones.
 * The run holds an advisory lock on OUT/gpt2-train.lock (flock, released by the kernel when the
 * process ends, however it ends) for its whole life, so a second run on the same OUT stops at
 * once, naming the first one's pid. Holding it, the run removes the temporary files
 * (<name>.tmp.<pid>, see AtomicFileWriter) whose writer is no longer running, and after each
 * checkpoint it removes the pairs older than the newest --keep-checkpoints ones.
 * On resume, metrics.jsonl is cut back to the lines with step <= N (atomically), so that the
 * continued run appends exactly the lines an uninterrupted run would have written; lines that
 * do not parse (a line torn by a crash) are dropped.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/checkpoint.h"

namespace gpt2 {

struct TrainConfig;

std::string model_checkpoint_path(const std::string& out_dir, int64_t step);
std::string training_state_path(const std::string& out_dir, int64_t step);
std::string metrics_path(const std::string& out_dir);
std::string summary_path(const std::string& out_dir);
std::string lock_path(const std::string& out_dir);  // OUT/gpt2-train.lock

/// Holds the advisory lock of out_dir (which must exist) until destroyed; the lock file holds
/// the holder's pid. Throws gpt2::Error "<out_dir> is in use by another gpt2-train (pid N) ..."
/// when another process (or another RunDirLock of this one) holds it.
class RunDirLock {
 public:
  explicit RunDirLock(const std::string& out_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

/// Removes out_dir's files named <name>.tmp.<pid> whose pid is not a running process (left by a
/// writer that was killed); returns the names removed. Call it holding the RunDirLock.
std::vector<std::string> remove_stale_temporaries(const std::string& out_dir);

/// After the checkpoint of step `step` is written: keeps the newest `keep` complete pairs at or
/// below that step and removes the model and state files of every older step (complete pair or
/// not); files of later steps (left by a run that is being redone from an earlier checkpoint) are
/// left alone, as is everything with keep == 0. Returns the steps whose files were removed.
std::vector<int64_t> prune_checkpoints(const std::string& out_dir, int64_t step, int keep);

struct ResumePoint {
  int64_t step = 0;
  std::string model_path;
  std::string state_path;
  ModelCheckpoint model;
  TrainingState state;
};

struct ResumeSearch {
  std::optional<ResumePoint> point;  // the latest pair that verifies; nullopt when none does
  std::vector<std::string> notes;    // one line per newer candidate passed over, with why
  int rejected = 0;                  // candidates present in full that did not verify
};

/// Searches out_dir (which may not exist: nothing found).
ResumeSearch find_resume_point(const std::string& out_dir);

/// Throws gpt2::Error naming the setting, the checkpoint's value and this run's value when the
/// checkpoint cannot continue this run bit for bit (model config, B, T, total batch, seed,
/// world size, parameter count).
void check_resume_compatible(const TrainConfig& config, const ResumePoint& point);

/// Keeps the lines of metrics.jsonl with step <= max_step (atomic rewrite). Returns how many
/// lines were kept. A missing file is left missing (0 lines).
int truncate_metrics(const std::string& path, int64_t max_step);

}  // namespace gpt2
