// Placeholder until the trainer lands (issue 2, train/): refuses to run.
#include <cstdio>
int main() {
  std::fprintf(stderr, "gpt2-train: not built yet\n");
  return 1;
}
