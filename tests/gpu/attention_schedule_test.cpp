// The Hopper attention kernels' work order (kernels/gpu/attention_schedule.h), on the CPU: every
// (index, head) once, groups contiguous and whole, indices in order within a group.
#include "kernels/gpu/attention_schedule.h"

#include <vector>

#include <gtest/gtest.h>

namespace gpt2::gpu::test {
namespace {

TEST(AttentionSchedule, EveryUnitOnceInHeadGroupsIndexByIndex) {
  struct Case {
    int per_head, BH, group_heads;
  };
  // Groups that divide BH, a smaller last group, one head per group, one group of all heads.
  for (const Case c : {Case{8, 192, 50}, Case{128, 12, 4}, Case{7, 5, 2}, Case{1, 9, 9},
                       Case{16, 10, 3}, Case{3, 7, 1}, Case{5, 6, 6}}) {
    SCOPED_TRACE(::testing::Message() << "per_head " << c.per_head << " BH " << c.BH
                                      << " group_heads " << c.group_heads);
    std::vector<int> seen(static_cast<size_t>(c.per_head) * c.BH, 0);
    int last_group = 0, last_index = 0;
    for (int w = 0; w < c.per_head * c.BH; ++w) {
      const HeadGroupItem item = head_group_item(w, c.per_head, c.group_heads, c.BH);
      ASSERT_GE(item.index, 0);
      ASSERT_LT(item.index, c.per_head);
      ASSERT_GE(item.bh, 0);
      ASSERT_LT(item.bh, c.BH);
      ++seen[static_cast<size_t>(item.bh) * c.per_head + item.index];
      const int group = item.bh / c.group_heads;
      ASSERT_GE(group, last_group) << "w " << w << ": groups are taken in order";
      if (group == last_group) {
        ASSERT_GE(item.index, last_index) << "w " << w << ": index k of every head before k + 1";
      }
      last_group = group;
      last_index = item.index;
    }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "unit " << i;
  }
}

TEST(AttentionSchedule, GroupsHoldWhatIsWantedWithinOneAndAllHeads) {
  EXPECT_EQ(schedule_group_heads(8, 192, 396), 50);     // ceil(396 / 8)
  EXPECT_EQ(schedule_group_heads(128, 12, 396), 4);     // ceil(396 / 128)
  EXPECT_EQ(schedule_group_heads(128, 12, 100000), 12);  // at most every head
  EXPECT_EQ(schedule_group_heads(1024, 12, 528), 1);     // at least one head
  EXPECT_EQ(schedule_group_heads(16, 3, 16), 1);
  EXPECT_EQ(schedule_group_heads(16, 3, 17), 2);
}

}  // namespace
}  // namespace gpt2::gpu::test
