/**
 * @file thread_communicator.h
 * @brief Ranks as threads of the test process, for tests of the data-parallel models without
 *        MPI: ThreadCommunicator implements the Communicator contract over a shared board.
 *
 * Each collective is a rendezvous of every rank: each posts its buffer, all wait; each computes
 * its result from every rank's posted buffer into its own scratch, adding in rank order; all
 * wait again (so no buffer is overwritten while another rank reads it, which makes the in-place
 * forms safe); each copies its result out. Sums are therefore the same bits on every rank, and
 * an all-reduce and a reduce-scatter of the same data add in the same order. split() gives
 * each color's ranks a board of their own (kept by the parent board). abort() fails the test
 * and ends the process.
 */
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "parallel/communicator.h"

namespace gpt2::testing {

class ThreadBoard {
 public:
  explicit ThreadBoard(int world) : world_(world), posted_(static_cast<size_t>(world)) {}
  int world() const { return world_; }

  void wait_all() {
    std::unique_lock<std::mutex> lock(mutex_);
    const long generation = generation_;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
    } else {
      all_arrived_.wait(lock, [&] { return generation_ != generation; });
    }
  }
  void post(int rank, const void* buffer) { posted_[static_cast<size_t>(rank)] = buffer; }
  const void* posted(int rank) const { return posted_[static_cast<size_t>(rank)]; }
  /// The board of the group (split number `split`, `color`), made by its first caller.
  ThreadBoard& group_board(long split, int color, int world) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unique_ptr<ThreadBoard>& board = groups_[{split, color}];
    if (!board) board = std::make_unique<ThreadBoard>(world);
    return *board;
  }

 private:
  int world_;
  std::vector<const void*> posted_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  long generation_ = 0;
  std::map<std::pair<long, int>, std::unique_ptr<ThreadBoard>> groups_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadBoard& board, int rank) : board_(board), rank_(rank) {}

  const char* backend() const override { return "threads"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  int rank() const override { return rank_; }
  int world_size() const override { return board_.world(); }
  int local_rank() const override { return rank_; }
  int local_size() const override { return board_.world(); }

  void all_reduce(float* data, size_t count, ReduceOp op) override { reduce(data, count, op); }
  void all_reduce(double* data, size_t count, ReduceOp op) override { reduce(data, count, op); }

  void reduce_scatter_sum(const float* send, float* recv, size_t recv_count) override {
    std::vector<float> result(recv_count, 0.0f);
    exchange(send, [&] {
      for (int r = 0; r < world_size(); ++r) {
        const float* from = static_cast<const float*>(board_.posted(r)) + rank_ * recv_count;
        for (size_t i = 0; i < recv_count; ++i) result[i] += from[i];
      }
    });
    std::copy(result.begin(), result.end(), recv);
    record(recv_count * world_size() * sizeof(float), 0.0);
  }

  void all_reduce_sum_bf16(void* data, size_t count) override {
    std::vector<uint16_t> result(count);
    exchange(data, [&] { sum_bf16(result.data(), 0, count); });
    std::memcpy(data, result.data(), count * sizeof(uint16_t));
    record(count * sizeof(uint16_t), 0.0);
  }
  void reduce_scatter_sum_bf16(const void* send, void* recv, size_t recv_count) override {
    std::vector<uint16_t> result(recv_count);
    exchange(send, [&] { sum_bf16(result.data(), rank_ * recv_count, recv_count); });
    std::memcpy(recv, result.data(), recv_count * sizeof(uint16_t));
    record(recv_count * world_size() * sizeof(uint16_t), 0.0);
  }
  void all_gather(const float* send, float* recv, size_t send_count) override {
    std::vector<float> result(send_count * world_size());
    exchange(send, [&] {
      for (int r = 0; r < world_size(); ++r) {
        const float* from = static_cast<const float*>(board_.posted(r));
        std::copy(from, from + send_count, result.begin() + r * send_count);
      }
    });
    std::copy(result.begin(), result.end(), recv);
    record(send_count * sizeof(float), 0.0);
  }

  void all_gather_bytes(const void* send, void* recv, size_t send_bytes) override {
    std::vector<char> result(send_bytes * world_size());
    exchange(send, [&] {
      for (int r = 0; r < world_size(); ++r)
        std::memcpy(result.data() + r * send_bytes, board_.posted(r), send_bytes);
    });
    std::memcpy(recv, result.data(), result.size());
    record(send_bytes, 0.0);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    std::vector<char> result(bytes);
    exchange(data, [&] { std::memcpy(result.data(), board_.posted(root), bytes); });
    std::memcpy(data, result.data(), bytes);
    record(rank_ == root ? bytes : 0, 0.0);
  }

  void barrier() override {
    board_.wait_all();
    record(0, 0.0);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    const int mine[2] = {color, key};
    std::vector<int> all(2 * static_cast<size_t>(world_size()));
    exchange(mine, [&] {
      for (int r = 0; r < world_size(); ++r)
        std::memcpy(all.data() + 2 * r, board_.posted(r), sizeof mine);
    });
    int group_rank = 0, group_size = 0;
    for (int r = 0; r < world_size(); ++r) {
      if (all[2 * r] != color) continue;
      ++group_size;
      const int other_key = all[2 * r + 1];
      if (other_key < key || (other_key == key && r < rank_)) ++group_rank;
    }
    ThreadBoard& group = board_.group_board(splits_++, color, group_size);
    record(0, 0.0);
    return std::make_unique<ThreadCommunicator>(group, group_rank);
  }

  [[noreturn]] void abort(int code) override {
    ADD_FAILURE() << "rank " << rank_ << " aborted with code " << code;
    std::abort();
  }

 private:
  // Post, wait for every rank, compute from the posted buffers, wait again.
  void exchange(const void* mine, const std::function<void()>& compute) {
    board_.post(rank_, mine);
    board_.wait_all();
    compute();
    board_.wait_all();
  }

  // result[i] = the posted bf16 buffers' elements [first, first + count) added in rank order,
  // each addition rounded to bf16 (add_bf16).
  void sum_bf16(uint16_t* result, size_t first, size_t count) const {
    for (int r = 0; r < world_size(); ++r) {
      const uint16_t* from = static_cast<const uint16_t*>(board_.posted(r)) + first;
      for (size_t i = 0; i < count; ++i)
        result[i] = r == 0 ? from[i] : add_bf16(result[i], from[i]);
    }
  }
  template <typename T>
  void reduce(T* data, size_t count, ReduceOp op) {
    std::vector<T> result(count);
    exchange(data, [&] {
      for (int r = 0; r < world_size(); ++r) {
        const T* from = static_cast<const T*>(board_.posted(r));
        for (size_t i = 0; i < count; ++i)
          result[i] = r == 0 ? from[i]
                      : op == ReduceOp::kSum ? result[i] + from[i]
                                             : std::max(result[i], from[i]);
      }
    });
    std::copy(result.begin(), result.end(), data);
    record(count * sizeof(T), 0.0);
  }

  ThreadBoard& board_;
  int rank_;
  long splits_ = 0;  // this rank's splits so far: the same count on every rank of the board
};

/// Runs body(rank, communicator) on `world` threads at once; a body that throws fails the test
/// (its rank named) after every thread ended.
inline void run_ranks(int world, const std::function<void(int, Communicator&)>& body) {
  ThreadBoard board(world);
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      ThreadCommunicator comm(board, rank);
      try {
        body(rank, comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < world; ++rank)
    EXPECT_TRUE(errors[static_cast<size_t>(rank)].empty())
        << "rank " << rank << ": " << errors[static_cast<size_t>(rank)];
}

}  // namespace gpt2::testing
