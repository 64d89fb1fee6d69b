/**
 * @file attention_bench.cpp
 * @brief gpt2-attention-bench: naive vs flash attention kernels, forward and backward, on the GPU.
 *
 * For each T: random bf16 q, k, v and dO (B, NH, HS fixed by the options); one validation run
 * (flash against naive, relative L2 of out and dqkv, printed); then --warmup untimed runs and
 * --repeats timed runs of each of naive forward, naive backward, flash forward, flash backward,
 * each timed alone with CUDA events; the median is reported. Never asserts.
 * FLOPs (causal, model FLOPs: the masked half of S is not counted, recomputation is not counted):
 *   forward  = 2 matmuls x 2 B NH T^2 HS / 2 = 2 B NH T^2 HS
 *   backward = 5 matmuls' worth (dV, dP, dQ, dK + the forward's QK^T recomputed in flash,
 *              counted as in FlashAttention-2: 2.5 x forward)
 * Naive runs are skipped (marked OOM) when its two T x T buffers do not fit in free memory.
 * Writes a table to stdout and CSV to --csv (default out/attention_bench.csv).
 */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cxxopts.hpp>

#include "data/file_io.h"
#include "kernels/common/error.h"
#include "kernels/common/rng.h"
#include "kernels/gpu/attention.cuh"
#include "kernels/gpu/context.cuh"

namespace gpt2 {
namespace {

using bf16 = __nv_bfloat16;

struct Buffer {
  explicit Buffer(size_t bytes) { GPT2_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 1))); }
  ~Buffer() { GPT2_CUDA_CHECK_NOTHROW(cudaFree(ptr)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  void* ptr = nullptr;
};

uint16_t to_bf16_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

float from_bf16_bits(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

void fill_random(const Buffer& buffer, size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> host(n);
  for (auto& v : host) v = to_bf16_bits(static_cast<float>(rng.normal()));
  GPT2_CUDA_CHECK(cudaMemcpy(buffer.ptr, host.data(), n * 2, cudaMemcpyHostToDevice));
}

std::vector<float> download_bf16(const Buffer& buffer, size_t n) {
  std::vector<uint16_t> host(n);
  GPT2_CUDA_CHECK(cudaMemcpy(host.data(), buffer.ptr, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = from_bf16_bits(host[i]);
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

template <typename F>
double median_ms(F&& launch, int warmup, int repeats, cudaStream_t stream) {
  cudaEvent_t start, stop;
  GPT2_CUDA_CHECK(cudaEventCreate(&start));
  GPT2_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    GPT2_CUDA_CHECK(cudaEventRecord(start, stream));
    launch();
    GPT2_CUDA_CHECK(cudaEventRecord(stop, stream));
    GPT2_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    GPT2_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  GPT2_CUDA_CHECK(cudaEventDestroy(start));
  GPT2_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int bench_main(int argc, char** argv) {
  cxxopts::Options cli("gpt2-attention-bench",
                       "Time naive and flash attention kernels (bf16, causal), forward and "
                       "backward, with CUDA events; median of repeated runs after warm-up.");
  cli.add_options()
      ("seq-lens", "comma-separated T", cxxopts::value<std::string>()->default_value("1024,4096,16384"))
      ("tokens", "B = max(1, tokens / T)", cxxopts::value<int>()->default_value("16384"))
      ("heads", "NH", cxxopts::value<int>()->default_value("12"))
      ("head-size", "HS (64 or 128)", cxxopts::value<int>()->default_value("64"))
      ("warmup", "untimed runs", cxxopts::value<int>()->default_value("3"))
      ("repeats", "timed runs", cxxopts::value<int>()->default_value("10"))
      ("csv", "CSV output", cxxopts::value<std::string>()->default_value("out/attention_bench.csv"))
      ("h,help", "print this help");
  const auto args = cli.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", cli.help().c_str());
    return 0;
  }
  const int NH = args["heads"].as<int>(), HS = args["head-size"].as<int>();
  const int warmup = args["warmup"].as<int>(), repeats = args["repeats"].as<int>();
  if (NH < 1 || (HS != 64 && HS != 128) || repeats < 1 || warmup < 0)
    GPT2_USAGE_FAIL("need --heads >= 1, --head-size 64 or 128, --repeats >= 1, --warmup >= 0");
  const int C = NH * HS;
  gpu::Context ctx;
  cudaStream_t stream = ctx.stream();
  std::printf("gpt2-attention-bench on %s: bf16, causal, NH=%d HS=%d, median of %d runs after %d\n",
              ctx.device_name().c_str(), NH, HS, repeats, warmup);
  std::printf("%7s %3s | %9s %9s | %9s %9s | %8s %8s | %8s %8s | %9s %9s\n", "T", "B",
              "naive fwd", "naive bwd", "flash fwd", "flash bwd", "flash fwd", "flash bwd",
              "naive fwd", "naive bwd", "err out", "err dqkv");
  std::printf("%7s %3s | %9s %9s | %9s %9s | %8s %8s | %8s %8s |\n", "", "", "ms", "ms", "ms",
              "ms", "TFLOP/s", "TFLOP/s", "TFLOP/s", "TFLOP/s");
  std::ostringstream csv;
  csv << "seq_len,batch,heads,head_size,naive_fwd_ms,naive_bwd_ms,flash_fwd_ms,flash_bwd_ms,"
         "flash_fwd_tflops,flash_bwd_tflops,naive_fwd_tflops,naive_bwd_tflops,rel_err_out,"
         "rel_err_dqkv\n";
  std::stringstream lens(args["seq-lens"].as<std::string>());
  std::string item;
  while (std::getline(lens, item, ',')) {
    const int T = std::stoi(item);
    const int B = std::max(1, args["tokens"].as<int>() / T);
    const size_t n_out = size_t(B) * T * C;
    const double fwd_flops = 2.0 * B * NH * double(T) * T * HS;
    const double bwd_flops = 2.5 * fwd_flops;
    Buffer qkv(3 * n_out * 2), dout(n_out * 2), out(n_out * 2), dqkv(3 * n_out * 2);
    Buffer flash_out(n_out * 2), flash_dqkv(3 * n_out * 2);
    Buffer lse(size_t(B) * NH * T * 4);
    Buffer flash_scratch(gpu::attention_flash_scratch_floats(B, T, C, NH) * 4);
    fill_random(qkv, 3 * n_out, 1);
    fill_random(dout, n_out, 2);

    const double flash_fwd = median_ms([&] {
      gpu::attention_flash_forward(flash_out.as<bf16>(), lse.as<float>(), qkv.as<bf16>(), B, T, C,
                                   NH, stream);
    }, warmup, repeats, stream);
    const double flash_bwd = median_ms([&] {
      gpu::attention_flash_backward(flash_dqkv.as<bf16>(), dout.as<bf16>(), qkv.as<bf16>(),
                                    flash_out.as<bf16>(), lse.as<float>(), B, T, C, NH,
                                    flash_scratch.as<float>(), stream);
    }, warmup, repeats, stream);

    double naive_fwd = NAN, naive_bwd = NAN, err_out = NAN, err_dqkv = NAN;
    const size_t probs_bytes = size_t(B) * NH * size_t(T) * T * 2;
    const size_t scratch_bytes = gpu::attention_naive_scratch_elems(B, T, C, true) * 2;
    size_t free_bytes = 0, total_bytes = 0;
    GPT2_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (2 * probs_bytes + scratch_bytes + (size_t(1) << 30) < free_bytes) {
      Buffer probs(probs_bytes), dprobs(probs_bytes), scratch(scratch_bytes);
      naive_fwd = median_ms([&] {
        gpu::attention_naive_forward(out.as<bf16>(), probs.as<bf16>(), qkv.as<bf16>(), B, T, C, NH,
                                     scratch.as<bf16>(), ctx);
      }, warmup, repeats, stream);
      naive_bwd = median_ms([&] {
        gpu::attention_naive_backward(dqkv.as<bf16>(), dout.as<bf16>(), qkv.as<bf16>(),
                                      probs.as<bf16>(), B, T, C, NH, scratch.as<bf16>(),
                                      dprobs.as<bf16>(), ctx);
      }, warmup, repeats, stream);
      GPT2_CUDA_CHECK(cudaStreamSynchronize(stream));
      err_out = rel_l2(download_bf16(flash_out, n_out), download_bf16(out, n_out));
      err_dqkv = rel_l2(download_bf16(flash_dqkv, 3 * n_out), download_bf16(dqkv, 3 * n_out));
    }
    auto tflops = [](double flops, double ms) { return flops / (ms * 1e-3) / 1e12; };
    std::printf("%7d %3d | %9.3f %9.3f | %9.3f %9.3f | %8.1f %8.1f | %8.1f %8.1f | %9.2e %9.2e\n", T,
                B, naive_fwd, naive_bwd, flash_fwd, flash_bwd, tflops(fwd_flops, flash_fwd),
                tflops(bwd_flops, flash_bwd), tflops(fwd_flops, naive_fwd),
                tflops(bwd_flops, naive_bwd), err_out, err_dqkv);
    csv << T << ',' << B << ',' << NH << ',' << HS << ',' << naive_fwd << ',' << naive_bwd << ','
        << flash_fwd << ',' << flash_bwd << ',' << tflops(fwd_flops, flash_fwd) << ','
        << tflops(bwd_flops, flash_bwd) << ',' << tflops(fwd_flops, naive_fwd) << ','
        << tflops(bwd_flops, naive_bwd) << ',' << err_out << ',' << err_dqkv << '\n';
  }
  const std::string csv_path = args["csv"].as<std::string>();
  const size_t slash = csv_path.rfind('/');
  if (slash != std::string::npos) make_directories(csv_path.substr(0, slash));
  AtomicFileWriter writer(csv_path);
  const std::string text = csv.str();
  writer.write(text.data(), text.size());
  writer.commit();
  std::printf("(naive columns: NaN = its T x T buffers do not fit; err = flash vs naive, rel L2)\n"
              "wrote %s\n", csv_path.c_str());
  return 0;
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  try {
    return gpt2::bench_main(argc, argv);
  } catch (const gpt2::UsageError& e) {
    std::fprintf(stderr, "gpt2-attention-bench: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2-attention-bench: error: %s\n", e.what());
    return 1;
  }
}
