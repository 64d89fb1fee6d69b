/**
 * @file attention_kind.h
 * @brief What the user chooses about attention, shared by the models and the GPU dispatch.
 *
 * AttentionKind is the algorithm (--attn): naive materializes the T x T probabilities, flash
 * tiles them away. FlashKernelChoice picks among the GPU's flash kernels (--attn-kernel): auto
 * takes the fastest that supports the device and shape (Hopper on sm_90 with bf16, else the
 * portable one); portable and hopper force one (for tests, benchmarks and comparisons). The CPU
 * backend has one kernel per algorithm and ignores the choice.
 */
#pragma once

namespace gpt2 {

enum class AttentionKind { kNaive, kFlash };
enum class FlashKernelChoice { kAuto, kPortable, kHopper };

inline const char* to_string(FlashKernelChoice choice) {
  switch (choice) {
    case FlashKernelChoice::kAuto: return "auto";
    case FlashKernelChoice::kPortable: return "portable";
    case FlashKernelChoice::kHopper: return "hopper";
  }
  return "unknown";
}

}  // namespace gpt2
