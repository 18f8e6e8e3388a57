// Divisibility errors phrased as the settings that would fix them.
#include "mesh/size_hint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace spmd {

namespace {
// The source of `logical` whose current size is `size` (an axis may have several: query and
// key/value heads), else its first.
const SizeSource* find_source(const std::vector<SizeSource>& sources, const std::string& logical, int64_t size) {
  const SizeSource* first = nullptr;
  for (const auto& s : sources) {
    if (s.logical != logical) continue;
    if (s.size_of(s.value) == size) return &s;
    if (!first) first = &s;
  }
  return first;
}

bool works(const SizeSource& source, int64_t value, int64_t parts) {
  const int64_t size = source.size_of(value);
  return size > 0 && size % parts == 0;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n && out.size() < 8; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// "1, 2 or 4"
std::string or_list(const std::vector<int64_t>& values) {
  if (values.size() <= 1) return fmt::format("{}", fmt::join(values, ""));
  std::vector<int64_t> head(values.begin(), values.end() - 1);
  return fmt::format("{} or {}", fmt::join(head, ", "), values.back());
}

// "mesh axis 'model' of size 3" / "mesh axes 'data' x 'model' of sizes 2 x 3 = 6"
std::string axes_text(const Mesh& mesh, const std::vector<std::string>& axes) {
  if (axes.size() == 1) return fmt::format("mesh axis '{}' of size {}", axes[0], mesh.axis_size(axes[0]));
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (const auto& a : axes) {
    names.push_back("'" + a + "'");
    sizes.push_back(mesh.axis_size(a));
  }
  return fmt::format("mesh axes {} of sizes {} = {}", fmt::join(names, " x "), fmt::join(sizes, " x "),
                     mesh.axes_size(axes));
}

std::string indivisible_message(const Mesh& mesh, const std::vector<std::string>& axes, int64_t size, size_t dim,
                                const std::string& logical, const SizeSource* source, const std::string& tensor) {
  const int64_t parts = mesh.axes_size(axes);
  std::string what = fmt::format("size {}", size);
  if (source && source->formula == source->key) what = fmt::format("{} = {}", source->key, source->value);
  else if (source) what = fmt::format("size {} = {}, {} = {}", size, source->formula, source->key, source->value);
  std::vector<std::string> fixes;
  if (source) {
    auto values = nearest_working_values(*source, parts);
    if (!values.empty())
      fixes.push_back(fmt::format("set {} to {}{}", source->key, or_list(values),
                                  source->note.empty() ? "" : " (" + source->note + ")"));
  }
  const std::string axis_word = axes.size() == 1 ? fmt::format("make mesh axis '{}'", axes[0])
                                                 : fmt::format("make the product of mesh axes {}", fmt::join(axes, " x "));
  fixes.push_back(fmt::format("{} {} in mesh.shape", axis_word, or_list(divisors(size))));
  if (!logical.empty()) fixes.push_back(fmt::format("map {} to null in sharding_rules", logical));
  return fmt::format("{}: dim {} (logical axis '{}', {}) does not divide over {}; {}", tensor, dim,
                     logical.empty() ? "-" : logical, what, axes_text(mesh, axes), fmt::join(fixes, ", or "));
}
}  // namespace

std::vector<int64_t> nearest_working_values(const SizeSource& source, int64_t parts) {
  std::vector<int64_t> out;
  for (int64_t v = source.value - 1; v >= 1; --v)
    if (works(source, v, parts)) {
      out.push_back(v);
      break;
    }
  // Some value within `parts` steps of a multiple always works for the plain and scaled sizes;
  // the bound keeps a source whose sizes never divide from looping forever.
  const int64_t limit = source.value + 64 * parts;
  for (int64_t v = source.value + 1; v <= limit; ++v)
    if (works(source, v, parts)) {
      out.push_back(v);
      break;
    }
  return out;
}

void check_dims_divide(const Mesh& mesh, const PartitionSpec& spec, const std::vector<int64_t>& shape,
                       const std::vector<std::string>& logical, const std::vector<SizeSource>& sources,
                       const std::string& tensor_name) {
  for (size_t d = 0; d < spec.dims.size() && d < shape.size(); ++d) {
    const auto& axes = spec.dims[d];
    for (const auto& a : axes)
      if (!mesh.has_axis(a)) return;  // NamedSharding names the unknown axis
    if (axes.empty() || shape[d] % mesh.axes_size(axes) == 0) continue;
    const std::string name = d < logical.size() ? logical[d] : "";
    throw UsageError(indivisible_message(mesh, axes, shape[d], d, name, find_source(sources, name, shape[d]), tensor_name));
  }
}

}  // namespace spmd
