/**
 * @file trainer.h
 * @brief gpt2-train's entry point and training loop.
 *
 * train_main() parses the command line, resolves it and runs run_training(); it is main()'s
 * whole body, so tests and tools can call it in-process. It returns the exit code: 0 on
 * success and for --help, 2 for gpt2::UsageError, 1 for any other error, after printing
 * "gpt2-train: error: <message>" to stderr.
 *
 * run_training() order, so that bad input fails before anything is printed or written:
 *   the lock of --out when it exists (a second run on it stops here) and the removal of its
 *   stale temporary files -> tokenizer (only when sampling) -> data loaders -> resume point
 *   (--resume) -> first batch of each loader (validates the first shards' tokens) ->
 *   configuration printout -> model and its memory plan -> parameters (resume point,
 *   checkpoint or init) -> --out (created and locked if new), metrics.jsonl -> steps.
 *   Per step: zero_grad, grad_accum_steps micro-batches of forward_backward with loss_scale
 *   1/grad_accum_steps, clip by the global norm, AdamW at lr = schedule(step - 1) unless the
 *   loss or the norm is not finite (--on-nonfinite); then validation, sampling, the metrics
 *   line and the checkpoint, in that order (a checkpoint at step N therefore follows the
 *   metrics line of step N), and the removal of checkpoints beyond --keep-checkpoints. After a
 *   step during which SIGTERM or SIGINT arrived: a checkpoint of that step (when checkpointing
 *   is on and the step did not write one anyway), a line saying what was saved, and the return.
 */
#pragma once

#include "train/options.h"

namespace gpt2 {

int train_main(int argc, char** argv);

/// Returns the exit code: 0, or 128 + the signal when SIGTERM or SIGINT stopped the run between
/// two steps (train/signals.h). Throws gpt2::Error / gpt2::UsageError.
int run_training(const TrainConfig& config);

}  // namespace gpt2
