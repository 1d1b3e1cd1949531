#pragma once
// The pipeline's messages that travel between processes (actors/messages.hpp), as a data plane
// lists them: both ends of every channel of a pipeline spread over processes use this list.
#include "transport/wire_message.hpp"

namespace tandem::actors {

transport::WireTypes pipeline_wire_types();

}  // namespace tandem::actors
