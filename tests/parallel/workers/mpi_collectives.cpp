// gpt2-test-mpi-collectives: run under mpirun by tests/parallel/communicator_test.cpp. Every rank
// checks every collective of the job's communicator (make_job_communicator: MPI under mpirun)
// against values it computes alone, and prints one line "rank R of W: ok" or the failures;
// the exit code is 0 when every check of this rank held.
//   gpt2-test-mpi-collectives               the checks
//   gpt2-test-mpi-collectives abort CODE    rank 1 calls abort(CODE) while the others wait in a
//                                           barrier (the job must end, with CODE)
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "base/error.h"
#include "base/rng.h"
#include "parallel/communicator.h"

namespace {

int failures = 0;

#define CHECK_THAT(cond, ...)                                                    \
  do {                                                                           \
    if (!(cond)) {                                                               \
      ++failures;                                                                \
      std::fprintf(stderr, "check failed at line %d: %s (%s)\n", __LINE__, #cond, \
                   gpt2::str_cat(__VA_ARGS__).c_str());                          \
    }                                                                            \
  } while (0)

constexpr size_t kBlock = 257;  // elements per rank of the scattered and gathered tests

/// float and double all-reduces of exactly representable values.
void check_all_reduce(gpt2::Communicator& comm) {
  using gpt2::ReduceOp;
  const int rank = comm.rank(), world = comm.world_size();
  const size_t n = 1000 + 3;  // not a multiple of anything in particular
  // all_reduce, sums and maxima of exactly representable values, float and double.
  std::vector<float> f(n);
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) {
    f[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7));
    d[i] = 0.5 * (rank + 1) * static_cast<double>(i);
  }
  comm.all_reduce(f.data(), n, ReduceOp::kSum);
  comm.all_reduce(d.data(), n, ReduceOp::kSum);
  const int triangle = world * (world + 1) / 2;
  for (size_t i = 0; i < n; ++i) {
    CHECK_THAT(f[i] == static_cast<float>(triangle * static_cast<int>(i % 7)), "f[", i, "]=", f[i]);
    CHECK_THAT(d[i] == 0.5 * triangle * static_cast<double>(i), "d[", i, "]=", d[i]);
  }
  for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(10 * rank) - static_cast<float>(i);
  comm.all_reduce(f.data(), n, ReduceOp::kMax);
  for (size_t i = 0; i < n; ++i)
    CHECK_THAT(f[i] == static_cast<float>(10 * (world - 1)) - static_cast<float>(i), "max f[", i, "]");
}

/// fp32 reduce-scatter, out of place and in place.
void check_reduce_scatter(gpt2::Communicator& comm) {
  using gpt2::ReduceOp;
  const int rank = comm.rank(), world = comm.world_size();
  const size_t block = kBlock;
  // reduce_scatter_sum, out of place and in place: send[j] = rank + j.
  std::vector<float> send(block * world), recv(block, -1.0f);
  for (size_t j = 0; j < send.size(); ++j) send[j] = static_cast<float>(rank + static_cast<int>(j));
  std::vector<float> in_place = send;
  comm.reduce_scatter_sum(send.data(), recv.data(), block);
  comm.reduce_scatter_sum(in_place.data(), in_place.data() + rank * block, block);
  for (size_t i = 0; i < block; ++i) {
    const float expected = static_cast<float>(world * static_cast<int>(rank * block + i) +
                                              world * (world - 1) / 2);
    CHECK_THAT(recv[i] == expected, "reduce_scatter recv[", i, "]=", recv[i], " != ", expected);
    CHECK_THAT(in_place[rank * block + i] == expected, "in place [", i, "]");
  }
}

/// bf16 all-reduce and reduce-scatter.
void check_bf16_sums(gpt2::Communicator& comm) {
  using gpt2::ReduceOp;
  const int rank = comm.rank(), world = comm.world_size();
  const size_t block = kBlock;
  // bf16 sums, all-reduce and reduce-scatter (out of place and in place), of values whose sums
  // over up to 8 ranks are exact in bf16 (so any grouping of the additions gives them):
  // 1 + rank/8 + (j % 8)/8.
  const auto half_value = [](int r, size_t j) {
    return 1.0f + static_cast<float>(r) / 8.0f + static_cast<float>(j % 8) / 8.0f;
  };
  std::vector<uint16_t> halves(block * world), halves_recv(block);
  for (size_t j = 0; j < halves.size(); ++j)
    halves[j] = gpt2::float_to_bf16_bits(half_value(rank, j));
  std::vector<uint16_t> halves_in_place = halves, halves_all = halves;
  comm.all_reduce_sum_bf16(halves_all.data(), halves_all.size());
  comm.reduce_scatter_sum_bf16(halves.data(), halves_recv.data(), block);
  comm.reduce_scatter_sum_bf16(halves_in_place.data(), halves_in_place.data() + rank * block,
                               block);
  const size_t own = static_cast<size_t>(rank) * block;
  for (size_t j = 0; j < halves.size(); ++j) {
    float sum = 0.0f;
    for (int r = 0; r < world; ++r) sum += half_value(r, j);
    const uint16_t expected = gpt2::float_to_bf16_bits(sum);
    CHECK_THAT(halves_all[j] == expected, "bf16 all_reduce [", j, "]");
    if (j >= own && j < own + block) {
      CHECK_THAT(halves_recv[j - own] == expected, "bf16 reduce_scatter [", j, "]");
      CHECK_THAT(halves_in_place[j] == expected, "bf16 reduce_scatter in place [", j, "]");
    }
  }
}

/// all_gather and all_gather_bytes.
void check_all_gather(gpt2::Communicator& comm) {
  using gpt2::ReduceOp;
  const int rank = comm.rank(), world = comm.world_size();
  const size_t block = kBlock;
  // all_gather, out of place and in place.
  std::vector<float> mine(block), gathered(block * world, -1.0f), gathered_in_place(block * world);
  for (size_t i = 0; i < block; ++i) mine[i] = static_cast<float>(1000 * rank + static_cast<int>(i));
  std::copy(mine.begin(), mine.end(), gathered_in_place.begin() + rank * block);
  comm.all_gather(mine.data(), gathered.data(), block);
  comm.all_gather(gathered_in_place.data() + rank * block, gathered_in_place.data(), block);
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < block; ++i) {
      const float expected = static_cast<float>(1000 * r + static_cast<int>(i));
      CHECK_THAT(gathered[r * block + i] == expected, "all_gather [", r, ",", i, "]");
      CHECK_THAT(gathered_in_place[r * block + i] == expected, "in place [", r, ",", i, "]");
    }

  // all_gather_bytes: an odd byte count (3 bf16 values and a half), out of place and in place.
  constexpr size_t kBytes = 7;
  std::vector<unsigned char> my_bytes(kBytes), bytes(kBytes * world), bytes_in_place(kBytes * world);
  for (size_t i = 0; i < kBytes; ++i) my_bytes[i] = static_cast<unsigned char>(16 * rank + i);
  std::copy(my_bytes.begin(), my_bytes.end(), bytes_in_place.begin() + rank * kBytes);
  comm.all_gather_bytes(my_bytes.data(), bytes.data(), kBytes);
  comm.all_gather_bytes(bytes_in_place.data() + rank * kBytes, bytes_in_place.data(), kBytes);
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < kBytes; ++i) {
      const auto expected = static_cast<unsigned char>(16 * r + i);
      CHECK_THAT(bytes[r * kBytes + i] == expected, "all_gather_bytes [", r, ",", i, "]");
      CHECK_THAT(bytes_in_place[r * kBytes + i] == expected, "in place bytes [", r, ",", i, "]");
    }
}

/// broadcast, the bits of repeated sums, sum_in_rank_order.
void check_broadcast_and_sum_order(gpt2::Communicator& comm) {
  using gpt2::ReduceOp;
  const int rank = comm.rank(), world = comm.world_size();
  // broadcast from the last rank.
  char text[32] = {};
  if (rank == world - 1) std::snprintf(text, sizeof text, "from rank %d", rank);
  comm.broadcast(text, sizeof text, world - 1);
  CHECK_THAT(std::string(text) == "from rank " + std::to_string(world - 1), text);

  // Sums of random floats: the same bits on every rank, and again when repeated.
  gpt2::Rng rng(1234 + static_cast<uint64_t>(rank));
  std::vector<float> noise(100003);
  for (float& x : noise) x = static_cast<float>(rng.uniform() - 0.5);
  std::vector<float> first = noise, second = noise;
  comm.all_reduce(first.data(), first.size(), ReduceOp::kSum);
  comm.all_reduce(second.data(), second.size(), ReduceOp::kSum);
  CHECK_THAT(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0,
             "a repeated all-reduce gave other bits");
  std::vector<float> rank0 = first;
  comm.broadcast(rank0.data(), rank0.size() * sizeof(float), 0);
  CHECK_THAT(std::memcmp(first.data(), rank0.data(), first.size() * sizeof(float)) == 0,
             "the all-reduce gave this rank other bits than rank 0");

  // sum_in_rank_order: rank 0's value first, then rank 1's, ...
  const double value = 0.1 * (rank + 1) + 1e-17 * rank;
  double expected = 0.0;
  for (int r = 0; r < world; ++r) expected += 0.1 * (r + 1) + 1e-17 * r;
  const double got = gpt2::sum_in_rank_order(comm, value);
  CHECK_THAT(got == expected, "sum_in_rank_order ", got, " != ", expected);
}

/// split into groups, and a sum inside a group.
void check_split(gpt2::Communicator& comm) {
  using gpt2::ReduceOp;
  const int rank = comm.rank(), world = comm.world_size();
  // split: groups of consecutive ranks (rank / 2), numbered in reverse by key; a sum inside a
  // group adds only its ranks.
  {
    const int color = rank / 2;
    std::unique_ptr<gpt2::Communicator> group = comm.split(color, -rank);
    const int group_size = std::min(2, world - 2 * color);
    CHECK_THAT(group->world_size() == group_size, "group size ", group->world_size());
    CHECK_THAT(group->rank() == (group_size - 1) - (rank - 2 * color), "group rank ",
               group->rank());
    float group_value = static_cast<float>(rank + 1);
    group->all_reduce(&group_value, 1, ReduceOp::kSum);
    float expected_sum = 0.0f;
    for (int r = 2 * color; r < 2 * color + group_size; ++r) expected_sum += float(r + 1);
    CHECK_THAT(group_value == expected_sum, "group sum ", group_value, " != ", expected_sum);
    CHECK_THAT(std::string(group->backend()) == "mpi", group->backend());
  }
}

void check_collectives(gpt2::Communicator& comm) {
  const int rank = comm.rank(), world = comm.world_size();
  CHECK_THAT(std::string(comm.backend()) == "mpi", comm.backend());
  CHECK_THAT(world == std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")), world);
  CHECK_THAT(comm.local_size() == world && comm.local_rank() == rank, "one node: local ",
             comm.local_rank(), " of ", comm.local_size());

  check_all_reduce(comm);
  check_reduce_scatter(comm);
  check_bf16_sums(comm);
  check_all_gather(comm);
  check_broadcast_and_sum_order(comm);
  check_split(comm);
  comm.barrier();
  CHECK_THAT(comm.stats().calls == 19, "calls ", comm.stats().calls);
  CHECK_THAT(comm.stats().bytes > 0, "bytes ", comm.stats().bytes);
}

}  // namespace

int main(int argc, char** argv) {
  return gpt2::run_tool_main("gpt2-test-mpi-collectives", [&] {
    std::unique_ptr<gpt2::Communicator> comm = gpt2::make_job_communicator();
    if (argc == 3 && std::string(argv[1]) == "abort") {
      if (comm->rank() == 1) {
        std::fprintf(stderr, "rank 1: aborting the job\n");
        comm->abort(std::atoi(argv[2]));
      }
      comm->barrier();  // never completes: rank 1 does not come
      std::printf("rank %d: passed a barrier rank 1 never reached\n", comm->rank());
      return 3;
    }
    check_collectives(*comm);
    std::printf("rank %d of %d: %s\n", comm->rank(), comm->world_size(),
                failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
  });
}
