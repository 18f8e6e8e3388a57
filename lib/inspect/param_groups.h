// Rows of spmd-inspect's parameter table with repeated blocks folded: the parameters of blocks
// 0..11 that are laid out alike become one row, h.{0..11}.attn.c_attn.weight x12.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spmd {

struct ParamRow {
  std::string name;                // h.3.attn.c_attn.weight
  std::vector<std::string> cells;  // the other columns; rows fold only when these are equal
};

struct FoldedRow {
  std::string name;                // h.{0..11}.attn.c_attn.weight (the name itself when alone)
  std::vector<std::string> cells;
  int64_t count = 1;
};

// Folds rows whose names differ only in the block index after a leading "<prefix>." (h.0., h.1.,
// ...) and whose cells are equal; keeps the order of first appearance.
std::vector<FoldedRow> fold_repeated_blocks(const std::vector<ParamRow>& rows);

}  // namespace spmd
