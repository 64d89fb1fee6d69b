/**
 * @file version.h
 * @brief Which code a binary was built from, as the files a run writes record it.
 *
 * build_version() is `git describe --always --dirty` of the source tree at build time (a commit
 * such as "67c6f5c", "-dirty" when the tree had uncommitted changes), or GPT2_COMMIT from the
 * build's environment when set (a copied tree whose git metadata is not its own), or "unknown"
 * outside a git checkout. base/version_info.cmake writes it at every build, and rewrites the
 * generated source only when the text changes, so an unchanged tree rebuilds nothing.
 */
#pragma once

namespace gpt2 {

const char* build_version();

}  // namespace gpt2
