/**
 * @file gemm_bench.cpp
 * @brief gpt2-gemm-bench: a transformer block's four dense layers (qkv, attention projection,
 *        fc, fc projection) in bf16 and in FP8, timed with CUDA events in one run (issue 22).
 *
 * For each width C (--widths; GPT-2 small, medium, large, XL are 768, 1024, 1280, 1600) and
 * M = --tokens rows, each layer (OC, IC) is timed as the trainer runs it:
 *  - bf16: matmul_forward (bias in the epilogue), matmul_backward (dinp and dweight, no dbias);
 *  - FP8 (E4M3 activations and weights, E5M2 gradients, per-tensor scales, fp32 accumulation,
 *    bf16 outputs): the forward Y = X W^T, dgrad dX = dY W (W^T's copy), wgrad
 *    dW = dY^T X (dY^T's and X^T's copies), and the casts that make the operands: X and dY
 *    each cast once in both orders (fp8_cast_transpose; the weights' copies are made once per
 *    optimizer step and not counted).
 * Median of --repeats runs of --burst calls after --warmup (and --warmup-ms). FLOPs 2 M OC IC
 * per GEMM. The summary per width: the block's four layers, bf16 against FP8 with and without
 * the casts. Never asserts; prints a table and writes CSV (--csv).
 */
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cxxopts.hpp>

#include "base/bf16.h"
#include "base/command_line.h"
#include "base/error.h"
#include "base/file_io.h"
#include "base/rng.h"
#include "bench/gpu_timing.h"
#include "kernels/cpu/fp8.h"
#include "kernels/gpu/context.cuh"
#include "kernels/gpu/fp8_cast.cuh"
#include "kernels/gpu/matmul.cuh"
#include "kernels/gpu/matmul_fp8.cuh"

namespace gpt2 {
namespace {

using bench::Buffer;
using bf16 = __nv_bfloat16;
using cpu::Fp8Format;

constexpr int kScalars = 8;

/// A bf16 tensor of random normal values times `scale`, on the device.
void fill_random(const Buffer& buffer, size_t n, double scale, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> host(n);
  for (auto& v : host) v = float_to_bf16_bits(static_cast<float>(scale * rng.normal()));
  GPT2_CUDA_CHECK(cudaMemcpy(buffer.ptr, host.data(), n * 2, cudaMemcpyHostToDevice));
}

struct LayerTimes {
  double bf16_forward = 0, bf16_backward = 0;
  double fp8_forward = 0, fp8_dgrad = 0, fp8_wgrad = 0, cast_input = 0, cast_grad = 0;
  // The fused and accumulating forms the trainer runs (fc: GELU; fcproj: DGELU; every wgrad +=).
  double fp8_forward_gelu = 0, fp8_dgrad_dgelu = 0, fp8_wgrad_accumulate = 0;
  double bf16_total() const { return bf16_forward + bf16_backward; }
  double fp8_gemms() const { return fp8_forward + fp8_dgrad + fp8_wgrad; }
  double casts() const { return cast_input + cast_grad; }
};

struct Timer {
  bench::TimingPlan plan;
  cudaStream_t stream;
  template <typename F>
  double operator()(F&& launch) const {
    return bench::median_ms([&](int) { launch(); }, plan, stream);
  }
};

/// One dense layer out (M, OC) = in (M, IC) W^T: its bf16 and FP8 GEMMs and casts, timed.
LayerTimes time_layer(int M, int OC, int IC, const Timer& timer, const gpu::Context& ctx) {
  const size_t m = size_t(M);
  Buffer x(m * IC * 2), w(size_t(OC) * IC * 2), bias(size_t(OC) * 2), dy(m * OC * 2);
  Buffer y(m * OC * 2), dx(m * IC * 2), dw(size_t(OC) * IC * 2);
  fill_random(x, m * IC, 1.0, 1);
  fill_random(w, size_t(OC) * IC, 0.02, 2);
  fill_random(bias, OC, 0.02, 3);
  fill_random(dy, m * OC, 1e-4, 4);
  Buffer x8(m * IC), x8t(m * IC), w8(size_t(OC) * IC), w8t(size_t(OC) * IC), dy8(m * OC),
      dy8t(m * OC), scalars(kScalars * 4 * sizeof(float));
  // Scales of x, w and dy (1, 1, 2^14 for the small gradients), their inverses, two amaxes;
  // each on its own 16 bytes (cuBLASLt reads the inverses only there).
  const float values[kScalars] = {1.f, 1.f, 16384.f, 1.f, 1.f, 1.f / 16384.f, 0.f, 0.f};
  std::vector<float> host_scalars(kScalars * 4, 0.f);
  for (int i = 0; i < kScalars; ++i) host_scalars[size_t(i) * 4] = values[i];
  GPT2_CUDA_CHECK(cudaMemcpy(scalars.ptr, host_scalars.data(), host_scalars.size() * 4,
                             cudaMemcpyHostToDevice));
  const float* base = scalars.as<float>();
  auto s = [&](int i) { return base + 4 * i; };
  float* amax = scalars.as<float>() + 4 * 6;
  const cudaStream_t stream = ctx.stream();
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  gpu::fp8_cast_transpose(w.as<bf16>(), OC, IC, s(1), e4, w8.as<uint8_t>(), w8t.as<uint8_t>(),
                          amax, stream);
  auto cast_input = [&] {
    gpu::fp8_cast_transpose(x.as<bf16>(), M, IC, s(0), e4, x8.as<uint8_t>(), x8t.as<uint8_t>(),
                            amax, stream);
  };
  auto cast_grad = [&] {
    gpu::fp8_cast_transpose(dy.as<bf16>(), M, OC, s(2), e5, dy8.as<uint8_t>(),
                            dy8t.as<uint8_t>(), amax + 4, stream);
  };
  cast_input();
  cast_grad();
  const gpu::Fp8Operand x_op{x8.as<uint8_t>(), e4, s(3)}, x_t{x8t.as<uint8_t>(), e4, s(3)};
  const gpu::Fp8Operand w_op{w8.as<uint8_t>(), e4, s(4)}, w_t{w8t.as<uint8_t>(), e4, s(4)};
  const gpu::Fp8Operand dy_op{dy8.as<uint8_t>(), e5, s(5)}, dy_t{dy8t.as<uint8_t>(), e5, s(5)};

  LayerTimes t;
  t.bf16_forward = timer([&] {
    gpu::matmul_forward(y.as<bf16>(), x.as<bf16>(), w.as<bf16>(), bias.as<bf16>(), 1, M, IC, OC,
                        ctx);
  });
  t.bf16_backward = timer([&] {
    gpu::matmul_backward<bf16>(dx.as<bf16>(), dw.as<bf16>(), nullptr, dy.as<bf16>(),
                               x.as<bf16>(), w.as<bf16>(), 1, M, IC, OC, nullptr, ctx);
  });
  t.fp8_forward = timer([&] { gpu::matmul_fp8(y.as<bf16>(), x_op, w_op, bias.as<bf16>(), M, OC,
                                              IC, ctx); });
  t.fp8_dgrad = timer([&] { gpu::matmul_fp8(dx.as<bf16>(), dy_op, w_t, nullptr, M, IC, OC, ctx); });
  t.fp8_wgrad = timer([&] { gpu::matmul_fp8(dw.as<bf16>(), dy_t, x_t, nullptr, OC, IC, M, ctx); });
  {
    gpu::Fp8Epilogue gelu;
    gelu.bias = bias.as<bf16>();
    gelu.gelu_aux = dy.as<bf16>();  // (M, OC) scratch: dy's codes are cast already
    t.fp8_forward_gelu = timer([&] {
      GPT2_CHECK(gpu::try_matmul_fp8(y.as<bf16>(), x_op, w_op, M, OC, IC, gelu, ctx));
    });
    gpu::Fp8Epilogue dgelu;
    dgelu.dgelu_aux = x.as<bf16>();  // (M, IC) pre-GELU values
    t.fp8_dgrad_dgelu = timer([&] {
      GPT2_CHECK(gpu::try_matmul_fp8(dx.as<bf16>(), dy_op, w_t, M, IC, OC, dgelu, ctx));
    });
    t.fp8_wgrad_accumulate = timer(
        [&] { gpu::matmul_fp8(dw.as<bf16>(), dy_t, x_t, nullptr, OC, IC, M, ctx, true); });
  }
  t.cast_input = timer(cast_input);
  t.cast_grad = timer(cast_grad);
  GPT2_CUDA_CHECK(cudaStreamSynchronize(stream));
  return t;
}

cxxopts::Options gemm_command_line() {
  cxxopts::Options cli("gpt2-gemm-bench",
                       "Time a transformer block's dense layers in bf16 and FP8 (forward, dgrad, "
                       "wgrad, and the FP8 casts) with CUDA events; median of repeated runs.");
  cli.add_options()
      ("widths", "comma-separated C (768: d12, 1024: medium, 1280: large, 1600: XL)", cxxopts::value<std::string>()->default_value("768,1024,1280"))
      ("tokens", "rows M = B * T", cxxopts::value<int>()->default_value("16384"));
  bench::add_timing_options(cli, 5, 20, "out/gemm_bench.csv");
  return cli;
}

int gemm_main(int argc, char** argv) {
  cxxopts::Options cli = gemm_command_line();
  const cxxopts::ParseResult args = parse_tool_options(cli, argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", cli.help().c_str());
    return 0;
  }
  const std::vector<int> widths =
      parse_positive_int_list("widths", args["widths"].as<std::string>());
  const int M = args["tokens"].as<int>();
  const bench::TimingPlan plan = bench::timing_plan(args);
  if (M < 16 || M % 16 != 0)
    GPT2_USAGE_FAIL("need --tokens a positive multiple of 16 (got ", M, ")");
  for (int C : widths)
    if (C < 16 || C % 16 != 0) GPT2_USAGE_FAIL("--widths must be multiples of 16 (got ", C, ")");
  const std::string csv_path = args["csv"].as<std::string>();
  check_output_path("--csv", csv_path);
  gpu::Context ctx;
  const Timer timer{plan, ctx.stream()};
  std::printf("gpt2-gemm-bench on %s: M=%d, %s; ms per call\n", ctx.device_name().c_str(), M,
              bench::describe(plan).c_str());
  std::printf("%5s %-7s %5s %5s | %8s %8s | %8s %8s %8s | %8s %8s | %8s %8s %8s | %7s %7s\n",
              "C", "layer", "OC", "IC", "bf16 fwd", "bf16 bwd", "fp8 fwd", "fp8 dgr", "fp8 wgr",
              "cast x", "cast dy", "fwd gelu", "dgr dgelu", "wgr +=", "bf16 TF", "fp8 TF");
  std::ostringstream csv;
  csv << "device,width,layer,tokens,out_features,in_features,bf16_forward_ms,bf16_backward_ms,"
         "fp8_forward_ms,fp8_dgrad_ms,fp8_wgrad_ms,cast_input_ms,cast_grad_ms,"
         "fp8_forward_gelu_ms,fp8_dgrad_dgelu_ms,fp8_wgrad_accumulate_ms\n";
  for (int C : widths) {
    struct Layer { const char* name; int OC, IC; };
    const Layer layers[] = {{"qkv", 3 * C, C}, {"attproj", C, C}, {"fc", 4 * C, C},
                            {"fcproj", C, 4 * C}};
    LayerTimes block;
    for (const Layer& layer : layers) {
      const LayerTimes t = time_layer(M, layer.OC, layer.IC, timer, ctx);
      const double flops = 6.0 * M * double(layer.OC) * layer.IC;
      std::printf("%5d %-7s %5d %5d | %8.3f %8.3f | %8.3f %8.3f %8.3f | %8.3f %8.3f | %8.3f %8.3f "
                  "%8.3f | %7.0f %7.0f\n", C, layer.name, layer.OC, layer.IC, t.bf16_forward,
                  t.bf16_backward, t.fp8_forward, t.fp8_dgrad, t.fp8_wgrad, t.cast_input,
                  t.cast_grad, t.fp8_forward_gelu, t.fp8_dgrad_dgelu, t.fp8_wgrad_accumulate,
                  flops / (t.bf16_total() * 1e9), flops / (t.fp8_gemms() * 1e9));
      csv << '"' << ctx.device_name() << "\"," << C << ',' << layer.name << ',' << M << ','
          << layer.OC << ',' << layer.IC << ',' << t.bf16_forward << ',' << t.bf16_backward << ','
          << t.fp8_forward << ',' << t.fp8_dgrad << ',' << t.fp8_wgrad << ',' << t.cast_input
          << ',' << t.cast_grad << ',' << t.fp8_forward_gelu << ',' << t.fp8_dgrad_dgelu << ','
          << t.fp8_wgrad_accumulate << '\n';
      block.bf16_forward += t.bf16_forward;
      block.bf16_backward += t.bf16_backward;
      block.fp8_forward += t.fp8_forward;
      block.fp8_dgrad += t.fp8_dgrad;
      block.fp8_wgrad += t.fp8_wgrad;
      block.cast_input += t.cast_input;
      block.cast_grad += t.cast_grad;
    }
    std::printf("%5d block: bf16 %.3f ms, fp8 GEMMs %.3f ms (%.2fx), with casts %.3f ms (%.2fx)\n",
                C, block.bf16_total(), block.fp8_gemms(), block.bf16_total() / block.fp8_gemms(),
                block.fp8_gemms() + block.casts(),
                block.bf16_total() / (block.fp8_gemms() + block.casts()));
    std::fflush(stdout);
  }
  write_text_file(csv_path, csv.str());
  std::printf("wrote %s\n", csv_path.c_str());
  return 0;
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  return gpt2::run_tool_main("gpt2-gemm-bench", [&] { return gpt2::gemm_main(argc, argv); });
}
