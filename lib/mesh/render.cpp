// Rendering meshes and shardings as text.
#include "mesh/render.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace spmd {

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int u = 0;
  while (value >= 1024.0 && u < 4) {
    value /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, units[u]);
}

std::string render_mesh(const Mesh& mesh) {
  const auto& shape = mesh.shape();
  const auto& axes = mesh.axes();
  int64_t rows = shape[0];
  int64_t cols = mesh.size() / rows;
  // Column labels: coordinates along the remaining axes.
  std::vector<std::string> col_labels;
  for (int64_t c = 0; c < cols; ++c) {
    auto coords = mesh.coords(c);
    std::vector<std::string> parts;
    for (size_t a = 1; a < axes.size(); ++a) parts.push_back(fmt::format("{}={}", axes[a], coords[a]));
    col_labels.push_back(parts.empty() ? std::string("") : fmt::format("{}", fmt::join(parts, ",")));
  }
  size_t width = 4;
  for (const auto& l : col_labels) width = std::max(width, l.size() + 1);
  std::string row_header = fmt::format("{}=", axes[0]);
  size_t row_width = row_header.size() + std::to_string(rows - 1).size() + 1;
  std::string out = fmt::format("{:<{}}", "", row_width);
  for (const auto& l : col_labels) out += fmt::format("{:>{}}", l, width);
  out += "\n";
  for (int64_t r = 0; r < rows; ++r) {
    out += fmt::format("{:<{}}", fmt::format("{}{}", row_header, r), row_width);
    for (int64_t c = 0; c < cols; ++c) out += fmt::format("{:>{}}", r * cols + c, width);
    out += "\n";
  }
  return out;
}

std::string render_sharding(const NamedSharding& sharding) {
  const auto& shape = sharding.global_shape();
  SPMD_CHECK(shape.size() == 1 || shape.size() == 2,
             "--show {}: only 1-D and 2-D arrays can be drawn; it has shape {}", sharding.tensor_name(), shape);
  const bool two_d = shape.size() == 2;
  const int64_t block_rows = sharding.num_shards(0);
  const int64_t block_cols = two_d ? sharding.num_shards(1) : 1;
  const auto block_shape = sharding.shard_shape();
  // Which ranks hold block (i, j).
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> holders;
  for (int64_t rank = 0; rank < sharding.mesh().size(); ++rank) {
    auto offset = sharding.shard_offset(rank);
    int64_t i = offset[0] / block_shape[0];
    int64_t j = two_d ? offset[1] / block_shape[1] : 0;
    holders[{i, j}].push_back(rank);
  }
  auto cell_text = [&](int64_t i, int64_t j) {
    return fmt::format("rank {}", fmt::join(holders[{i, j}], ","));
  };
  auto range_text = [&](int64_t i, int64_t j) {
    std::string rows = fmt::format("[{}:{}]", i * block_shape[0], (i + 1) * block_shape[0]);
    if (!two_d) return rows;
    return fmt::format("{}[{}:{}]", rows, j * block_shape[1], (j + 1) * block_shape[1]);
  };
  size_t width = 0;
  for (int64_t i = 0; i < block_rows; ++i)
    for (int64_t j = 0; j < block_cols; ++j)
      width = std::max({width, cell_text(i, j).size(), range_text(i, j).size()});
  width += 2;
  std::string border = "+";
  for (int64_t j = 0; j < block_cols; ++j) border += std::string(width, '-') + "+";
  std::string out = fmt::format("{} {} {}\n", sharding.tensor_name(), fmt::format("{}", shape),
                                sharding.spec().to_string());
  out += border + "\n";
  for (int64_t i = 0; i < block_rows; ++i) {
    for (int line = 0; line < 2; ++line) {
      out += "|";
      for (int64_t j = 0; j < block_cols; ++j)
        out += fmt::format("{:^{}}|", line == 0 ? cell_text(i, j) : range_text(i, j), width);
      out += "\n";
    }
    out += border + "\n";
  }
  return out;
}

}  // namespace spmd
