// Expert record layout (see expert_record.hpp).
#include "weights/expert_record.hpp"

namespace deltafin {

const TensorRef& record_part_tensor(const ExpertRef& expert, int part) {
  const MatrixRef& m = expert.proj[part / 2];
  return part % 2 ? m.scale : m.weight;
}

RecordLayout record_layout(const ExpertRef& expert) {
  RecordLayout layout;
  uint64_t cursor = 0;
  for (int part = 0; part < 6; ++part) {
    const TensorRef& t = record_part_tensor(expert, part);
    if (!t.info) continue;
    layout.offset[part] = cursor;
    layout.nbytes[part] = t.info->nbytes;
    layout.payload = cursor + t.info->nbytes;
    cursor = round_up(layout.payload, 64);
  }
  return layout;
}

std::array<WeightView, 3> record_views(const ExpertRef& expert, const RecordLayout& layout, const std::byte* record) {
  std::array<WeightView, 3> views;
  for (int p = 0; p < 3; ++p) {
    const MatrixRef& m = expert.proj[p];
    views[p].format = m.format;
    views[p].rows = m.rows;
    views[p].cols = m.cols;
    views[p].data = record + layout.offset[2 * p];
    if (layout.nbytes[2 * p + 1]) views[p].scales = record + layout.offset[2 * p + 1];
  }
  return views;
}

}  // namespace deltafin
