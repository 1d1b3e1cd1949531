#include "tandem/tandem.hpp"

namespace tandem {

// TANDEM_VERSION comes from the project's version in the top CMakeLists.txt.
std::string_view version() {
  return TANDEM_VERSION;
}

}  // namespace tandem
