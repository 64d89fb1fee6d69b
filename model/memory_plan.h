/**
 * @file memory_plan.h
 * @brief What a model will allocate, computed before allocating, printed by the trainer.
 *
 * Items are grouped: parameters, gradients, optimizer state, activations, attention buffers,
 * workspace, and, for the CPU, whose peak is the whole process's, host memory outside the model
 * (added by the trainer). A backend builds its plan from the options (the trainer prints it
 * before building the model), checks it against the free memory and only then allocates, each
 * buffer by its plan item; when something does not fit it throws gpt2::Error naming the
 * buffer, the bytes it needs and the bytes free.
 */
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gpt2 {

struct MemoryItem {
  std::string group;  // "parameters", "gradients", "optimizer", "activations", "attention",
                      // "workspace", "host"
  std::string name;   // buffer name, e.g. "attention probabilities (L,B,NH,T,T)"
  size_t bytes = 0;
};

struct MemoryPlan {
  std::vector<MemoryItem> items;

  void add(const std::string& group, const std::string& name, size_t bytes);
  size_t total() const;
  size_t group_total(const std::string& group) const;
  /// Table by group with human-readable sizes, then the total.
  std::string to_string(const std::string& title) const;
};

/// This process's resident memory now (VmRSS of /proc/self/status); 0 when unknown.
size_t resident_memory_bytes();
/// The host's memory available to a new allocation (MemAvailable of /proc/meminfo); 0 when
/// unknown.
size_t available_host_memory_bytes();

/// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(size_t bytes);

}  // namespace gpt2
