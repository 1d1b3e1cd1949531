#include "schedules/action.hpp"

namespace tandem::schedules {

const char* to_string(Op op) {
  switch (op) {
    case Op::F:
      return "F";
    case Op::B:
      return "B";
    case Op::W:
      return "W";
    case Op::STEP:
      return "STEP";
    case Op::SYNC:
      return "SYNC";
  }
  return "?";
}

std::string to_string(const Slice& slice) {
  // Built with += : GCC 12 warns falsely (-Wrestrict) on "literal" + std::string chains.
  std::string out(1, '[');
  out += std::to_string(slice.begin);
  out += ',';
  out += std::to_string(slice.end);
  out += ')';
  return out;
}

std::string to_string(const Action& action) {
  std::string out = to_string(action.op);
  if (action.op == Op::STEP || action.op == Op::SYNC) {
    return out + "(round " + std::to_string(action.minibatch) + ")";
  }
  out += "(mb " + std::to_string(action.minibatch) + ", [" + std::to_string(action.slice.begin) +
         "," + std::to_string(action.slice.end) + ")";
  if (action.chunk != 0) out += ", chunk " + std::to_string(action.chunk);
  return out + ")";
}

}  // namespace tandem::schedules
