#pragma once
// The group of a collective as its implementations name and check it (GlooCollectives,
// NcclCollectives): the same words in their errors and the same store keys for the same group.
#include <span>
#include <string>

#include "transport/channel.hpp"

namespace tandem::transport {

// "3,5,7" (with `separator` ","): the members in the group's order.
std::string members_text(std::span<const Endpoint> group, const char* separator);

// The members spelled out, or, for a group too large for a rendezvous key (kMaxTextField), its
// ends, its size and a hash of all its members.
std::string group_key(std::span<const Endpoint> group);

// The index of `member` in `group`, which is its rank in the group's communicator. Throws
// std::invalid_argument, starting with `where`, when it is not a member or the group names a
// member twice.
int member_rank(std::span<const Endpoint> group, Endpoint member, const std::string& where);

}  // namespace tandem::transport
