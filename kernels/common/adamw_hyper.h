/**
 * @file adamw_hyper.h
 * @brief AdamW's hyperparameters, shared by the CPU and GPU updates (kernels/cpu/adamw.h,
 *        kernels/gpu/adamw.cuh) and the models' optimizer step.
 */
#pragma once

namespace gpt2 {

struct AdamWHyper {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

}  // namespace gpt2
