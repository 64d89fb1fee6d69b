/**
 * @file signals.h
 * @brief SIGTERM and SIGINT as a request to stop between steps, so a preempted run keeps its work.
 *
 * While a StopSignals object lives, the first SIGTERM or SIGINT is only recorded (received()
 * returns it) and announced with one line on stderr; the trainer finishes the step in progress,
 * writes a checkpoint when checkpointing is on, prints what it saved and exits with 128 + the
 * signal (143 for SIGTERM, 130 for SIGINT), as a cluster's preemption (SIGTERM, then SIGKILL
 * after a grace period) expects. A second SIGTERM or SIGINT exits at once with 128 + that signal:
 * nothing more is saved, and a file being written stays a temporary that the next run removes.
 * The handlers only touch a sig_atomic_t, write(2) and _exit(2) (async-signal-safe). Destroying
 * the object restores the handlers it replaced; one object at a time.
 */
#pragma once

namespace gpt2 {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  /// The first SIGTERM or SIGINT received since construction, or 0.
  static int received();
};

/// "SIGTERM", "SIGINT", or "signal N".
const char* signal_name(int signal_number);

}  // namespace gpt2
