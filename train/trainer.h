/**
 * @file trainer.h
 * @brief gpt2-train's entry point and training loop.
 *
 * train_main() parses the command line, resolves it and runs run_training(); it is main()'s
 * whole body, so tests and tools can call it in-process. It returns the exit code: 0 on
 * success and for --help, 2 for gpt2::UsageError, 1 for any other error, after printing
 * "gpt2-train: error: <message>" to stderr.
 *
 * run_training() order (the phases of trainer.cpp's TrainingRun; the printing is
 * run_report.h, the checkpoint pairs and --out run_files.h), so that bad input fails before
 * anything is printed or written:
 *   the lock of --out when it exists (a second run on it stops here) and the removal of its
 *   stale temporary files -> tokenizer (only when sampling) -> data loaders -> resume point
 *   (--resume: the newest verified pair of the run that last used --out, run_files.h) and the
 *   run's identity (that run's id, or a new one; a new run refuses an --out holding
 *   checkpoints unless --overwrite) -> first batch of each loader (validates the first shards'
 *   tokens) -> configuration printout -> model and its memory plan -> parameters (resume
 *   point, checkpoint or init) -> --out (created and locked if new; --overwrite removes the
 *   earlier run's checkpoints, a new run its summary.json and loss.svg), run.json, config.json
 *   (run_record.h: every resolved option and the binary's version; a resume rewrites it),
 *   metrics.jsonl -> steps. A run that does not validate for want of --val-data says so on its
 *   first line (TrainConfig::validation_note).
 *   Per step: zero_grad, grad_accum_steps micro-batches of forward_backward with loss_scale
 *   1/grad_accum_steps, clip by the global norm, AdamW at lr = schedule(step - 1) unless the
 *   loss or the norm is not finite (--on-nonfinite); then validation, sampling, the metrics
 *   line, loss.svg after a validation (loss_plot.h), and the checkpoint, in that order (a
 *   checkpoint at step N therefore follows the metrics line of step N), and the removal of
 *   checkpoints beyond --keep-checkpoints. loss.svg is drawn again at the end of the run and
 *   at a signal's stop that saves the final checkpoint. The
 *   checkpoint records the run id and the skipped-update streak and total, which a resume
 *   restores, so a resumed run stops where the uninterrupted one would have. After a
 *   step during which SIGTERM or SIGINT arrived: a checkpoint of that step (when checkpointing
 *   is on and the step did not write one anyway), a line saying what was saved, and the return.
 *
 * Data parallel (a job of several ranks, started by mpirun or srun: parallel/communicator.h): every
 * rank runs the same loop on its own windows of the data (the loader deals them by rank) with
 * the same collectives in the same order. Rank 0 alone prints (the other ranks' stdout goes to
 * /dev/null; their errors still reach stderr), locks and writes --out (metrics, summary,
 * checkpoints), reads the resume point and samples; the starting parameters (and a resume
 * point's AdamW moments and position) are broadcast from it. Each rank's loss_scale is
 * 1/(grad_accum_steps * world); the model sums the gradients over the ranks, the loss and the
 * validation loss are summed in rank order, so every rank takes the same decisions (clipping,
 * a non-finite step). After each step the ranks agree (a max all-reduce) on a received signal,
 * so all stop after the same step, and on the largest memory and time in collectives, which the
 * step line shows. A checkpoint is collective (ZeRO-1 gathers the AdamW state to every rank)
 * and rank 0 writes it whole: the files are those of a single-process run. The ranks start step
 * 1 and leave each checkpoint together (a barrier), so rank 0's setup and writes are not counted
 * as the others' time in collectives. A rank that fails prints its error and calls the
 * communicator's abort(), which ends every rank of the job.
 */
#pragma once

#include "parallel/communicator.h"
#include "train/options.h"

namespace gpt2 {

int train_main(int argc, char** argv);

/// Returns the exit code: 0, or 128 + the signal when SIGTERM or SIGINT stopped the run between
/// two steps (train/signals.h). Throws gpt2::Error / gpt2::UsageError. comm: the job's
/// communicator (its rank and world size are config's); without it, one process.
int run_training(const TrainConfig& config, Communicator& comm);
int run_training(const TrainConfig& config);

}  // namespace gpt2
