// A mixed-integer program built column by column and row by row, then loaded into COIN-OR CBC's
// LP solver: what the `milp` strategy (milp.cc) and the selective reference (selective_exact.cc)
// share. Only with MEMPLAN_HAVE_CBC.
#pragma once

#ifdef MEMPLAN_HAVE_CBC
#include <CoinMessageHandler.hpp>
#include <CoinPackedMatrix.hpp>
#include <CoinPackedVector.hpp>
#include <OsiClpSolverInterface.hpp>
#include <utility>
#include <vector>

namespace memplan::planner {

class CbcProblem {
 public:
  int AddColumn(double lo, double hi, double cost, bool integer) {
    col_lo_.push_back(lo);
    col_hi_.push_back(hi);
    cost_.push_back(cost);
    integer_.push_back(integer);
    return static_cast<int>(col_lo_.size() - 1);
  }
  void AddRow(const std::vector<std::pair<int, double>>& terms, double lo, double hi) {
    CoinPackedVector v;
    for (const auto& [col, coef] : terms) {
      if (coef != 0) v.insert(col, coef);
    }
    rows_.push_back(v);
    row_lo_.push_back(lo);
    row_hi_.push_back(hi);
  }
  size_t columns() const { return col_lo_.size(); }
  // The program, quiet, in `solver` (a CbcModel built on it copies it).
  void Load(OsiClpSolverInterface& solver) const {
    CoinPackedMatrix matrix(false, 0, 0);
    matrix.setDimensions(0, static_cast<int>(col_lo_.size()));
    for (const CoinPackedVector& r : rows_) matrix.appendRow(r);
    solver.loadProblem(matrix, col_lo_.data(), col_hi_.data(), cost_.data(), row_lo_.data(),
                       row_hi_.data());
    for (size_t c = 0; c < integer_.size(); ++c) {
      if (integer_[c]) solver.setInteger(static_cast<int>(c));
    }
    solver.messageHandler()->setLogLevel(0);
  }

 private:
  std::vector<double> col_lo_, col_hi_, cost_, row_lo_, row_hi_;
  std::vector<bool> integer_;
  std::vector<CoinPackedVector> rows_;
};

}  // namespace memplan::planner
#endif
