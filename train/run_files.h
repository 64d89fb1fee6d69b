/**
 * @file run_files.h
 * @brief The files of a run in --out: checkpoint names and writing, finding where to resume,
 *        the run's identity, metrics cut.
 *
 * The names of the checkpoint files and of run.json are model/run_folder.h's (gpt2-generate reads
 * them too). A checkpoint at step N is a pair written in this order: OUT/model_%08d.bin (llm.c
 * fp32) then OUT/state_%08d.bin (optimizer moments, loader position, sampling RNG, and the name,
 * size and hash of the model file it belongs to). Each write is atomic, so a crash between the two
 * leaves a model without its state. find_resume_point() takes the highest N whose pair verifies:
 * both files present and reading cleanly (the state's own hash), the state naming this model file
 * and step, and the model file hashing to what the state recorded. Every newer candidate it passes
 * over is described, with the reason, in `notes`; `rejected` counts those that were present but did
 * not verify (corrupt or mixed pairs), as opposed to incomplete ones. A run has an identity: a
 * random 64-bit run id, drawn when it starts from scratch, kept by every resume, recorded in each
 * training state and in OUT/run.json (the run id and the run's settings), which names the run that
 * last used OUT. find_resume_point() takes only that run's pairs (a pair of another run is passed
 * over, saying so); a state without a run id (version 2) counts as that run's, and without run.json
 * (a folder of an older version, or pairs copied in by hand) every pair is a candidate.
 * The run holds an advisory lock on OUT/gpt2-train.lock (flock, released by the kernel when the
 * process ends, however it ends) for its whole life, so a second run on the same OUT stops at
 * once, naming the first one's pid. Holding it, the run removes the temporary files of its own
 * files (<run file>.tmp.<pid>, see AtomicFileWriter) whose writer is no longer running, and
 * after each checkpoint it removes the pairs older than the newest --keep-checkpoints ones.
 * On resume, metrics.jsonl is cut back to the lines with step <= N (atomically), so that the
 * continued run appends exactly the lines an uninterrupted run would have written; lines that
 * do not parse (a line torn by a crash) are dropped.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/rng.h"
#include "data/dataloader.h"
#include "model/checkpoint.h"
#include "model/run_folder.h"
#include "parallel/communicator.h"
#include "train/run_record.h"
#include "train/training_state.h"

namespace gpt2 {

class Model;
struct TrainConfig;

std::string metrics_path(const std::string& out_dir);
std::string summary_path(const std::string& out_dir);
std::string lock_path(const std::string& out_dir);  // OUT/gpt2-train.lock

/// Whether a file name is one a run writes or removes in OUT: metrics.jsonl, summary.json,
/// run.json, config.json (run_record.h), loss.svg (loss_plot.h), gpt2-train.lock,
/// model_<digits>.bin, state_<digits>.bin.
bool is_run_file_name(const std::string& name);

/// A fresh run id: 64 random bits from the system (std::random_device), never 0.
uint64_t new_run_id();
/// 16 lowercase hex digits.
std::string format_run_id(uint64_t run_id);

/// Writes OUT/run.json atomically: {"run_id": "<16 hex digits>", then the run's settings}.
void write_run_record(const std::string& out_dir, uint64_t run_id, const TrainConfig& config);
/// The run id OUT/run.json records; nullopt when OUT has no run.json. Throws gpt2::Error naming
/// the file and the field when it is there but unreadable.
std::optional<uint64_t> read_run_record_id(const std::string& out_dir);

/// Removes every checkpoint file of OUT (model_<digits>.bin, state_<digits>.bin); returns how
/// many (--overwrite).
int remove_checkpoint_files(const std::string& out_dir);

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

/// Removes out_dir's files named <name>.tmp.<pid>, <name> a run file (is_run_file_name), whose
/// pid is not a running process (left by a writer that was killed); returns the names removed.
/// Other files, such as notes.tmp.20240101, are left alone. Call it holding the RunDirLock.
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

/// Searches out_dir (which may not exist: nothing found) for a pair of run_id (see the file
/// comment); nullopt takes any run's.
ResumeSearch find_resume_point(const std::string& out_dir,
                               std::optional<uint64_t> run_id = std::nullopt);

/// The settings of config as a training state records them.
TrainingSettings training_settings(const TrainConfig& config);

/// Throws gpt2::Error naming the setting, the checkpoint's value and this run's value when the
/// checkpoint cannot continue this run bit for bit: model config, B, T, total batch, seed,
/// world size, parameter count, and (states of version 3) the learning rate of any step to come
/// (--lr, --warmup-steps, --lr-schedule, and --steps and --final-lr-frac unless the schedule is
/// constant), --weight-decay, --grad-clip and --on-nonfinite.
void check_resume_compatible(const TrainConfig& config, const ResumePoint& point);

/// Keeps the lines of metrics.jsonl with step <= max_step (atomic rewrite). Returns how many
/// lines were kept. A missing file is left missing (0 lines).
int truncate_metrics(const std::string& path, int64_t max_step);

/// Where the run stands besides its model, optimizer and data position: what a checkpoint
/// records so that a resumed run is the same run and stops where it would have.
struct RunStanding {
  uint64_t run_id = 0;       // rank 0's (the other ranks write nothing)
  int skipped_in_a_row = 0;  // consecutive steps without an update (--on-nonfinite skip-step)
  int skipped_total = 0;     // updates skipped in the run
};

/// The pair of step `step` in config.out_dir: the model's parameters and a training state of
/// the loader's position, the sampling RNG and the standing; then the pairs beyond
/// --keep-checkpoints removed. Refuses (gpt2::Error, the previous pair kept) a parameter or
/// moment that is not finite. Collective (the optimizer state of a ZeRO-1 run is gathered from
/// every rank): every rank calls it, rank 0 writes, and the ranks leave it together.
void write_checkpoint(const TrainConfig& config, Model& model, int step,
                      const DataLoader& train_loader, const Rng& sample_rng,
                      const RunStanding& standing, Communicator& comm);

/// Rank 0, before anything is written: what --resume continues, and who this run is.
struct RunStart {
  std::optional<ResumePoint> resume_point;  // --resume found a pair of the run to continue
  uint64_t run_id = 0;                       // that run's, or a new one
  bool remove_earlier_checkpoints = false;   // a new run in an --out of checkpoints (--overwrite)
};

/// The resume point is the newest verified pair of the run that last used --out (run.json): a
/// pair of another run is never continued. A new run refuses an --out holding checkpoints
/// (gpt2::Error) unless --overwrite; they are removed in claim_out_dir. Prints "resume: ..."
/// lines.
RunStart find_run_start(const TrainConfig& config);

/// Rank 0, once the input is checked and --out exists and is locked: --out becomes this run's
/// (run.json, config.json with the data files; a new run removes an earlier run's summary and
/// loss plot, and with --overwrite its checkpoints).
void claim_out_dir(const TrainConfig& config, const RunStart& start, const RunDataFiles& files);

}  // namespace gpt2
