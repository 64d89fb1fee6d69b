/**
 * @file cuda_model_graph.cu
 * @brief CudaModel<T_>'s training forward + backward, launched or replayed as a CUDA graph.
 *
 * With options.cuda_graphs, one graph per kind of micro-batch: its loss scale and, data
 * parallel, whether it gathers the parameters first and ends the reductions. The first call of a
 * kind runs eagerly (lazy module loading, cuBLASLt's algorithm choices, NCCL's connections), the
 * second captures, later ones replay: the buffers, shapes, loss scale and collectives are fixed,
 * so a replay is the same work as the eager calls. A capture that fails warns once, and the
 * model goes on launch by launch from the state the capture started in.
 */
#include <algorithm>
#include <cstdio>
#include <string>

#include "model/cuda_model_impl.cuh"

namespace gpt2::cuda_model_detail {

template <typename T_>
float CudaModel<T_>::forward_backward(const int* inputs, const int* targets, float loss_scale) {
  queue_forward_backward(inputs, targets, loss_scale);
  const float loss = read_step_scalars(kTrainingScalars).last_mean_loss;  // synchronizes
  sample_memory();
  return loss;
}

template <typename T_>
void CudaModel<T_>::queue_forward_backward(const int* inputs, const int* targets,
                                           float loss_scale) {
  check_training("forward_backward");
  GPT2_CHECK(targets != nullptr);
  if (dp_ && (dp_->launched_any() || grads_reduced_))
    GPT2_FAIL("forward_backward after the step's gradients began their reduction (the last "
              "micro-batch came before it): call zero_grad to start the next step");
  gen_length_ = -1;  // ends a generation session (model.h)
  upload_tokens(inputs, targets, options_.batch_size, attention_.T);  // this rank's rows
  enqueue_forward_backward(loss_scale);
}

template <typename T_>
void CudaModel<T_>::launch_forward_backward(float loss_scale, bool gather, bool armed) {
  const int B = options_.batch_size, T = attention_.T;
  if (gather) dp_->launch_parameter_gather();  // the forward waits for it layer by layer
  fp8_pass_ = fp8_ != nullptr;  // the FP8 GEMMs in this forward and backward only
  struct ResetOnExit {
    bool& flag;
    ~ResetOnExit() { flag = false; }
  } reset{fp8_pass_};
  forward(B, T);
  backward(loss_scale);
  if (armed) dp_->finish_reduction();  // joins the collectives' stream back (graph capture)
  gpu::mean_loss_accumulate(step_scalars(kTrainingScalars), buf<float>(kLosses),
                            static_cast<int64_t>(B) * T, ctx_->stream(), loss_count(B, T));
}

template <typename T_>
void CudaModel<T_>::enqueue_forward_backward(float loss_scale) {
  cudaStream_t stream = ctx_->stream();
  refresh_fp8_weights();  // outside the graph: once per optimizer step, not per micro-batch
  const bool gather = dp_ && dp_->gather_pending();
  const bool armed = dp_ && dp_->armed();
  if (!use_graphs_) {
    launch_forward_backward(loss_scale, gather, armed);
    return;
  }
  auto found = std::find_if(graphs_.begin(), graphs_.end(), [&](const StepGraph& g) {
    return g.loss_scale == loss_scale && g.gather == gather && g.armed == armed;
  });
  if (found == graphs_.end()) {
    StepGraph fresh;
    fresh.loss_scale = loss_scale;
    fresh.gather = gather;
    fresh.armed = armed;
    graphs_.push_back(fresh);
    found = graphs_.end() - 1;
  }
  StepGraph& step_graph = *found;
  if (!step_graph.ran_eagerly) {
    launch_forward_backward(loss_scale, gather, armed);
    step_graph.ran_eagerly = true;
    return;
  }
  if (step_graph.exec == nullptr) {
    // Every launch (and collective) of the micro-batch is recorded, not run; the buffers,
    // shapes, loss scale and collectives are fixed, so replaying the graph is the same work as
    // the eager calls.
    GPT2_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    if (dp_) dp_->begin_capture();
    cudaGraph_t graph = nullptr;
    std::string failure;
    try {
      launch_forward_backward(loss_scale, gather, armed);
    } catch (const Error& error) {
      failure = error.what();
    }
    if (dp_) step_graph.spans = dp_->end_capture();
    const cudaError_t captured = cudaStreamEndCapture(stream, &graph);
    if (failure.empty() && captured != cudaSuccess) failure = cudaGetErrorString(captured);
    if (failure.empty()) {
      const cudaError_t instantiated = cudaGraphInstantiate(&step_graph.exec, graph, 0);
      if (instantiated != cudaSuccess) failure = cudaGetErrorString(instantiated);
    }
    if (graph != nullptr) GPT2_CUDA_CHECK(cudaGraphDestroy(graph));
    if (!failure.empty()) {
      // Nothing of the capture ran: say why once, and go on launch by launch from the state
      // the capture started in.
      (void)cudaGetLastError();
      step_graph.exec = nullptr;
      use_graphs_ = false;
      std::fprintf(stderr, "warning: CUDA graph capture of the training step failed (%s); the "
                   "step runs launch by launch\n", failure.c_str());
      if (dp_) dp_->restart_micro_batch(gather, armed);
      launch_forward_backward(loss_scale, gather, armed);
      return;
    }
  }
  GPT2_CUDA_CHECK(cudaGraphLaunch(step_graph.exec, stream));
  if (dp_) dp_->replayed(gather, armed, step_graph.spans);
}

template class CudaModel<float>;
template class CudaModel<bf16>;

}  // namespace gpt2::cuda_model_detail
