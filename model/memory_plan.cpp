#include "model/memory_plan.h"

#include <cstdio>
#include <cstdlib>

#include "base/file_io.h"

#include "base/error.h"

namespace gpt2 {

void MemoryPlan::add(const std::string& group, const std::string& name, size_t bytes) {
  items.push_back({group, name, bytes});
}

size_t MemoryPlan::total() const {
  size_t sum = 0;
  for (const auto& item : items) sum += item.bytes;
  return sum;
}

size_t MemoryPlan::group_total(const std::string& group) const {
  size_t sum = 0;
  for (const auto& item : items)
    if (item.group == group) sum += item.bytes;
  return sum;
}

std::string format_bytes(size_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (size_t(1) << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  } else if (bytes >= (size_t(1) << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  } else if (bytes >= (size_t(1) << 10)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / (1 << 10));
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  }
  return buf;
}

std::string MemoryPlan::to_string(const std::string& title) const {
  static const char* kGroups[] = {"parameters", "gradients", "optimizer", "activations",
                                  "attention",  "workspace", "host"};
  std::string out = title + "\n";
  char line[256];
  for (const char* group : kGroups) {
    const size_t sum = group_total(group);
    if (sum == 0) continue;
    std::snprintf(line, sizeof line, "  %-12s %12s\n", group, format_bytes(sum).c_str());
    out += line;
    for (const auto& item : items) {
      if (item.group != group || item.bytes == 0) continue;
      std::snprintf(line, sizeof line, "      %-44s %12s\n", item.name.c_str(),
                    format_bytes(item.bytes).c_str());
      out += line;
    }
  }
  std::snprintf(line, sizeof line, "  %-12s %12s", "total", format_bytes(total()).c_str());
  out += line;
  return out;
}

namespace {

// The kB value of the line "field: N kB" of a /proc file, in bytes; 0 when there is none.
size_t proc_kib_field(const char* path, const std::string& field) {
  std::string text;
  try {
    text = read_file_text(path);
  } catch (const Error&) {
    return 0;
  }
  const std::string key = "\n" + field + ":";
  const size_t at = ("\n" + text).find(key);
  if (at == std::string::npos) return 0;
  return static_cast<size_t>(std::strtoull(text.c_str() + at + field.size() + 1, nullptr, 10)) *
         1024;
}

}  // namespace

size_t resident_memory_bytes() { return proc_kib_field("/proc/self/status", "VmRSS"); }

size_t available_host_memory_bytes() { return proc_kib_field("/proc/meminfo", "MemAvailable"); }

}  // namespace gpt2
