#include "model/run_folder.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "base/error.h"

namespace gpt2 {
namespace {

std::string step_file(const std::string& out_dir, const char* prefix, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "%s_%08lld.bin", prefix, static_cast<long long>(step));
  return (std::filesystem::path(out_dir) / name).string();
}

// Step N of a file named <prefix>_<digits>.bin, or -1.
int64_t step_file_step(const std::string& name, const std::string& prefix) {
  const std::string suffix = ".bin";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), is_digit)) return -1;
  return std::stoll(digits);
}

}  // namespace

std::string model_checkpoint_path(const std::string& out_dir, int64_t step) {
  return step_file(out_dir, "model", step);
}
std::string training_state_path(const std::string& out_dir, int64_t step) {
  return step_file(out_dir, "state", step);
}
std::string run_record_path(const std::string& out_dir) {
  return (std::filesystem::path(out_dir) / "run.json").string();
}

int64_t model_checkpoint_step(const std::string& name) { return step_file_step(name, "model_"); }
int64_t training_state_step(const std::string& name) { return step_file_step(name, "state_"); }

std::vector<std::string> training_state_files(const std::string& out_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!std::filesystem::is_directory(out_dir, ec)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && training_state_step(name) >= 0) names.push_back(name);
  }
  if (ec) GPT2_FAIL(out_dir, ": cannot list the folder: ", ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace gpt2
